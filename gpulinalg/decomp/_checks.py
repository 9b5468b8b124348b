"""Validation and batching helpers shared by the dense factorizations (no array computation).

The api files validate with :func:`prepare` and :func:`check_rhs`, build empty results with
:func:`empty_result`, and key their calls on CuPy arrays for the dispatcher's memo with
:func:`cupy_key`; the engines index batches with :func:`sub` and :func:`batch_index`.
"""

import sys

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import validation as _v
from .._runtime.validation import check_dask, is_dask  # noqa: F401  (re-exported for the api files)

__all__ = ["prepare", "check_square", "real_dtype", "empty_result", "batch_index",
           "broadcast_batch", "sub", "flops_scale", "matrix_order", "check_rhs", "flag",
           "is_dask", "check_dask", "cupy_key"]


def cupy_key(op, a, b, options):
    """The dispatcher's memo key of a call of ``op`` with arrays ``a`` and ``b`` (``b`` may be
    ``None``) and the hashable ``options``: each array's shape, strides, dtype and device, or
    ``None`` when an array is not a CuPy array (those calls are planned every time).

    Examples
    --------
    >>> import numpy as np
    >>> cupy_key("decomp.cholesky", np.eye(2), None, (False,)) is None
    True
    """
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    nd = cupy.ndarray
    if type(a) is not nd or (b is not None and type(b) is not nd):
        return None
    if b is None:
        return (op, a.shape, a.strides, a.dtype, a.data.device_id, options)
    return (op, a.shape, a.strides, a.dtype, a.data.device_id,
            b.shape, b.strides, b.dtype, b.data.device_id, options)


def prepare(a, name="a", *, square=False, check_finite=True, min_ndim=2):
    """The validation pipeline: type -> shape -> finiteness -> dtype. Returns ``(a, dtype)``."""
    a = _v.as_array(a, name, min_ndim=0 if square else min_ndim)
    if square:
        check_square(a, name)
    _v.as_array(a, name, min_ndim=min_ndim)  # the ndim rule, once the shape is square
    if check_finite:
        _v.check_finite(a, name)
    return a, _v.float_dtype(_v.np_dtype(a))


def check_square(a, name="a"):
    """``ValueError`` in SciPy's words unless ``a`` (read as at least 2-D, as SciPy's
    ``np.atleast_2d``) is square in its last two dimensions."""
    shape = tuple(a.shape)
    shape = (1,) * (2 - len(shape)) + shape if len(shape) < 2 else shape
    if shape[-1] != shape[-2]:
        raise ValueError(f"Expected a square matrix or batch thereof, got {name}.shape="
                         f"{shape}: {name} must be square in its last two dimensions")


def real_dtype(dtype):
    """float32 for float32/complex64, float64 for float64/complex128."""
    return np.empty(0, dtype).real.dtype


def empty_result(like, *parts):
    """Arrays of ``(shape, dtype)`` (zeros, or identity when ``eye=True`` in a 3-tuple), in
    the package and on the device of ``like``."""
    kind = _arrays.kind_of(like) or _arrays.Kind.NUMPY
    out = []
    for part in parts:
        shape, dtype = part[0], part[1]
        x = np.zeros(shape, dtype)
        if len(part) > 2 and part[2] and x.ndim >= 2:
            x[...] = np.eye(shape[-2], shape[-1], dtype=dtype)
        out.append(_arrays.to_kind(x, kind, like))
    return out


def batch_index(flat, batch_shape):
    """The batch index (tuple) of flat entry ``flat``, ``None`` for an unbatched call."""
    if not batch_shape:
        return None
    return tuple(int(i) for i in np.unravel_index(int(flat), batch_shape))


def broadcast_batch(*shapes):
    """Broadcast batch shapes, with a ``ValueError`` that names them."""
    if not any(shapes):  # single matrices
        return ()
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"batch dimensions {list(map(tuple, shapes))} do not "
                         "broadcast") from None


def sub(x, index, core_ndim):
    """Entry ``index`` (an index into the full batch shape) of ``x``, whose leading batch
    dimensions broadcast against that shape; ``core_ndim`` trailing dimensions are kept."""
    lead = x.ndim - core_ndim
    own = index[len(index) - lead:] if lead else ()
    own = tuple(0 if d == 1 else i for i, d in zip(own, x.shape[:lead]))
    return x[own] if own else x


def flops_scale(dtype):
    """Real flops per complex flop: 4 for complex dtypes, 1 for real ones."""
    return 4 if np.dtype(dtype).kind == "c" else 1


def matrix_order(x):
    """"C" or "F" when every matrix of ``x`` is contiguous in that order, else ``None``."""
    item = x.itemsize
    n_rows, n_cols = x.shape[-2:]
    if x.strides[-1] == item and (n_rows <= 1 or x.strides[-2] == n_cols * item):
        return "C"
    if x.strides[-2] == item and (n_cols <= 1 or x.strides[-1] == n_rows * item):
        return "F"
    return None


def check_rhs(a, b):
    """``ValueError`` unless ``b``'s rows match the order of the square ``a``."""
    n = a.shape[-1]
    rows = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if rows != n:
        raise ValueError(f"incompatible dimensions: a is {tuple(a.shape)}, "
                         f"b is {tuple(b.shape)}")



def flag(value, name):
    """``value`` as a bool; ``TypeError`` unless it is a bool or an integer (as LAPACK's
    wrappers in SciPy refuse other objects for their ``overwrite_*`` flags)."""
    if isinstance(value, (bool, int, np.bool_, np.integer)):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def over_batch(fn, a, core_ndim=2):
    """Apply ``fn`` to each matrix of ``a`` and stack the results (tuples component-wise,
    nested tuples too: ``((qr, tau), r)``)."""
    if a.ndim == core_ndim:
        return fn(a)
    batch = a.shape[:a.ndim - core_ndim]
    return stack_batch([fn(a[idx]) for idx in np.ndindex(*batch)], batch)


def stack_batch(items, batch):
    if isinstance(items[0], tuple):
        parts = [stack_batch(list(p), batch) for p in zip(*items)]
        return type(items[0])(*parts) if hasattr(items[0], "_fields") else tuple(parts)
    return np.stack(items).reshape(batch + items[0].shape)


def batched_solve(solve_one, a, b):
    """Loop ``solve_one`` over the broadcast batch of ``a`` (..., n, n) and ``b`` (..., n, k);
    a 1-D ``b`` is one right-hand side for every matrix."""
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    batch = broadcast_batch(a.shape[:-2], b2.shape[:-2])
    out = np.empty(batch + b2.shape[-2:], dtype=np.result_type(a, b))
    for idx in np.ndindex(*batch):
        out[idx] = solve_one(sub(a, idx, 2), sub(b2, idx, 2))
    return out[..., 0] if vec else out


def hermitian(x):
    """Conjugate transpose (a view for real arrays)."""
    return x.T.conj() if x.dtype.kind == "c" else x.T


def writable(x, overwrite):
    """``overwrite`` (an ``overwrite_*`` flag) if ``x``'s memory may be written, else ``False``:
    a read-only array or memmap is never written (LAPACK would write it, or crash on it)."""
    return bool(overwrite) and bool(getattr(getattr(x, "flags", None), "writeable", False))


_LONG = {np.dtype(np.longdouble): np.float64, np.dtype(np.clongdouble): np.complex128}


def demote_long(x):
    """A NumPy ``longdouble``/``clongdouble`` array as float64/complex128 (a copy), as SciPy's
    LAPACK wrappers compute it; anything else as given."""
    if isinstance(x, np.ndarray) and x.dtype in _LONG:
        wide = np.dtype(_LONG[x.dtype])
        if x.dtype.itemsize > wide.itemsize:  # where long double is double, nothing to do
            return x.astype(wide)
    return x
