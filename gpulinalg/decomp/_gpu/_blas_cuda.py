"""cuBLAS glue for the blocked factorizations and the refinement: a triangular solve and a
trailing update ``C -= A op(B)`` on column-major views of one matrix, the update's products on
tensor cores (``compute="tf32"``) where the caller accepts their rounding; products with a
symmetric matrix that read one triangle.

Views are 2-D CuPy arrays inside one column-major matrix (``strides[0]`` the item size); their
leading dimension is read from the column stride. Everything runs on the thread's stream, to
which :func:`gpulinalg._runtime.streams.get_handle` binds the cuBLAS handle (looked up at each
call, where an emulator can stand in for it).
"""

import numpy as np

from ..._runtime import streams
from ._cusolver_cuda import leading_dimension, routines

__all__ = ["trsm", "gemm_update", "gram", "symv", "COMPUTE", "GRAM_BLOCKS", "GRAM_MIN"]

#: ``compute`` names of :func:`gemm_update` and the cuBLAS compute type of each (float32 data).
COMPUTE = {"float32": "COMPUTE_32F", "tf32": "COMPUTE_32F_FAST_TF32"}
_ONE, _MINUS = np.ones(1, dtype=np.float32), -np.ones(1, dtype=np.float32)
#: Column blocks of :func:`gram`'s lower block triangle (``(b + 1) / 2b`` of one GEMM's products).
GRAM_BLOCKS = 4
#: Columns from which :func:`gram` takes the block triangle (below, one GEMM).
GRAM_MIN = 512


def trsm(a, b, *, left=True, lower=True, trans=False, unit=False):
    """``B <- op(A)^-1 B`` (``left``) or ``B op(A)^-1`` in place, ``A`` triangular (float32
    views)."""
    from nvmath.bindings import cublas
    side = cublas.SideMode.LEFT if left else cublas.SideMode.RIGHT
    uplo = cublas.FillMode.LOWER if lower else cublas.FillMode.UPPER
    op = cublas.Operation.T if trans else cublas.Operation.N
    diag = cublas.DiagType.UNIT if unit else cublas.DiagType.NON_UNIT
    m, n = b.shape
    cublas.strsm(streams.get_handle("cublas"), int(side), int(uplo), int(op), int(diag), m, n,
                 _ONE.ctypes.data, a.data.ptr, leading_dimension(a), b.data.ptr,
                 leading_dimension(b))


def gemm_update(c, a, b, *, trans_b=False, compute="float32"):
    """``C <- C - A op(B)`` in place for float32 column-major views; ``compute`` one of
    :data:`COMPUTE` (``"tf32"``: the products' inputs rounded to 10-bit mantissas, float32
    accumulation)."""
    import nvmath
    from nvmath.bindings import cublas
    m, n = c.shape
    k = a.shape[1]
    r32 = int(nvmath.CudaDataType.CUDA_R_32F)
    op_b = cublas.Operation.T if trans_b else cublas.Operation.N
    cublas.gemm_ex(streams.get_handle("cublas"), int(cublas.Operation.N), int(op_b), m, n, k,
                   _MINUS.ctypes.data, a.data.ptr, r32, leading_dimension(a), b.data.ptr, r32,
                   leading_dimension(b), _ONE.ctypes.data, c.data.ptr, r32, leading_dimension(c),
                   int(getattr(cublas.ComputeType, COMPUTE[compute])),
                   int(cublas.GemmAlgo.DEFAULT))


def gram(x):
    """``x^T x`` (``n x n``, symmetric) of a real C-contiguous ``(m, n)`` float32 or float64
    CuPy matrix, in its dtype with its dtype's arithmetic (no TF32): one GEMM per column block
    of the lower block triangle (:data:`GRAM_BLOCKS`), each with the whole inner dimension,
    then mirrored; ``None`` for other inputs (the caller's plain product). SYRK would do half
    the products, but keeps the long inner dimension on few multiprocessors."""
    import cupy
    import nvmath
    from nvmath.bindings import cublas
    m, n = x.shape
    if x.dtype.kind != "f" or x.dtype.itemsize not in (4, 8) or n < GRAM_MIN or m < 1 or \
            not x.flags.c_contiguous:
        return None
    dt = x.dtype
    cuda_type = int(nvmath.CudaDataType.CUDA_R_32F if dt.itemsize == 4 else
                    nvmath.CudaDataType.CUDA_R_64F)
    compute = int(cublas.ComputeType.COMPUTE_32F if dt.itemsize == 4 else
                  cublas.ComputeType.COMPUTE_64F)
    one, zero = np.ones(1, dt), np.zeros(1, dt)
    c = cupy.empty((n, n), dt)  # column-major view: c's lower triangle is the C-order upper
    handle, step = streams.get_handle("cublas"), -(-n // GRAM_BLOCKS)
    for j0 in range(0, n, step):  # x read column-major is x^T (n x m, ld n): C = x^T (x^T)^T
        j1 = min(n, j0 + step)
        cublas.gemm_ex(handle, int(cublas.Operation.N), int(cublas.Operation.T), n - j0, j1 - j0,
                       m, one.ctypes.data, x.data.ptr + j0 * dt.itemsize, cuda_type, n,
                       x.data.ptr + j0 * dt.itemsize, cuda_type, n, zero.ctypes.data,
                       c.data.ptr + (j0 * n + j0) * dt.itemsize, cuda_type, n, compute,
                       int(cublas.GemmAlgo.DEFAULT))
    upper = cupy.triu(c)
    return upper + cupy.triu(c, 1).T


def symv(a, x, *, lower=True):
    """``A x`` (a new ``(n, k)`` array) for the real symmetric ``A`` of which only the
    ``lower`` (else upper) triangle of the column-major ``a`` (float32 or float64) is read, and
    ``x`` ``(n, k)`` of ``a``'s dtype: one ``symv`` per column (few columns: the refinement's)."""
    import cupy
    from nvmath.bindings import cublas
    n, k = x.shape
    fn = getattr(cublas, routines(a.dtype).prefix + "symv")
    one, zero = np.ones(1, a.dtype), np.zeros(1, a.dtype)
    uplo = int(cublas.FillMode.LOWER if lower else cublas.FillMode.UPPER)
    xf = cupy.asfortranarray(x)
    y = cupy.empty((k, n), dtype=a.dtype).T
    handle, lda = streams.get_handle("cublas"), leading_dimension(a)
    for j in range(k):
        fn(handle, uplo, n, one.ctypes.data, a.data.ptr, lda, xf[:, j].data.ptr, 1,
           zero.ctypes.data, y[:, j].data.ptr, 1)
    return y
