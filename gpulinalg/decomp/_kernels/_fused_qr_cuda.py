"""Fused kernel for stacks of small QR factorizations: Q and R of every matrix in one launch.

On stacks of small matrices the library route is ``geqrfBatched`` (cuBLAS) followed by one
``orgqr`` call per matrix to form Q: a launch chain per matrix, so a stack of 4096 matrices
of order 16 costs thousands of launches. Here one thread block holds one matrix (``m, n <=
64``) in shared memory and does the whole call on it:

``gl_small_qr``
    reads the matrix (coalesced along its axis of smaller stride), factors it by Householder
    reflections exactly as LAPACK's ``geqr2`` (``larfg``'s convention: ``H_j = I - tau_j v
    v^H`` with ``v_j = 1``, ``beta = -sign(Re alpha) ||(alpha, x)||``, ``tau = 0`` when
    ``x = 0`` and ``alpha`` is real), writes R (zero below the diagonal) and, for ``raw``,
    the reflectors and ``tau``, then forms Q in place as ``org2r``/``ung2r`` does (backward
    accumulation over the reflectors' own columns) and writes it. So R's diagonal carries
    the signs LAPACK's (and the library route's) ``geqrf`` gives it.

A step of the factorization: every warp reads column ``j`` into registers (a segment of
``min(MB, 32)`` lanes holds the column, lane ``l`` rows ``l, l + SEG, ...``) and works out
``larfg`` itself (warp reductions, no barrier), the norm in float64 with scaling by the
largest part (no overflow, as ``nrm2``); then each segment applies the reflector to its
columns (a dot product by shuffles, an update), one column at a time. Two barriers a step.
QR cannot fail: there is no summary and nothing is read back (SciPy's ``check_finite`` runs
before the engine; NaN or Inf in a matrix gives NaN in its factors, and in no other
matrix's). Not done: LAPACK's rescaling of ``larfg`` for norms below the smallest normal
number (``safmin``), so matrices of denormal scale lose accuracy.

Part of decomp's internal layer: CuPy arrays in, on the dispatcher's stream.
"""

import numpy as np

from ..._runtime.kernels import kernel_source, raw_kernel
from .._results import QRResult
from ._scalars_cuda import KERNEL_TYPES, SCALAR_PREAMBLE, size_class

__all__ = ["SIZES", "MAX_ORDER", "fits", "qr", "launch_args"]

#: The compiled row counts: a stack of ``m`` rows runs the smallest class that holds it.
SIZES = (8, 16, 32, 64)
#: Largest ``max(m, n)``; complex128 at 64 x 64 takes 65 KiB of dynamic shared memory (the
#: kernel opts in above 48 KiB).
MAX_ORDER = 64

_TYPES = KERNEL_TYPES

_SOURCE = SCALAR_PREAMBLE + kernel_source(__package__, "small_qr.cu")


def fits(n, dtype):
    """Whether a stack whose larger dimension is ``n`` has a fused QR kernel in ``dtype``."""
    return 0 < n <= MAX_ORDER and np.dtype(dtype) in _TYPES


def _kernel(dtype, size):
    t, r = _TYPES[np.dtype(dtype)]
    return raw_kernel("gl_small_qr", _SOURCE, {"T": t, "R": r},
                      options=("--std=c++17", f"-DMB={size}"),
                      shared_bytes=(size + 1) * MAX_ORDER * np.dtype(dtype).itemsize)


def launch_args(dtype, m, n, qc):
    """``(kernel, block, shared bytes)`` of a launch for ``m x n`` matrices with ``qc``
    columns of Q: a segment of ``min(MB, 32)`` lanes per column (enough warps for every
    column at once, at most 8)."""
    size = size_class(m, SIZES, "QR")
    seg = min(size, 32)
    cols = max(n, qc)
    warps = max(1, min(8, -(-cols * seg // 32)))
    shared = (size + 1) * cols * np.dtype(dtype).itemsize
    return _kernel(dtype, size), (32 * warps,), shared


def _strides(x):
    return tuple(np.int64(s // x.itemsize) for s in x.strides)


def qr(a, mode, dtype):
    """QR of the CuPy stack ``a`` (..., m, n), ``max(m, n) <= 64``, in one launch, with the
    engine's modes and results (:func:`._qr_cuda.qr`): ``QRResult(Q, R)`` (``full``,
    ``economic``), ``(R,)`` (``r``) or ``((h, tau), R)`` (``raw``). No synchronization."""
    import cupy
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = tuple(a.shape[:-2])
    nb = int(np.prod(batch, dtype=np.int64))
    a3 = (a if a.dtype == dtype else a.astype(dtype)).reshape(nb, m, n)
    qc = m if mode == "full" else (k if mode == "economic" else 0)
    rr = m if mode in ("full", "r") else k
    r = cupy.empty((nb, rr, n), dtype=dtype)
    q = cupy.empty((nb, qc, m), dtype=dtype).transpose(0, 2, 1) if qc else r
    raw = mode == "raw"
    h = cupy.empty((nb, n, m), dtype=dtype).transpose(0, 2, 1) if raw else r
    tau = cupy.empty((nb, k), dtype=dtype) if raw else r
    kern, block, shared = launch_args(dtype, m, n, qc)
    kern((nb,), block, (a3, q, r, h, tau, np.int32(m), np.int32(n), np.int32(qc),
                        np.int32(rr), np.int32(raw), *_strides(a3), *_strides(q),
                        *_strides(r), *_strides(h), _strides(tau)[0]),
         shared_mem=shared)
    r = r.reshape(batch + (rr, n))
    if mode == "r":
        return (r,)
    if raw:
        return ((h.reshape(batch + (m, n)), tau.reshape(batch + (k,))), r)
    return QRResult(q.reshape(batch + (m, qc)), r)
