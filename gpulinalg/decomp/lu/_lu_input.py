"""Input checks of the LU family's api (no array computation): SciPy's atleast-Nd reading
and dtype rules, the memo keys, the byte and flop estimates."""

import math

import numpy as np

from ..._runtime import arrays as _arrays
from ..._runtime import validation as _v
from ..._runtime.budget import nbytes_of
from .._checks import cupy_key, flops_scale
from .._gpu._cusolver_cuda import workspace_bytes

__all__ = ["atleast", "flops_lu", "lu_bytes", "lu_host_bytes", "memo_key", "lu_pair", "square",
           "scalar"]


def atleast(x, nd=0, name="a"):
    """``x`` as an array with ones prepended to its shape up to ``nd`` dimensions (NumPy's
    atleast_Nd); extended precision read as double, as SciPy's LAPACK wrappers do."""
    x = _lapack(_v.as_array(x, name))
    return x.reshape((1,) * (nd - x.ndim) + tuple(x.shape)) if x.ndim < nd else x


def _lapack(x):
    kind, size = getattr(x.dtype, "kind", ""), getattr(x.dtype, "itemsize", 0)
    if isinstance(x, np.ndarray) and ((kind == "f" and size > 8) or (kind == "c" and size > 16)):
        return x.astype(np.complex128 if kind == "c" else np.float64)
    return x


def flops_lu(shape, dtype):
    m, n = shape[-2:]
    return math.prod(shape[:-2]) * (m * n * min(m, n) - min(m, n) ** 3 / 3) * flops_scale(dtype)


def lu_bytes(shape, extra, dtype):
    """The byte estimate of a factorization of ``shape`` plus ``extra`` arrays' shapes."""
    m, n = shape[-2:]
    return lambda: (2 * nbytes_of((shape, dtype)) + nbytes_of(*((s, dtype) for s in extra))
                    + workspace_bytes("getrf", m, n, dtype))


def lu_host_bytes(shape, extra, dtype, mixed=False):
    """The host bytes of a CPU run: LAPACK's factor of a copy of ``shape`` (a single-precision
    one besides for ``mixed``) and the ``extra`` arrays."""
    low = np.dtype(dtype).itemsize // 2 if mixed else 0
    return (nbytes_of((shape, dtype)) + math.prod(shape) * low
            + nbytes_of(*((s, dtype) for s in extra)))


def memo_key(op, a, b, options, ndims=(2, 1)):
    """The memo key of a call (CuPy arrays of the right dimensions only; never with an
    ``overwrite_*`` flag: a failed in-place run could not be repeated)."""
    if getattr(a, "ndim", 0) < ndims[0] or (b is not None and getattr(b, "ndim", 0) < ndims[1]):
        return None
    try:
        hash(options)
    except TypeError:
        return None
    return cupy_key(op, a, b, options)


def lu_pair(lu_and_piv):
    if not isinstance(lu_and_piv, (tuple, list)) or len(lu_and_piv) != 2:
        raise TypeError("lu_and_piv must be the pair (lu, piv) returned by lu_factor, got "
                        f"{type(lu_and_piv).__name__}")
    return lu_and_piv


def square(a, name="a", error=ValueError):
    a = atleast(a, 0, name) if _arrays.kind_of(a) is not None else _lapack(np.asarray(a))
    if a.ndim < 2:
        raise error(f"The input array must be at least two-dimensional, got {name}.shape="
                    f"{tuple(a.shape)}.")
    if a.shape[-1] != a.shape[-2]:
        raise error(f"Last 2 dimensions of the array must be square but received shape "
                    f"{tuple(a.shape)}.")
    return a


def scalar(res):
    """A 0-d NumPy result as NumPy's scalar (SciPy's ``det`` of one matrix is a float)."""
    return res[()] if isinstance(res, np.ndarray) and res.ndim == 0 else res
