"""``PCA``: principal component analysis with scikit-learn's estimator API, on the GPU.

The class follows scikit-learn's estimator protocol (``get_params``/``set_params``, tags,
``set_output``, ``n_features_in_``, its error messages) without importing scikit-learn, so
``import gpulinalg.decomp`` stays fast; scikit-learn is only imported when present and needed
(tags, ``NotFittedError``, global ``transform_output``).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime import validation as _v
from . import _pca_cuda, _pca_host
from ._ooc_source import HostMatrix
from ._pca_solvers import SOLVERS, FitConfig, resolve_solver
from ._sketch_options import seed_of

__all__ = ["PCA"]


class _Estimator:
    """scikit-learn's estimator protocol: parameters are the ``__init__`` arguments."""

    @classmethod
    def _get_param_names(cls):
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params: Any) -> _Estimator:
        valid = self._get_param_names()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"Invalid parameter {key!r} for estimator {self!r}. "
                                 f"Valid parameters are: {valid!r}.")
            setattr(self, key, value)
        return self

    def __repr__(self):
        defaults = {p.name: p.default for p in
                    inspect.signature(type(self).__init__).parameters.values()}
        changed = [f"{k}={v!r}" for k, v in self.get_params().items()
                   if not _same(v, defaults.get(k))]
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_tags__(self):
        from sklearn.utils import InputTags, Tags, TargetTags, TransformerTags
        return Tags(estimator_type=None, target_tags=TargetTags(required=False),
                    transformer_tags=TransformerTags(preserves_dtype=["float64", "float32"]),
                    input_tags=InputTags(sparse=False, allow_nan=False))


def _same(a, b):
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # arrays and other values without a plain truth value
        return a is b


def _not_fitted(name):
    try:
        from sklearn.exceptions import NotFittedError
    except ImportError:
        NotFittedError = _NotFittedError
    return NotFittedError(f"This {name} instance is not fitted yet. Call 'fit' with "
                          "appropriate arguments before using this estimator.")


class _NotFittedError(ValueError, AttributeError):
    """Raised by an unfitted estimator when scikit-learn is absent."""


class PCA(_Estimator):
    """Principal component analysis (scikit-learn's ``PCA``), computed on the GPU.

    Parameters
    ----------
    n_components : int, float in (0, 1), or None, default None
        Components kept: an int; a fraction of the variance to explain (``full`` and
        ``covariance_eigh`` solvers); ``None``: ``min(n_samples, n_features)``.
    whiten : bool, default False
        Scale the projections to unit variance.
    svd_solver : {"auto", "full", "covariance_eigh", "randomized"}, default "auto"
        ``auto`` (scikit-learn's rule, resolved by :func:`resolve_solver` and stored in
        ``fit_svd_solver_``): ``covariance_eigh`` when ``n_features <= 1000`` and
        ``n_samples >= 10 n_features``; else ``full`` when ``max(shape) <= 500`` or
        ``n_components`` is a fraction; else ``randomized`` when ``n_components < 0.8
        min(shape)``; else ``full``.
    n_oversamples : int, default 10
    iterated_power : int or "auto", default "auto"
        Power iterations of the randomized solver (``auto``: 7 when ``n_components < 0.1
        min(shape)``, else 4).
    random_state : None, int, numpy Generator or RandomState

    Attributes
    ----------
    components_ : (n_components, n_features) array
    explained_variance_, explained_variance_ratio_, singular_values_ : (n_components,) arrays
    mean_ : (n_features,) array
    n_components_, n_samples_, n_features_in_ : int
    noise_variance_ : float
    fit_svd_solver_ : str
        The solver ``svd_solver="auto"`` resolved to.

    See Also
    --------
    gpulinalg.decomp.truncated_svd : the randomized SVD the ``randomized`` solver runs, without
        centering (and for sparse input).
    sklearn.decomposition.PCA : the reference estimator.

    Notes
    -----
    Signs are deterministic: the largest-magnitude entry of each row of ``components_`` is
    positive. A host matrix that is not in memory (``np.memmap``, an h5py or zarr dataset) is
    fitted and transformed out of core, streamed in row panels; so is one larger than the GPU
    budget. Fitted attributes are arrays of the package ``fit`` was given (NumPy or CuPy).

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
    """

    def __init__(self, n_components: int | float | None = None, *, whiten: bool = False,
                 svd_solver: str = "auto", n_oversamples: int = 10,
                 iterated_power: int | str = "auto",
                 random_state: None | int | np.random.Generator | np.random.RandomState = None
                 ) -> None:
        self.n_components = n_components
        self.whiten = whiten
        self.svd_solver = svd_solver
        self.n_oversamples = n_oversamples
        self.iterated_power = iterated_power
        self.random_state = random_state

    # ---- fitting ----------------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None) -> PCA:
        """Fit the model on ``X`` (n_samples, n_features). Returns ``self``.

        ``y`` is ignored (scikit-learn's signature)."""
        self._fit(X, want_scores=False)
        return self

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit, and return the projections of ``X`` (computed from the same SVD)."""
        scores = self._fit(X, want_scores=True)
        if scores is None:
            return self.transform(X)
        return self._wrap(scores, X)

    def _fit(self, X, want_scores):
        X, kind, like = _validate(X, self)
        n_samples, n_features = X.shape
        self._check_params()
        solver, k = resolve_solver(self.svd_solver, X.shape, self.n_components)
        cfg = _fit_config(self, solver, k, X.dtype, want_scores)
        host = kind == "host"
        nbytes = _fit_bytes(X.shape, cfg, host)
        result = _dispatch.dispatch(
            "decomp.pca_fit", _pca_cuda.fit, _pca_host.fit, (X, cfg), nbytes=nbytes,
            flops=4.0 * n_samples * n_features * min(n_samples, n_features),
            oversize_fn=_pca_cuda.fit_streamed if host else None, like=like)
        self._store(result, solver, n_samples, n_features)
        return result.get("scores")

    def _check_params(self):
        if self.svd_solver not in SOLVERS:
            raise ValueError(f"svd_solver must be one of {SOLVERS}, got {self.svd_solver!r}")
        if not isinstance(self.whiten, (bool, np.bool_)):
            raise ValueError(f"whiten must be a bool, got {self.whiten!r}")

    def _store(self, r, solver, n_samples, n_features):
        self.fit_svd_solver_ = solver
        self.mean_ = r["mean"]
        self.components_ = r["components"]
        self.singular_values_ = r["singular_values"]
        self.explained_variance_ = r["explained_variance"]
        self.explained_variance_ratio_ = r["explained_variance_ratio"]
        self.noise_variance_ = float(r["noise_variance"])
        self.n_components_ = int(self.components_.shape[0])
        self.n_samples_ = int(n_samples)
        self.n_features_in_ = int(n_features)

    # ---- using the model --------------------------------------------------------------------
    def transform(self, X: Any) -> Any:
        """Project ``X`` on the components: ``(X - mean_) @ components_.T`` (whitened if asked)."""
        self._check_fitted()
        X, _, like = _validate(X, self, reset=False)
        comp = self.components_
        ev = self.explained_variance_ if self.whiten else None
        host = isinstance(X, HostMatrix)
        out = _dispatch.dispatch("decomp.pca_transform", _pca_cuda.transform, _pca_host.transform,
                                 (X, comp, self.mean_, ev), nbytes=_transform_bytes(X, comp),
                                 oversize_fn=_pca_cuda.transform_streamed if host else None,
                                 like=like)
        return self._wrap(out, X)

    def inverse_transform(self, X: Any) -> Any:
        """Map projections back to feature space: ``X @ components_ + mean_`` (the components
        scaled by ``sqrt(explained_variance_)`` when whitened); in the package of
        ``components_``."""
        self._check_fitted()
        X = _v.as_array(X, "X", min_ndim=2, max_ndim=2)
        comp = self.components_
        if X.shape[1] != comp.shape[0]:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} has "
                             f"{comp.shape[0]} components")
        m, (k, n) = X.shape[0], comp.shape
        ev = self.explained_variance_ if self.whiten else None
        return _dispatch.dispatch(
            "decomp.pca_inverse_transform", _pca_cuda.inverse_transform,
            _pca_host.inverse_transform, (X, comp, self.mean_, ev),
            nbytes=(m * k + k * n + m * n + 2 * n) * comp.dtype.itemsize, flops=2.0 * m * k * n,
            like=comp)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """``["pca0", "pca1", ...]``."""
        self._check_fitted()
        return np.asarray([f"pca{i}" for i in range(self.n_components_)], dtype=object)

    def set_output(self, *, transform: str | None = None) -> PCA:
        """Output container of ``transform``/``fit_transform``: ``"default"`` or ``"pandas"``."""
        if transform not in (None, "default", "pandas"):
            raise ValueError(f"transform must be 'default', 'pandas' or None, got {transform!r}")
        if transform is not None:
            self._output = transform
        return self

    def _check_fitted(self):
        if not hasattr(self, "components_"):
            raise _not_fitted(type(self).__name__)

    def _wrap(self, out, X):
        mode = getattr(self, "_output", None)
        if mode is None and "sklearn" in sys.modules:
            mode = sys.modules["sklearn"].get_config().get("transform_output", "default")
        if mode != "pandas":
            return out
        import pandas as pd
        return pd.DataFrame(_arrays.to_host(out), columns=self.get_feature_names_out(),
                            index=getattr(X, "index", None))


def _validate(X, est, reset=True):
    """scikit-learn's checks and messages; returns ``(X or HostMatrix, kind, like)``."""
    name = type(est).__name__
    if hasattr(X, "tocsr") and hasattr(X, "nnz"):
        raise TypeError(f"{name} does not support sparse input (a {type(X).__name__}); "
                        "use gpulinalg.decomp.truncated_svd for sparse data")
    like = X if _arrays.is_array(X) else None
    if _arrays.kind_of(X) is None and hasattr(X, "shape") and hasattr(X, "dtype") \
            and hasattr(X, "__getitem__") and len(X.shape) == 2 and \
            np.dtype(X.dtype).kind in "biuf":
        X = HostMatrix(X, _v.float_dtype(np.dtype(X.dtype), allowed=(np.float32, np.float64)))
        _check_shape(X.shape, est, reset)
        return X, "host", None
    X = _as_float_array(X)
    if X.ndim != 2:
        raise ValueError(f"Expected 2D array, got {X.ndim}D array instead. Reshape your data "
                         "either using X.reshape(-1, 1) if it has a single feature or "
                         "X.reshape(1, -1) if it contains a single sample.")
    _check_shape(tuple(X.shape), est, reset)
    if X.shape[0] and X.shape[1]:
        xp = _v.namespace(X)
        if not bool(xp.isfinite(X).all()):
            raise ValueError(f"Input X contains NaN or infinity ({name} does not accept "
                             "missing values).")
    if _arrays.on_gpu(X):
        return X, "array", like
    host = _arrays.to_host(X)
    return HostMatrix(host, host.dtype), "host", like if like is not None else host


def _as_float_array(X):
    k = _arrays.kind_of(X)
    if k is None or k is _arrays.Kind.NUMPY:
        X = np.asarray(X)
        if X.dtype.kind in "OUS":
            X = X.astype(np.float64)  # NumPy's TypeError/ValueError name the bad entry
        k = _arrays.Kind.NUMPY
    dt = _v._np_dtype(X)
    if dt.kind == "c":
        raise ValueError("Complex data not supported")
    X = _v.as_array(X, "X")
    target = np.float32 if dt == np.float32 else np.float64
    if dt != target:
        X = X.astype(target) if k is not _arrays.Kind.TORCH else \
            X.to(getattr(sys.modules["torch"], "float64"))
    return X


def _check_shape(shape, est, reset):
    if shape[0] < 1:
        raise ValueError(f"Found array with {shape[0]} sample(s) (shape={shape}) while a "
                         "minimum of 1 is required.")
    if shape[1] < 1:
        raise ValueError(f"Found array with {shape[1]} feature(s) (shape={shape}) while a "
                         "minimum of 1 is required.")
    if reset:
        est.n_features_in_ = int(shape[1])
    elif shape[1] != est.n_features_in_:
        raise ValueError(f"X has {shape[1]} features, but {type(est).__name__} is expecting "
                         f"{est.n_features_in_} features as input.")


def _fit_config(est, solver, k, dtype, want_scores):
    power = est.iterated_power
    if power != "auto" and (isinstance(power, bool) or not isinstance(power, (int, np.integer))
                            or power < 0):
        raise ValueError(f"iterated_power must be 'auto' or an int >= 0, got {power!r}")
    over = est.n_oversamples
    if isinstance(over, bool) or not isinstance(over, (int, np.integer)) or over < 1:
        raise ValueError(f"n_oversamples must be an int >= 1, got {over!r}")
    return FitConfig(solver, k, int(over), power, seed_of(est.random_state), np.dtype(dtype),
                     bool(want_scores), bool(est.whiten),
                     fraction=float(est.n_components) if k is None else None)


def _fit_bytes(shape, cfg, host):
    m, n = shape
    item = cfg.dtype.itemsize
    small = min(m, n)
    if cfg.solver == "full":
        work = (2 * m * n + (m + n) * small) * item
    elif cfg.solver == "covariance_eigh":
        work = m * n * item + 3 * n * n * 8
    else:
        work = m * n * item + (m + n) * (cfg.n_oversamples + min(cfg.k or 1, small)) * 24
    return int(work + (m * n * item if host else 0))


def _transform_bytes(X, comp):
    m, n = X.shape
    k, n_comp = comp.shape  # components_ may be a torch tensor, whose .size is a method
    return int((m * n + m * k + k * n_comp) * comp.dtype.itemsize * 2)
