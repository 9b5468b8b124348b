"""The validation pipeline every public function runs: type, shape, finiteness, dtype.

Works on NumPy, CuPy and torch arrays alike, without moving them.
"""

import sys

import numpy as np

from .arrays import Kind, kind_of

__all__ = ["as_array", "check_finite", "all_finite", "float_dtype", "check_square", "namespace",
           "is_dask", "check_dask"]

#: dtypes the solvers accept; integers and bools promote to float64 as in SciPy.
SOLVER_DTYPES = (np.float32, np.float64, np.complex64, np.complex128)


def namespace(x):
    """Return the array module of ``x`` (``numpy``, ``cupy`` or ``torch``)."""
    k = kind_of(x)
    if k is Kind.CUPY:
        import cupy
        return cupy
    if k is Kind.TORCH:
        import torch
        return torch
    return np


def np_dtype(x):
    """NumPy's dtype of the array ``x`` of any supported package (a torch dtype mapped)."""
    if kind_of(x) is Kind.TORCH:
        import torch
        if x.dtype == torch.bfloat16:
            return np.dtype("V2")  # stand-in: NumPy has no bfloat16
        return torch.empty(0, dtype=x.dtype).numpy().dtype
    return np.dtype(x.dtype)


def as_array(a, name="a", *, min_ndim=0, max_ndim=None):
    """Return ``a`` as an array of its own package, raising ``TypeError`` for non-numeric input.

    Lists and scalars become NumPy arrays. Object, string and datetime dtypes are refused, and
    masked arrays are refused as SciPy refuses them (their mask would be dropped silently).
    """
    if type(a) is np.ndarray:  # the common case: no mask, no conversion
        dt = a.dtype
    else:
        a, dt = _as_array_other(a, name)
    if dt.kind not in "biufcV":
        raise TypeError(f"{name} must be numeric, got dtype {dt}")
    if a.ndim < min_ndim or (max_ndim is not None and a.ndim > max_ndim):
        want = f">= {min_ndim}" if max_ndim is None else f"in [{min_ndim}, {max_ndim}]"
        raise ValueError(f"{name} must have ndim {want}, got shape {tuple(a.shape)}")
    return a


def _as_array_other(a, name):
    """:func:`as_array`'s conversion of anything but a plain NumPy array: ``(a, dtype)``."""
    if isinstance(a, np.ma.MaskedArray):
        raise ValueError(f"masked arrays are not supported ({name})")
    if kind_of(a) is None:
        if hasattr(a, "toarray") and hasattr(a, "nnz"):
            raise TypeError(f"{name} is a sparse matrix ({type(a).__name__}); "
                            "pass a dense array, or use gpulinalg.sparse")
        try:
            a = np.asarray(a)
        except Exception as exc:
            raise TypeError(f"{name} cannot be converted to an array: {exc}") from None
    return a, np_dtype(a)


def check_square(a, name="a"):
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name} must be square in its last two dimensions, "
                         f"got shape {tuple(a.shape)}")


def check_finite(a, name="a"):
    """Raise ``ValueError`` if ``a`` holds NaN or Inf (one reduction, on ``a``'s device)."""
    if not all_finite(a):
        raise ValueError(f"{name} must not contain infs or NaNs")


def all_finite(a):
    """Whether ``a`` holds no NaN or Inf: one reduction on ``a``'s device, reading a broadcast
    view's distinct entries only and a large host array in blocks (no input-sized mask).

    >>> all_finite(np.broadcast_to(np.array([1.0, np.inf]), (10**6, 2)))
    False
    """
    if type(a) is np.ndarray and 0 < a.size <= _HOST_BLOCK and a.dtype.kind in "fc" \
            and all(a.strides):  # the common case, read at once
        return _sum_is_finite(a) or bool(np.isfinite(a).all())
    if a.size == 0 or np_dtype(a).kind in "biu":
        return True
    a = _distinct(a)
    if kind_of(a) is Kind.CUPY and a.ndim >= 2:
        return _cupy_all_finite(a)
    if isinstance(a, np.ndarray) and a.size > _HOST_BLOCK and a.ndim >= 1:
        return _host_all_finite(a)
    return bool(namespace(a).isfinite(a).all())


def _distinct(a):
    """``a`` without the repeats of its broadcast axes (stride 0: every index reads the same
    entries, so index 0 alone holds all of its values): a 200000^2 view of one row is read as
    that row, not as 4e10 entries."""
    strides = a.stride() if kind_of(a) is Kind.TORCH else getattr(a, "strides", None)
    if strides is None or all(strides) or a.ndim == 0:
        return a
    return a[tuple(slice(None) if s else slice(0, 1) for s in strides)]


#: Entries a host finiteness check reads at a time: its mask stays this small, whatever the
#: input (a broadcast view of 200000^2 would otherwise allocate a 40 GB mask).
_HOST_BLOCK = 1 << 24


#: Entries from which a host check first sums them (below, the mask reads as fast).
_SUM_FIRST = 1 << 22


def _sum_is_finite(a):
    """Whether the entries of the NumPy float or complex array ``a`` (``_SUM_FIRST`` or more)
    have a finite sum, which proves them all finite (a NaN or Inf makes it not; so does an
    overflow, which the caller then settles entry by entry), as scikit-learn's check sums;
    ``False`` below ``_SUM_FIRST`` entries or for other dtypes. NumPy's own sum, not a BLAS
    product: that would wake NumPy's BLAS threads, which then spin beside SciPy's LAPACK."""
    if a.size < _SUM_FIRST or a.dtype not in _SUMMED:
        return False
    with np.errstate(all="ignore"):
        return bool(np.isfinite(a.sum()))


_SUMMED = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def _host_all_finite(a):
    """``isfinite(a).all()`` for a large NumPy array: its sum first (:func:`_sum_is_finite`),
    else its entries, block of leading rows by block."""
    if _sum_is_finite(a):
        return True
    rows = max(1, _HOST_BLOCK // max(1, a.size // a.shape[0]))
    return all(bool(np.isfinite(a[i:i + rows]).all()) for i in range(0, a.shape[0], rows))


_ALL_FINITE: list = []


def _cupy_all_finite(a):
    """True when the CuPy array ``a`` (ndim >= 2) has no NaN or Inf: one read of ``a``, no
    temporary of its size (``isfinite(a).all()`` makes a mask as large as ``a``, which can
    exhaust the memory a large matrix leaves free), reduced along rows in parallel."""
    import cupy
    if a.dtype.kind == "c":
        if a.strides[-1] != a.itemsize:
            return bool(cupy.isfinite(a).all())
        a = a.view(np.empty(0, a.dtype).real.dtype)  # real and imaginary parts side by side
    if not _ALL_FINITE:
        _ALL_FINITE.append(cupy.ReductionKernel("T x", "bool y", "isfinite(x)", "a && b",
                                                "y = a", "true", "gpulinalg_all_finite"))
    return bool(_ALL_FINITE[0](a, axis=-1).all())


def float_dtype(*dtypes, allowed=SOLVER_DTYPES):
    """The dtype a computation runs in: NumPy promotion, then integers/bools → float64,
    float16 → float32 when float16 is not allowed.

    Examples
    --------
    >>> import numpy as np
    >>> float_dtype(np.int64), float_dtype(np.float32, np.complex64), float_dtype(np.float16)
    (dtype('float64'), dtype('complex64'), dtype('float32'))
    """
    given = tuple(np.dtype(d) for d in dtypes)
    try:
        return _FLOAT_DTYPES[given, allowed]
    except (KeyError, TypeError):  # TypeError: an unhashable ``allowed``
        pass
    dt = _promote(given, allowed)
    if len(_FLOAT_DTYPES) < 256:
        try:
            _FLOAT_DTYPES[given, allowed] = dt
        except TypeError:
            pass
    return dt


_FLOAT_DTYPES: dict = {}  # (dtypes, allowed) -> float_dtype's answer


def _promote(given, allowed):
    if any(d.kind == "V" for d in given):  # bfloat16 (torch's, or ml_dtypes'): no promotion
        raise TypeError("bfloat16 input is not supported by this function (it computes in "
                        "float32, float64 or complex); cast it to float32 first")
    dt = np.result_type(*given)
    if dt.kind in "biu":
        dt = np.dtype(np.float64)
    if dt not in [np.dtype(t) for t in allowed]:
        dt = np.result_type(dt, np.float32)
    if dt not in [np.dtype(t) for t in allowed]:
        raise TypeError(f"unsupported dtype {dt}; supported: "
                        f"{', '.join(str(np.dtype(t)) for t in allowed)}")
    return dt


def is_dask(*xs):
    """True when one of ``xs`` is a :class:`dask.array.Array`; one dict lookup (and nothing
    imported) when Dask is not loaded."""
    mod = sys.modules.get("dask.array")
    array_type = getattr(mod, "Array", None) if mod is not None else None
    return array_type is not None and any(isinstance(x, array_type) for x in xs)


def check_dask(a, name="a", *, square=False, ndim=(2,)):
    """The checks a Dask array allows without computing it: dimensions, shape, dtype kind and
    known chunk sizes (finiteness is not checked: that would compute the graph)."""
    if a.ndim not in ndim:
        want = " or ".join(f"{d}-D" for d in ndim)
        raise ValueError(f"{name} must be {want} for Dask arrays (batches of matrices are not "
                         f"supported), got shape {tuple(a.shape)}")
    if np.dtype(a.dtype).kind not in "biufc":
        raise TypeError(f"{name} must hold numbers, got dtype {a.dtype}")
    if any(np.isnan(c) for cs in a.chunks for c in cs):
        raise ValueError(f"{name} has unknown chunk sizes: call {name}.compute_chunk_sizes() "
                         "first")
    if square and a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{name} must be square in its last two dimensions, "
                         f"got shape {tuple(a.shape)}")
    return a
