"""Input checks of :class:`gpulinalg.decomp.PCA`, with scikit-learn's messages: dense arrays of
any package, host matrices (memmap, h5py, zarr), SciPy and CuPy sparse matrices. No array math
beyond the finiteness check."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..._runtime import arrays as _arrays
from ..._runtime import validation as _v
from ..lowrank._ooc_source import HostMatrix

__all__ = ["validate", "validate_projections", "check_deferred", "is_sparse",
           "SPARSE_SOLVERS"]

#: The solvers that take sparse input (scikit-learn >= 1.4), "auto" resolving to "arpack".
SPARSE_SOLVERS = ("auto", "arpack", "covariance_eigh")


def is_sparse(X: Any) -> bool:
    """A SciPy or CuPy sparse matrix or array (told by its attributes: nothing imported)."""
    return hasattr(X, "tocsr") and hasattr(X, "nnz")


def validate(X: Any, est: Any, reset: bool = True, solver: str | None = None,
             defer_finite: bool = False) -> tuple[Any, str, Any]:
    """scikit-learn's checks and messages; returns ``(X, kind, like)``, kind ``"array"`` (a
    device array), ``"host"`` (a :class:`HostMatrix`) or ``"sparse"``. ``solver``: the
    ``svd_solver`` of a fit (sparse input needs one of :data:`SPARSE_SOLVERS`).
    ``defer_finite``: a host array's finiteness check is left to the engine that reads it
    (``HostMatrix.unchecked``, see :func:`check_deferred`): on the GPU it is one device
    reduction after the upload instead of a host pass over the whole array."""
    name = type(est).__name__
    if is_sparse(X):
        return _sparse(X, est, reset, solver), "sparse", X.data if _cupyx(X) else None
    like = X if _arrays.is_array(X) else None
    if _arrays.kind_of(X) is None and hasattr(X, "shape") and hasattr(X, "dtype") \
            and hasattr(X, "__getitem__") and len(X.shape) == 2 and \
            _numpy_kind(X.dtype) in tuple("biuf"):
        X = HostMatrix(X, _v.float_dtype(np.dtype(X.dtype), allowed=(np.float32, np.float64)))
        _check_shape(X.shape, est, reset)
        return X, "host", None
    X = _as_float_array(X)
    if X.ndim != 2:
        raise ValueError(f"Expected 2D array, got {X.ndim}D array instead. Reshape your data "
                         "either using X.reshape(-1, 1) if it has a single feature or "
                         "X.reshape(1, -1) if it contains a single sample.")
    _check_shape(tuple(X.shape), est, reset)
    on_gpu = _arrays.on_gpu(X)
    if on_gpu or not defer_finite:
        _check_finite(X, name)
    if on_gpu:
        return X, "array", like
    host = _arrays.to_host(X)
    unchecked = _nan_message(name) if defer_finite and X.shape[0] and X.shape[1] else None
    return HostMatrix(host, host.dtype, unchecked), "host", like if like is not None else host


def check_deferred(X: Any, data: Any) -> None:
    """The finiteness check :func:`validate` left to the engine: raise scikit-learn's
    ``ValueError`` when :class:`HostMatrix` ``X`` was not checked and ``data`` (its entries,
    on any device) holds a NaN or infinity."""
    if isinstance(X, HostMatrix) and X.unchecked and not _v.all_finite(data):
        raise ValueError(X.unchecked)


def _nan_message(name):
    return f"Input X contains NaN or infinity ({name} does not accept missing values)."


def _numpy_kind(dtype: Any) -> str:
    """NumPy's kind letter of ``dtype``; ``""`` for a dtype NumPy cannot interpret (another
    array namespace's, e.g. array_api_strict's: such arrays are read through ``np.asarray``)."""
    try:
        return np.dtype(dtype).kind
    except TypeError:
        return ""


def validate_projections(X: Any, n_components: int, name: str) -> Any:
    """The input of ``inverse_transform``: 2-D, ``n_components`` columns, finite."""
    X = _as_float_array(X)
    if X.ndim != 2:
        raise ValueError(f"Expected 2D array, got {X.ndim}D array instead.")
    if X.shape[0] < 1:
        raise ValueError(f"Found array with {X.shape[0]} sample(s) (shape={tuple(X.shape)}) "
                         "while a minimum of 1 is required.")
    if X.shape[1] != n_components:
        raise ValueError(f"X has {X.shape[1]} features, but {name} has {n_components} "
                         "components")
    _check_finite(X, name)
    return X


def _check_finite(X, name):
    if X.shape[0] and X.shape[1]:
        if not _v.all_finite(X):  # no X-sized mask (a broadcast view is read once)
            raise ValueError(_nan_message(name))


def _cupyx(X):
    return type(X).__module__.startswith("cupyx")


def _sparse(X, est, reset, solver):
    name = type(est).__name__
    if solver is not None and solver not in SPARSE_SOLVERS:
        raise TypeError(f'{name} only support sparse inputs with the "arpack" and '
                        f'"covariance_eigh" solvers, while "{solver}" was passed. See '
                        "gpulinalg.decomp.truncated_svd for a possible alternative.")
    if len(X.shape) != 2:
        raise ValueError(f"Expected 2D input, got shape {X.shape}")
    if X.format not in ("csr", "csc"):
        X = X.tocsr()
    kind = np.dtype(X.dtype).kind
    if kind == "c":
        raise ValueError("Complex data not supported")
    if np.dtype(X.dtype) not in (np.float32, np.float64):
        X = X.astype(np.float64)
    _check_shape(tuple(X.shape), est, reset)
    if X.nnz:
        _check_finite(X.data[None], name)
    return X


def _as_float_array(X):
    k = _arrays.kind_of(X)
    if k is None or k is _arrays.Kind.NUMPY:
        X = np.asarray(X)
        if X.dtype.kind in "OUS":
            X = X.astype(np.float64)  # NumPy's TypeError/ValueError name the bad entry
        k = _arrays.Kind.NUMPY
    dt = _v.np_dtype(X)
    if dt.kind == "c":
        raise ValueError("Complex data not supported")
    X = _v.as_array(X, "X")
    target = np.float32 if dt == np.float32 else np.float64
    if dt != target:
        X = X.astype(target) if k is not _arrays.Kind.TORCH else \
            X.to(sys.modules["torch"].float64)
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
