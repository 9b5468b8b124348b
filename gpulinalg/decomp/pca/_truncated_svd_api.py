"""``TruncatedSVD``: scikit-learn's estimator (``sklearn.decomposition.TruncatedSVD``) on
decomp's :func:`~gpulinalg.decomp.truncated_svd` (the randomized range finder, dispatched: GPU
or CPU, dense or sparse input); ``algorithm="arpack"`` is SciPy's ``svds``, as scikit-learn's."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._runtime import arrays as _arrays
from ..._runtime import dispatch as _dispatch
from ..._runtime.validation import float_dtype, np_dtype
from ..lowrank._truncated_api import truncated_svd
from . import _pca_sklearn, _truncated_svd_host
from ._pca_input import validate

__all__ = ["TruncatedSVD"]  # noqa: F822  (made on first use by the module's __getattr__)


class _TruncatedSVD:
    """Dimensionality reduction by a truncated SVD, as ``sklearn.decomposition.TruncatedSVD``
    (no centring: it works on sparse matrices as they are).

    Parameters
    ----------
    n_components : int, default 2
    algorithm : {"randomized", "arpack"}, default "randomized"
        ``"randomized"``: :func:`gpulinalg.decomp.truncated_svd` (on the GPU where it pays);
        ``"arpack"``: SciPy's ``svds`` on the CPU.
    n_iter : int, default 5
        Power iterations of the randomized solver.
    n_oversamples : int, default 10
    power_iteration_normalizer : {"auto", "QR", "LU", "none", "CholQR"}, default "auto"
    random_state : None, int, numpy.random.RandomState or numpy.random.Generator
    tol : float, default 0.0
        ARPACK's tolerance (the randomized solver ignores it).

    Attributes
    ----------
    components_ : (n_components, n_features) array
        In the input's package and on its device: a CuPy array or torch tensor is fitted and
        answered in that package (as scikit-learn's array-API dispatch does), a NumPy array,
        a DataFrame or a sparse matrix in NumPy.
    explained_variance_, explained_variance_ratio_, singular_values_ : (n_components,) arrays
    n_features_in_ : int
    feature_names_in_ : (n_features,) array of str
        Only when ``X`` had string column names (a pandas DataFrame).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import TruncatedSVD
    >>> X = np.random.default_rng(0).standard_normal((50, 8))
    >>> svd = TruncatedSVD(3, random_state=0).fit(X)
    >>> svd.components_.shape, svd.transform(X).shape
    ((3, 8), (50, 3))
    """

    def __init__(self, n_components: int = 2, *, algorithm: str = "randomized",
                 n_iter: int = 5, n_oversamples: int = 10,
                 power_iteration_normalizer: str = "auto", random_state: Any = None,
                 tol: float = 0.0) -> None:
        self.n_components = n_components
        self.algorithm = algorithm
        self.n_iter = n_iter
        self.n_oversamples = n_oversamples
        self.power_iteration_normalizer = power_iteration_normalizer
        self.random_state = random_state
        self.tol = tol

    def fit(self, X: Any, y: Any = None) -> Any:
        """Fit on ``X`` (dense or sparse, (n_samples, n_features))."""
        self.fit_transform(X)
        return self

    @_dispatch.front_door("decomp.TruncatedSVD.fit_transform")
    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit, and return ``U * S`` (the projections, from the same SVD)."""
        from sklearn.utils.validation import validate_data
        self._validate_params()  # type: ignore[attr-defined]
        _refuse_bfloat16(X)
        original = X
        if _in_package(X):
            return _pca_sklearn.wrap_output(self, self._fit_in_package(X), original)
        X = validate_data(self, X, accept_sparse=["csr", "csc"], ensure_min_features=2)
        u, s, vt = self._factor(X)
        self.components_ = vt
        projected = u * s
        self.explained_variance_ = variance = _variances(projected)
        self.explained_variance_ratio_ = variance / _truncated_svd_host.total_variance(X)
        self.singular_values_ = s
        return _pca_sklearn.wrap_output(self, projected, original)

    def _factor(self, X: Any) -> Any:
        """``(U, S, Vt)`` of the ``n_components`` largest singular values of ``X``, in its
        package (ARPACK: SciPy's ``svds`` on a host copy, NumPy out)."""
        if self.algorithm == "arpack":
            host = _arrays.to_host(X) if _arrays.is_array(X) else X  # sparse stays sparse
            return _truncated_svd_host.arpack(host, self.n_components, self.tol,
                                              self.random_state)
        if self.n_components > X.shape[1]:
            raise ValueError(f"n_components({self.n_components}) must be <= "
                             f"n_features({X.shape[1]}).")
        # the signs: the largest entry of each row of vt positive, as svd_flip's v-based rule
        return truncated_svd(
            X, self.n_components, method="randomized", n_iter=self.n_iter,
            n_oversamples=self.n_oversamples,
            power_iteration_normalizer=self.power_iteration_normalizer,
            random_state=self.random_state, check_finite=False)

    def _fit_in_package(self, X: Any) -> Any:
        """The fit of a CuPy array or torch tensor (any device), computed and kept in its
        package, as scikit-learn's array-API dispatch does: ``U * S`` in that package."""
        _pca_sklearn.check_feature_names(self, X, reset=True)
        X, kind, like = validate(X, self, reset=True)
        if X.shape[1] < 2:
            raise ValueError(f"Found array with {X.shape[1]} feature(s) (shape="
                             f"{tuple(X.shape)}) while a minimum of 2 is required by "
                             "TruncatedSVD.")
        data = X.materialize() if kind == "host" else X  # a CPU tensor's NumPy view
        u, s, vt = self._factor(data)
        total = float(_variances(data).sum())
        u, s, vt = (_as_like(a, like) for a in (u, s, vt))
        self.components_, self.singular_values_ = vt, s
        projected = u * s
        self.explained_variance_ = variance = _variances(projected)
        self.explained_variance_ratio_ = variance / total
        return projected

    @_dispatch.front_door("decomp.TruncatedSVD.transform")
    def transform(self, X: Any) -> Any:
        """``X @ components_.T``."""
        from sklearn.utils.extmath import safe_sparse_dot
        from sklearn.utils.validation import check_is_fitted, validate_data
        check_is_fitted(self)
        _refuse_bfloat16(X)
        original = X
        if _in_package(X):
            _pca_sklearn.check_feature_names(self, X, reset=False)
            X, _, like = validate(X, self, reset=False)
            comp = _as_like(self.components_, like)
            return _pca_sklearn.wrap_output(self, _like_input(X, like) @ comp.T, original)
        X = validate_data(self, X, accept_sparse=["csr", "csc"], reset=False)
        return _pca_sklearn.wrap_output(self, safe_sparse_dot(X, _arrays.to_host(
            self.components_).T), original)

    def inverse_transform(self, X: Any) -> Any:
        """``X @ components_``: back to the original space (the part the components span)."""
        from sklearn.utils.validation import check_array
        if _in_package(X):
            return X @ _as_like(self.components_, X)
        return np.asarray(check_array(X)) @ _arrays.to_host(self.components_)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()  # type: ignore[misc]
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    @property
    def _n_features_out(self) -> int:
        return int(self.components_.shape[0])


def __getattr__(name: str) -> Any:
    if name == "TruncatedSVD":
        cls = _pca_sklearn.build(_TruncatedSVD, "TruncatedSVD", __name__,
                                 _pca_sklearn.truncated_svd_constraints)
        globals()["TruncatedSVD"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _in_package(X: Any) -> bool:
    """A dense CuPy array or torch tensor: fitted and answered in its own package."""
    return _arrays.kind_of(X) in (_arrays.Kind.CUPY, _arrays.Kind.TORCH)


def _like_input(X: Any, like: Any) -> Any:
    """The validated ``X`` as the caller's array (a CPU tensor's :class:`HostMatrix` read
    back as that tensor's data)."""
    return _arrays.to_kind(X.materialize(), _arrays.Kind.TORCH, like=like) \
        if hasattr(X, "materialize") else X


def _as_like(a: Any, like: Any) -> Any:
    """``a`` (a fitted attribute) in ``like``'s package and on its device."""
    return _arrays.to_kind(a, _arrays.kind_of(like), like=like)


def _variances(a: Any) -> Any:
    """The population variance of each column of ``a``, in ``a``'s package."""
    if _arrays.kind_of(a) is _arrays.Kind.TORCH:
        return a.var(0, correction=0)
    return a.var(axis=0)


def _refuse_bfloat16(X: Any) -> None:
    """The shared refusal of a bfloat16 array (torch's "unsupported ScalarType" otherwise)."""
    if hasattr(X, "dtype") and not hasattr(X, "tocsr") and np_dtype(X).kind == "V":
        float_dtype(np_dtype(X))  # raises: other dtypes are scikit-learn's validation's
