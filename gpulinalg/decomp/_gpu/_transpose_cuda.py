"""A tiled transposing copy: row-major matrices into column-major ones at memory speed.

Cholesky factors in a column-major working copy (see
:func:`gpulinalg.decomp.cholesky._cholesky_cuda._work_copy`); CuPy's strided assignment makes it
with uncoalesced writes, several times a plain copy's time (docs/performance-log.md, "the
transposing copy"). Here each 32 x 32 tile goes through shared memory, so reads and writes are both
coalesced, and the triangle the factorization leaves alone can be zeroed in the same pass without
being read. SciPy's ``check_finite`` of the source can ride along (``flag``): then every entry is
read once, the zeroed triangle too, and a non-finite one sets the flag (one pass where a separate
check made another).
"""

import numpy as np

from ..._runtime.kernels import kernel_source, raw_kernel
from ._finite_cuda import FINITE_PREAMBLE

__all__ = ["transpose_copy", "applies", "MIN_ORDER", "MAX_BATCH"]

#: Smaller matrices are copied by CuPy (a 32 x 32 tile per tiny matrix would idle threads).
MIN_ORDER = 64
#: The batch runs along the grid's z dimension, the row tiles along its y dimension.
MAX_BATCH = 65535
TILE = 32

_SOURCE = FINITE_PREAMBLE + kernel_source(__package__, "transpose_copy.cu")

_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
          np.dtype(np.complex64): "complex<float>", np.dtype(np.complex128): "complex<double>"}


def applies(src, dst):
    """Whether :func:`transpose_copy` takes this ``(B, P, Q)`` pair."""
    item = src.itemsize
    return (src.dtype == dst.dtype and src.dtype in _TYPES and src.ndim == dst.ndim == 3
            and src.shape == dst.shape and min(src.shape[1:]) >= MIN_ORDER
            and src.shape[0] <= MAX_BATCH and -(-src.shape[1] // TILE) <= MAX_BATCH
            and src.strides[2] == item
            and dst.strides[1] == item)


def transpose_copy(src, dst, zero_above=False, flag=None):
    """``dst[...] = src`` for ``(B, P, Q)`` CuPy stacks, ``src`` contiguous along ``Q`` and
    ``dst`` along ``P`` (check with :func:`applies`); with ``zero_above`` the entries with
    ``q > p`` of ``dst`` become zero instead (and are not read from ``src``). ``flag`` (a
    zeroed int32 device slot, or ``None``): set to 1 when ``src`` holds NaN or Inf (SciPy's
    ``check_finite`` in the same pass)."""
    kern, grid, block, args = _launch_args(src, dst, zero_above)
    kern(grid, block, (src, dst, *args, np.uint64(0) if flag is None else flag))
    return dst


def _launch_args(src, dst, zero_above):
    """``(kernel, grid, block, constant arguments)`` of a copy of ``src`` into ``dst``."""
    if not applies(src, dst):
        raise ValueError("transpose_copy needs equal (B, P, Q) stacks of one float dtype, "
                         "src contiguous along Q, dst along P")
    kern = raw_kernel("gl_transpose_copy", _SOURCE, {"T": _TYPES[src.dtype]},
                      options=("--std=c++17",))
    b, p, q = src.shape
    item = src.itemsize
    grid = ((q + TILE - 1) // TILE, (p + TILE - 1) // TILE, b)
    return kern, grid, (TILE, 8), (
        np.int64(p), np.int64(q), np.int64(src.strides[0] // item),
        np.int64(src.strides[1] // item), np.int64(dst.strides[0] // item),
        np.int64(dst.strides[2] // item), np.int32(bool(zero_above)))
