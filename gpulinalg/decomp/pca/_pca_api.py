"""``PCA``: principal component analysis, scikit-learn's estimator computed on the GPU.

The class is made on first use (``gpulinalg.decomp.PCA`` is loaded lazily) with
scikit-learn's bases, so ``import gpulinalg.decomp`` neither imports nor needs scikit-learn;
without it, constructing ``PCA`` raises an ImportError naming the ``gpulinalg[sklearn]``
extra. The methods live on :class:`_PCA`; :mod:`._pca_sklearn` adds the bases.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime import validation as _v
from .._tiles import _graph_dask
from . import _pca_cuda, _pca_host, _pca_sklearn
from ..lowrank import _randomized_dask
from .._checks import check_dask, is_dask
from ._pca_input import _check_shape, validate, validate_projections
from ._pca_solvers import FitConfig, resolve_solver
from ..lowrank._sketch_options import seed_of

__all__ = ["PCA"]  # noqa: F822  (made on first use by the module's __getattr__)


class _PCA:
    """Principal component analysis (scikit-learn's ``PCA``), computed on the GPU.

    Every parameter, method and fitted attribute of ``sklearn.decomposition.PCA`` (1.9), with
    its defaults; the class inherits scikit-learn's ``BaseEstimator``,
    ``ClassNamePrefixFeaturesOutMixin`` and ``TransformerMixin``.

    Parameters
    ----------
    n_components : int, float in (0, 1), "mle" or None, default None
        Components kept: an int; a fraction of the variance to explain; ``"mle"``: Minka's
        MLE (``full`` and ``covariance_eigh`` solvers); ``None``: ``min(n_samples,
        n_features)`` (minus one with ``arpack``).
    copy : bool, default True
        Accepted for scikit-learn compatibility: gpulinalg never modifies ``X`` (``False``
        does not center it in place).
    whiten : bool, default False
        Scale the projections to unit variance.
    svd_solver : {"auto", "full", "covariance_eigh", "arpack", "randomized"}, default "auto"
        ``auto`` (scikit-learn's rule, stored in ``fit_svd_solver_``): ``arpack`` for sparse
        input; ``covariance_eigh`` when ``n_features <= 1000`` and ``n_samples >= 10
        n_features``; else ``full`` when ``max(shape) <= 500`` or ``n_components`` is
        ``"mle"``; else ``randomized`` when ``1 <= n_components < 0.8 min(shape)``; else
        ``full``. Sparse input takes ``arpack`` and ``covariance_eigh`` only.
    tol : float, default 0.0
        Tolerance of ``arpack`` (0: machine precision).
    iterated_power : int or "auto", default "auto"
        Power iterations of the randomized solver (``auto``: 7 when ``n_components < 0.1
        min(shape)``, else 4).
    n_oversamples : int, default 10
        Extra sketch columns of the randomized solver.
    power_iteration_normalizer : {"auto", "QR", "LU", "none", "CholQR"}, default "auto"
        Normalization between power iterations (``auto``: ``CholQR``, a mixed-precision
        Cholesky QR, on the GPU; ``LU`` on the CPU, as scikit-learn).
    random_state : None, int, numpy RandomState or Generator, default None
        Seeds the randomized sketch (and the ARPACK start vector on the CPU).

    Attributes
    ----------
    components_ : (n_components, n_features) array
    explained_variance_, explained_variance_ratio_, singular_values_ : (n_components,) arrays
    mean_ : (n_features,) array
    n_components_, n_samples_, n_features_in_ : int
    noise_variance_ : float
    feature_names_in_ : (n_features,) array of str
        Only when ``X`` had string column names (a pandas DataFrame).
    fit_svd_solver_ : str
        The solver ``svd_solver="auto"`` resolved to (also ``_fit_svd_solver``, as
        scikit-learn).

    See Also
    --------
    gpulinalg.decomp.truncated_svd : the randomized SVD the ``randomized`` solver runs, without
        centering.
    sklearn.decomposition.PCA : the reference estimator.

    Notes
    -----
    Signs are deterministic and scikit-learn's (``svd_flip(u_based_decision=False)``): the
    largest-magnitude entry of each row of ``components_`` is positive, for every solver.
    The ``randomized`` solver draws its Gaussian sketch from gpulinalg's own generator (the
    same numbers on the CPU and the GPU for an integer ``random_state``), so it agrees with
    scikit-learn's to the accuracy of the method, not bit for bit. ``arpack`` runs SciPy's
    ARPACK on the CPU, as scikit-learn. On the GPU, dense input takes the exact SVD of the
    centered matrix on the device, truncated to ``n_components`` (scikit-learn's ``arpack``
    result is that top-``k`` SVD up to ``tol``; CuPy's ``svds`` crashes for
    ``n_components > min(shape) - 3`` and breaks down on rank-deficient input); sparse
    input takes CuPy's thick-restart Lanczos ``svds`` on the implicitly centered operator, one
    Rayleigh-Ritz step and a residual check, and is densified on the device for the exact
    route where ``n_components > min(shape) - 3`` or the check fails. ``covariance_eigh``
    centers the covariance in float64 also for float32 input: from scikit-learn's float32
    Gram matrix ``X^T X`` where the column means are small against their spreads, else from
    the data centered in float64 (no cancellation for data far from the origin). Float32
    input gives float32 attributes and projections; other dtypes are fitted in float64. A host
    matrix that is not in memory (``np.memmap``, an h5py or zarr dataset) is fitted and
    transformed out of core, streamed in row panels; so is one larger than the GPU budget
    (``arpack`` then takes the exact covariance route).
    Fitted attributes are arrays of the package ``fit`` was given (NumPy, CuPy or torch).

    A Dask array (chunked in any way) is fitted on its cluster by the randomized solver
    (``svd_solver`` ``"auto"`` or ``"randomized"``, ``n_components`` an int or ``None``,
    ``power_iteration_normalizer`` ``"auto"`` (``"CholQR"``), ``"CholQR"``, ``"QR"`` or
    ``"none"``; see docs/dask.md):
    ``X - mean`` is never formed, and the fitted attributes are computed in one
    ``dask.compute`` at the end of ``fit``, as NumPy or CuPy arrays (the chunks' package).
    ``transform`` and ``fit_transform`` of a Dask array return lazy Dask arrays (the
    projections are one more pass over ``X``).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import PCA
    >>> X = np.random.default_rng(0).standard_normal((200, 6)) @ np.diag([5, 3, 1, .5, .1, .1])
    >>> pca = PCA(n_components=2).fit(X)
    >>> pca.components_.shape, bool(pca.explained_variance_ratio_.sum() > 0.9)
    ((2, 6), True)
    >>> Z = pca.transform(X)
    >>> P = pca.components_.T @ pca.components_
    >>> bool(np.allclose(pca.inverse_transform(Z), (X - pca.mean_) @ P + pca.mean_))
    True
    >>> bool(np.allclose(pca.get_covariance() @ pca.get_precision(), np.eye(6)))
    True
    """

    def __init__(self, n_components: int | float | str | None = None, *, copy: bool = True,
                 whiten: bool = False, svd_solver: str = "auto", tol: float = 0.0,
                 iterated_power: int | str = "auto", n_oversamples: int = 10,
                 power_iteration_normalizer: str = "auto",
                 random_state: None | int | np.random.RandomState | np.random.Generator = None
                 ) -> None:
        self.n_components = n_components
        self.copy = copy
        self.whiten = whiten
        self.svd_solver = svd_solver
        self.tol = tol
        self.iterated_power = iterated_power
        self.n_oversamples = n_oversamples
        self.power_iteration_normalizer = power_iteration_normalizer
        self.random_state = random_state

    # ---- fitting ----------------------------------------------------------------------------
    @_dispatch.front_door("decomp.PCA.fit")
    def fit(self, X: Any, y: Any = None) -> Any:
        """Fit the model on ``X`` (n_samples, n_features): a dense array (NumPy, CuPy, torch),
        a host matrix, or a SciPy/CuPy sparse matrix. ``y`` is ignored. Returns ``self``."""
        self._fit(X, want_scores=False)
        return self

    @_dispatch.front_door("decomp.PCA.fit_transform")
    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit, and return the projections of ``X`` (from the same SVD where the solver
        computes one)."""
        scores = self._fit(X, want_scores=not is_dask(X))
        out = self._transform(X) if scores is None else scores
        return _pca_sklearn.wrap_output(self, out, X)

    def _fit(self, X, want_scores):
        _pca_sklearn.validate_params(self)
        if is_dask(X):
            return self._fit_dask(X)
        _pca_sklearn.check_feature_names(self, X, reset=True)
        X, kind, like = validate(X, self, reset=True, solver=self.svd_solver,
                                   defer_finite=True)
        n_samples, n_features = X.shape
        solver, k = resolve_solver(self.svd_solver, X.shape, self.n_components,
                                   sparse=kind == "sparse")
        cfg = FitConfig(solver, k, int(self.n_oversamples), self.iterated_power,
                        seed_of(self.random_state), _v.np_dtype(X), bool(want_scores),
                        bool(self.whiten), select=self.n_components if k is None else None,
                        normalizer=self.power_iteration_normalizer, tol=float(self.tol))
        host = kind == "host"
        result = _dispatch.dispatch(_dispatch.Op(
            "decomp.pca_fit", _pca_cuda.fit, _pca_host.fit, (X, cfg),
            nbytes=_fit_bytes(X, cfg, host),
            flops=4.0 * n_samples * n_features * min(n_samples, n_features),
            oversize_fn=_pca_cuda.fit_streamed if host else None, like=like))
        self._store(result, solver, n_samples)
        return result.get("scores")

    def _fit_dask(self, X):
        """Fit on a Dask array: the randomized PCA graph, computed once (scikit-learn's fitted
        attributes are concrete arrays)."""
        check_dask(X, "X")
        _pca_sklearn.check_feature_names(self, X, reset=True)
        solver, k = self.svd_solver, self.n_components
        if solver not in ("auto", "randomized"):
            raise ValueError(f"svd_solver={solver!r} is not supported for Dask arrays: use "
                             "'randomized' (or 'auto')")
        if k is not None and (isinstance(k, (str, float)) or
                              not isinstance(k, numbers.Integral)):
            raise ValueError(f"n_components={k!r} is not supported for Dask arrays: give an "
                             "int (or None for all)")
        n_samples, n_features = (int(d) for d in X.shape)
        _check_shape((n_samples, n_features), self, reset=True)
        if k is not None and not 0 <= k <= min(n_samples, n_features):
            raise ValueError(f"n_components={k} must be between 0 and min(n_samples, "
                             f"n_features)={min(n_samples, n_features)} with "
                             f"svd_solver='{solver}'")
        lazy = _dispatch.dispatch(_dispatch.Op(
            "decomp.pca_fit", _pca_cuda.fit, _pca_host.fit, (X, k),
            dict(n_oversamples=int(self.n_oversamples), iterated_power=self.iterated_power,
                 power_iteration_normalizer=self.power_iteration_normalizer,
                 random_state=seed_of(self.random_state)),
            dask_fn=_randomized_dask.pca))
        names = ("mean", "components", "singular_values", "explained_variance",
                 "explained_variance_ratio", "noise_variance")
        values = _graph_dask.compute(*(lazy[name] for name in names))
        self._store(dict(zip(names, values)), "randomized", n_samples)
        return None

    def _store(self, r, solver, n_samples):
        self.fit_svd_solver_ = self._fit_svd_solver = solver
        self.mean_ = r["mean"]
        self.components_ = r["components"]
        self.singular_values_ = r["singular_values"]
        self.explained_variance_ = r["explained_variance"]
        self.explained_variance_ratio_ = r["explained_variance_ratio"]
        self.noise_variance_ = float(r["noise_variance"])
        self.n_components_ = int(self.components_.shape[0])
        self.n_samples_ = int(n_samples)

    # ---- using the model --------------------------------------------------------------------
    @_dispatch.front_door("decomp.PCA.transform")
    def transform(self, X: Any) -> Any:
        """Project ``X`` on the components: ``(X - mean_) @ components_.T`` (divided by
        ``sqrt(explained_variance_)`` when whitened). Sparse ``X`` is never densified."""
        return _pca_sklearn.wrap_output(self, self._transform(X), X)

    def _transform(self, X):
        self._check_fitted()
        if is_dask(X):
            return self._transform_dask(X)
        _pca_sklearn.check_feature_names(self, X, reset=False)
        X, kind, like = validate(X, self, reset=False, defer_finite=True)
        comp = self.components_
        ev = self.explained_variance_ if self.whiten else None
        host = kind == "host"
        return _dispatch.dispatch(_dispatch.Op(
            "decomp.pca_transform", _pca_cuda.transform, _pca_host.transform,
            (X, comp, self.mean_, ev), nbytes=_transform_bytes(X, comp),
            flops=2.0 * X.shape[0] * X.shape[1] * comp.shape[0],
            oversize_fn=_pca_cuda.transform_streamed if host else None, like=like))

    def _transform_dask(self, X):
        """Lazy projections of a Dask array (``X - mean_`` never formed)."""
        check_dask(X, "X")
        _pca_sklearn.check_feature_names(self, X, reset=False)
        _check_shape(tuple(int(d) for d in X.shape), self, reset=False)
        scale = None
        if self.whiten:
            xp = _v.namespace(self.explained_variance_)
            scale = 1 / xp.sqrt(self.explained_variance_)
        return _dispatch.dispatch(_dispatch.Op(
            "decomp.pca_transform", _pca_cuda.transform, _pca_host.transform,
            (X, self.components_, self.mean_, scale), dask_fn=_randomized_dask.transform))

    @_dispatch.front_door("decomp.PCA.inverse_transform")
    def inverse_transform(self, X: Any) -> Any:
        """Map projections back to feature space: ``X @ components_ + mean_`` (the components
        scaled by ``sqrt(explained_variance_)`` when whitened); in the package of
        ``components_``. NaN or infinity in ``X`` raise a ValueError (scikit-learn's)."""
        self._check_fitted()
        comp = self.components_
        X = validate_projections(X, comp.shape[0], type(self).__name__)
        m, (k, n) = X.shape[0], comp.shape
        ev = self.explained_variance_ if self.whiten else None
        return _dispatch.dispatch(_dispatch.Op(
            "decomp.pca_inverse_transform", _pca_cuda.inverse_transform,
            _pca_host.inverse_transform, (X, comp, self.mean_, ev),
            nbytes=(m * k + k * n + m * n + 2 * n) * comp.dtype.itemsize, flops=2.0 * m * k * n,
            like=comp))

    def get_covariance(self) -> Any:
        """The model's data covariance ``components_.T diag(explained_variance_ - noise)
        components_ + noise_variance_ I`` (n_features, n_features)."""
        return self._model("decomp.pca_covariance", _pca_cuda.covariance, _pca_host.covariance)

    def get_precision(self) -> Any:
        """The inverse of :meth:`get_covariance`, by the matrix inversion lemma."""
        return self._model("decomp.pca_precision", _pca_cuda.precision, _pca_host.precision)

    def _model(self, op, gpu_fn, cpu_fn):
        self._check_fitted()
        comp = self.components_
        k, n = comp.shape
        return _dispatch.dispatch(_dispatch.Op(
            op, gpu_fn, cpu_fn, (comp, self.explained_variance_, self.noise_variance_,
                                 bool(self.whiten)),
            nbytes=(3 * n * n + 2 * k * n) * comp.dtype.itemsize, flops=2.0 * k * n * n,
            like=comp))

    def score_samples(self, X: Any) -> Any:
        """Log-likelihood of each sample under the probabilistic PCA model (Tipping & Bishop):
        a (n_samples,) array."""
        self._check_fitted()
        _pca_sklearn.check_feature_names(self, X, reset=False)
        X, kind, like = validate(X, self, reset=False, solver="full", defer_finite=True)
        comp = self.components_
        m, n = X.shape
        return _dispatch.dispatch(_dispatch.Op(
            "decomp.pca_score_samples", _pca_cuda.score_samples, _pca_host.score_samples,
            (X, self.mean_, comp, self.explained_variance_, self.noise_variance_,
             bool(self.whiten)),
            nbytes=(2 * m * n + 3 * n * n) * comp.dtype.itemsize, flops=2.0 * m * n * n,
            like=like if like is not None else comp))

    def score(self, X: Any, y: Any = None) -> float:
        """Average log-likelihood of the samples of ``X`` (``y`` is ignored)."""
        return float(self.score_samples(X).mean())

    @property
    def _n_features_out(self) -> int:
        return int(self.components_.shape[0])

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "components_")

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()  # type: ignore[misc]
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        # arpack (what "auto" picks for sparse input) keeps a whole number of components
        whole = self.n_components is None or isinstance(self.n_components, numbers.Integral)
        tags.input_tags.sparse = self.svd_solver == "covariance_eigh" or (
            self.svd_solver in ("auto", "arpack") and whole)
        return tags

    def _check_fitted(self):
        if not hasattr(self, "components_"):
            raise _pca_sklearn.not_fitted(type(self).__name__)


def _fit_bytes(X, cfg, host):
    m, n = X.shape
    item = cfg.dtype.itemsize
    small = min(m, n)
    k = min(cfg.k or small, small)
    nnz = getattr(X, "nnz", None)
    data = m * n * item if nnz is None else nnz * (item + 8) + (m + 1) * 8
    if cfg.solver == "full":
        work = data + (m * n + (m + n) * small) * item
    elif cfg.solver == "covariance_eigh":
        work = data + 3 * n * n * 8
    elif cfg.solver == "arpack":
        work = 2 * data + (m + n) * (2 * k + 32) * 8
    else:
        work = data + (m + n) * (cfg.n_oversamples + k) * 24
    return int(work + (m * n * item if host else 0))


def _transform_bytes(X, comp):
    m, n = X.shape
    k, n_comp = comp.shape  # components_ may be a torch tensor, whose .size is a method
    return int((m * n + m * k + k * n_comp) * comp.dtype.itemsize * 2)


def __getattr__(name: str) -> Any:
    if name == "PCA":
        cls = _pca_sklearn.build(_PCA, "PCA", __name__)
        globals()["PCA"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
