"""GPU tile kernels of the Dask engines (``*_dask``): what one Dask task does to one CuPy block
on the worker's GPU.

The twin of :mod:`._tiles_host` (same signatures and results): the tasks shared by the families'
Dask engines (triangular solves and the blocked Cholesky's panel updates); a family's own tile
task (QR, the diagonal ``potrf``, the Gaussian block) lives in that family's ``_cuda`` module.
Each runs on the worker thread's own stream, ordered after and before the
task's current CuPy stream (:class:`gpulinalg._runtime.streams.op_stream`), as the dispatcher
runs them for a single-GPU call. No validation and no dispatch: the graph builder chose the GPU
when it saw CuPy chunks.
"""

import numpy as np

from ..._runtime.streams import op_stream
from .._gpu._cusolver_cuda import routines
from ..triangular import _triangular_cuda

__all__ = ["trsm", "trsm_right", "gemm_sub", "herk_sub"]


def trsm(l, b, trans):
    """``L^-1 b`` (``trans=0``) or ``L^-H b`` (``trans=2``) for a lower triangular CuPy tile."""
    if b.size == 0:
        return b.copy()
    with op_stream():
        return _triangular_cuda.solve_triangular(l, b, trans, True, False, False, b.dtype)


# -- panel kernels of the blocked Cholesky: cuBLAS in place on C-ordered row blocks -------------
# A C-ordered (r, w) block with row stride ld is, read column-major, the (w, r) matrix X^T with
# leading dimension ld; each call below is written in that frame.

def _ld(x):
    """Leading dimension of a C-ordered row block (unit stride along its rows)."""
    item = x.itemsize
    assert x.ndim == 2 and (x.shape[1] <= 1 or x.strides[1] == item), "not a C-ordered block"
    return max(x.strides[0] // item if x.shape[0] > 1 else x.shape[1], x.shape[1], 1)


def _scalars(dtype, *values):
    real = np.dtype(dtype).kind != "c"
    return [np.array([v], dtype=dtype) for v in values], real


def trsm_right(l, b):
    """``b <- b l^-H`` in place for the C-ordered lower triangular tile ``l`` (w, w) and the
    C-ordered rows ``b`` (r, w): column-major, ``conj(l) b^T = B^T``, i.e. the upper triangle
    ``l^T`` with ``op = ^H`` on the left of ``b^T``: one TRSM."""
    from nvmath.bindings import cublas

    from ..._runtime.streams import get_handle
    if b.size == 0:
        return
    w = l.shape[0]
    (one,), real = _scalars(b.dtype, 1)
    with op_stream():
        getattr(cublas, routines(b.dtype).prefix + "trsm")(
            get_handle("cublas"), int(cublas.SideMode.LEFT), int(cublas.FillMode.UPPER),
            int(cublas.Operation.T if real else cublas.Operation.C),
            int(cublas.DiagType.NON_UNIT), w, b.shape[0], one.ctypes.data, l.data.ptr, _ld(l),
            b.data.ptr, _ld(b))


def gemm_sub(c, a, b):
    """``c -= a @ b^H`` in place for C-ordered row blocks ``c`` (r, w), ``a`` (r, k) and
    ``b`` (w, k): column-major ``c^T -= conj(b) a^T = (b^T)^H a^T``: one GEMM."""
    from nvmath.bindings import cublas

    from ..._runtime.streams import get_handle
    if c.size == 0 or a.shape[1] == 0:
        return
    (minus, one), real = _scalars(c.dtype, -1, 1)
    with op_stream():
        getattr(cublas, routines(c.dtype).prefix + "gemm")(
            get_handle("cublas"), int(cublas.Operation.T if real else cublas.Operation.C),
            int(cublas.Operation.N), c.shape[1], c.shape[0], a.shape[1], minus.ctypes.data,
            b.data.ptr, _ld(b), a.data.ptr, _ld(a), one.ctypes.data, c.data.ptr, _ld(c))


def herk_sub(c, b):
    """``c -= b @ b^H`` on the lower triangle of the C-ordered tile ``c`` (w, w), ``b``
    (w, k) C-ordered rows: column-major the upper triangle of ``c^T -= (b^T)^H b^T``; one
    SYRK (real) or HERK (complex, real scalars)."""
    from nvmath.bindings import cublas

    from ..._runtime.streams import get_handle
    if c.size == 0 or b.shape[1] == 0:
        return
    real = np.dtype(c.dtype).kind != "c"
    r = routines(c.dtype)
    rdt = np.empty(0, c.dtype).real.dtype
    minus, one = np.array([-1], dtype=rdt), np.array([1], dtype=rdt)
    with op_stream():
        getattr(cublas, r.prefix + ("syrk" if real else "herk"))(
            get_handle("cublas"), int(cublas.FillMode.UPPER),
            int(cublas.Operation.T if real else cublas.Operation.C), c.shape[0], b.shape[1],
            minus.ctypes.data, b.data.ptr, _ld(b), one.ctypes.data, c.data.ptr, _ld(c))
