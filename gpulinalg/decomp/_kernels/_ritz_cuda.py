"""Two small CUDA kernels for the end of a randomized SVD on the GPU (real dtypes).

After the one host round trip of the Rayleigh-Ritz step, what is left is latency-bound: a
few products with ``l x k`` matrices, casts, and the sign convention. Each CuPy call there
costs more host time than its GPU work, so:

* :func:`lift` forms ``U = Q W``, ``Vh = (B^H W / sigma)^T`` (accumulated in float64) and ``S``
  in one kernel, written in the working dtype;
* :func:`flip_signs` finds, per vector, the sign of its first largest-magnitude entry (the
  ``svd_flip`` convention) and can scale the vector and its partner in the other factor in
  place, in the same kernel.
"""

import numpy as np

from ..._runtime.kernels import kernel_source, raw_kernel

__all__ = ["lift", "flip_signs", "TYPES", "MAX_W_BYTES"]

TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
THREADS = 256
#: :func:`lift` keeps ``[W; W / sigma; sigma]`` in shared memory: at most this many bytes.
MAX_W_BYTES = 48 * 1024

_FLIP_SOURCE = kernel_source(__package__, "flip_signs.cu")

_LIFT_SOURCE = kernel_source(__package__, "lift.cu")

def flip_signs(rows, partner=None):
    """``+1``/``-1`` per row of the real device matrix ``rows`` (one block per row); with
    ``partner`` (``(len(rows), p)``), row ``v`` of ``rows`` and of ``partner`` are multiplied
    by sign ``v`` in place."""
    import cupy
    sign = cupy.empty(rows.shape[0], rows.dtype)
    item = rows.itemsize
    y = rows if partner is None else partner
    kern = raw_kernel("gl_flip_signs", _FLIP_SOURCE, {"T": TYPES[rows.dtype]})
    kern((rows.shape[0],), (THREADS,),
         (rows, np.int64(rows.shape[1]), np.int64(rows.strides[1] // item),
          np.int64(rows.strides[0] // item), sign, np.int32(partner is not None), y,
          np.int64(0 if partner is None else y.shape[1]), np.int64(y.strides[1] // item),
          np.int64(y.strides[0] // item)))
    return sign


def lift(q, btd, w, k):
    """``(U, S, Vh)`` of ``q`` (``m x l``, C order, float32/float64), ``btd`` (``n x l``, C order,
    float64) and ``w`` (``(2l + 1) x k`` float64 rows ``[W; W / sigma; sigma]``)."""
    import cupy
    m, l = q.shape
    n = btd.shape[0]
    dtype = q.dtype
    u = cupy.empty((m, k), dtype)
    vh = cupy.empty((k, n), dtype)
    s = cupy.empty(k, dtype)
    blocks = (m + n + THREADS - 1) // THREADS
    raw_kernel("gl_lift", _LIFT_SOURCE, {"T": TYPES[dtype]})(
        (blocks,), (THREADS,), (q, btd, w, u, vh, s, np.int32(l), np.int32(k), np.int64(m),
                                np.int64(n)), shared_mem=w.size * 8)
    return u, s, vh
