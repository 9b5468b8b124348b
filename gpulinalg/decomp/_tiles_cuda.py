"""GPU tile kernels of the Dask engines (``*_dask``): what one Dask task does to one CuPy block
on the worker's GPU.

The twin of :mod:`._tiles_host` (same signatures and results). Each kernel is decomp's own GPU
engine (:mod:`._qr_cuda`, :mod:`._cholesky_cuda`, :mod:`._triangular_cuda`, the Gaussian kernel
of :mod:`._sketch_cuda`) run on the worker thread's own stream, ordered after and before the
task's current CuPy stream (:class:`gpulinalg._runtime.streams.op_stream`), as the dispatcher
runs them for a single-GPU call. No validation and no dispatch: the graph builder chose the GPU
when it saw CuPy chunks.
"""

from .._runtime.errors import NotPositiveDefiniteError
from .._runtime.streams import op_stream
from . import _cholesky_cuda, _qr_cuda, _triangular_cuda
from ._sketch_cuda import gaussian_real
from ._tiles_xp import complex_gaussian

__all__ = ["qr", "potrf", "trsm", "gaussian"]


def qr(x):
    """Reduced QR of the CuPy block ``x`` (m, n): ``(Q (m, k), R (k, n))``, ``k = min(m, n)``."""
    import cupy
    m, n = x.shape
    k = min(m, n)
    if k == 0:
        return cupy.zeros((m, k), x.dtype), cupy.zeros((k, n), x.dtype)
    with op_stream():
        q, r = _qr_cuda.qr(x, "economic", False, None, False, x.dtype)
    return q, r


def potrf(x, offset):
    """Lower Cholesky factor of the diagonal CuPy tile ``x`` (first row: row ``offset`` of the
    whole matrix); a failure names the leading minor of the whole matrix."""
    if x.shape[0] == 0:
        return x.copy()
    try:
        with op_stream():
            return _cholesky_cuda.cholesky(x, True, False, True, x.dtype)
    except NotPositiveDefiniteError as e:
        raise NotPositiveDefiniteError(offset + e.minor) from None


def trsm(l, b, trans):
    """``L^-1 b`` (``trans=0``) or ``L^-H b`` (``trans=2``) for a lower triangular CuPy tile."""
    if b.size == 0:
        return b.copy()
    with op_stream():
        return _triangular_cuda.solve_triangular(l, b, trans, True, False, False, b.dtype)


def gaussian(shape, dtype, seed):
    """Standard normal CuPy block (complex: circular, unit variance) from the 64-bit ``seed``:
    the numbers :func:`._tiles_host.gaussian` gives for the same seed."""
    with op_stream():
        return complex_gaussian(gaussian_real, shape, dtype, seed)
