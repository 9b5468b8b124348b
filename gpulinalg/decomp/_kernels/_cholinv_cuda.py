"""A fused CUDA kernel for the small step of Cholesky QR: ``R^-1`` of ``G + shift I = R^H R``.

One thread block of 32 x 32 threads does, in shared memory: the shift (``shift_factor *
trace(G) + tiny``), and Gaussian elimination of ``[G + shift I | I]``, which yields the
Cholesky factor and the inverse of its triangle together in ``l`` steps of one barrier each
(retried with a 1000x larger shift when a pivot is not positive, twice); ``R^-1`` is written
in the working dtype. It replaces about a dozen small library calls (and their host
overhead) per power iteration; when every attempt fails it writes NaNs, which the run's final
check turns into a Householder rerun.

Used for ``l <= max_order(dtype)`` (the ``l x 2l`` working matrix must fit in
``SHARED_BYTES`` of shared memory); larger sketches use cuSOLVER ``potrf`` + cuBLAS ``trsm``
through CuPy.

Second part, for the inverse of a Cholesky factor at large ``n`` (the GP likelihood gradient's
``K^-1``): :func:`tri_inverse` (``L^-1`` in place: a leaf kernel for the diagonal blocks of order
:data:`LEAF`, then doubling merges by strided-batched cuBLAS ``gemm``) and :func:`gram_lower`
(``K^-1 = V^T V`` by ``gemm`` in column panels), float64, on raw column-major buffers, no
synchronization.
"""

import numpy as np

from ..._runtime.kernels import kernel_source, raw_kernel
from ..._runtime.streams import get_handle

__all__ = ["chol_inverse", "max_order", "BLOCK", "SHARED_BYTES", "tri_inverse",
           "tri_inverse_scratch", "gram_lower", "LEAF", "LOWER_PANEL"]

BLOCK = (32, 32)
#: Shared memory the kernel may take (above 48 KiB by opt-in; every GPU since Volta has more).
SHARED_BYTES = 96 * 1024

_SOURCE = kernel_source(__package__, "chol_inv.cu")

_TYPES = {np.dtype(np.float32): ("double", "float"), np.dtype(np.float64): ("double", "double"),
          np.dtype(np.complex64): ("complex<double>", "complex<float>"),
          np.dtype(np.complex128): ("complex<double>", "complex<double>")}


def max_order(dtype):
    """Largest ``l`` the kernel takes for ``dtype`` (its factor lives in shared memory)."""
    item = 16 if np.dtype(dtype).kind == "c" else 8
    return int(np.sqrt(SHARED_BYTES / (2 * item)))


def chol_inverse(g, shift_factor, dtype):
    """``R^-1`` (upper, ``dtype``) of ``g + (shift_factor * trace(g) + tiny) I = R^H R``.

    ``g`` is an ``l x l`` Hermitian CuPy array in float64/complex128.
    """
    import cupy
    dtype = np.dtype(dtype)
    l = g.shape[0]
    if g.shape != (l, l) or l > max_order(dtype):
        raise ValueError(f"chol_inverse takes a square matrix of order <= {max_order(dtype)}, "
                         f"got shape {g.shape}")
    # The kernel reads float64 or complex128: anything else would be read out of bounds.
    g = cupy.ascontiguousarray(g, dtype=np.complex128 if dtype.kind == "c" else np.float64)
    rinv = cupy.empty((l, l), dtype=dtype)
    scalar, out = _TYPES[dtype]
    kern = raw_kernel("gl_chol_inv", _SOURCE, {"SCALAR": scalar, "OUT": out},
                      options=("--std=c++17",), shared_bytes=SHARED_BYTES)
    kern((1,), BLOCK, (g, rinv, np.int32(l), np.float64(shift_factor),
                                 np.float64(np.finfo(np.float64).tiny)),
                   shared_mem=2 * l * l * g.dtype.itemsize)
    return rinv


# ---------------------------------------------------------------------------------------------
# K^-1 from a Cholesky factor, in GEMMs: the GP likelihood gradient's inverse

#: Order of the diagonal blocks that :data:`_LEAF_SOURCE` inverts (one warp each).
LEAF = 32
#: Column panels of ``K^-1 = V^T V`` (lower triangle: each panel from its diagonal down).
LOWER_PANEL = 512

_LEAF_SOURCE = kernel_source(__package__, "tri_inv_leaves.cu")


def _invert_leaves(v, n):
    """Invert the diagonal blocks (order :data:`LEAF`, the last one smaller) of the
    column-major lower-triangular ``V`` in the flat float64 buffer ``v``, in place."""
    kern = raw_kernel("gl_tri_inv_leaves", _LEAF_SOURCE, {})
    kern((-(-n // LEAF),), (LEAF,), (v, np.int64(n)))


def _levels(n):
    """``[(s, pairs, s2)]`` of the doubling merges of :func:`tri_inverse`: blocks of order
    ``s`` merge two by two (``pairs`` of two full blocks, then one pair whose second block
    has order ``s2`` when ``s2 > 0``)."""
    out, s = [], LEAF
    while s < n:
        pairs = n // (2 * s)
        out.append((s, pairs, max(0, n - 2 * s * pairs - s)))
        s *= 2
    return out


def tri_inverse_scratch(n):
    """Entries of the scratch buffer that :func:`tri_inverse` needs at order ``n``."""
    return max([max(p * s * s, s * s2) for s, p, s2 in _levels(n)] + [1])


def tri_inverse(v, n, scratch):
    """``V = L^-1`` in place in ``v``: the flat float64 buffer of the column-major
    lower-triangular ``L`` (``n x n``, leading dimension ``n``) whose upper triangle holds
    zeros; ``scratch`` a float64 buffer of :func:`tri_inverse_scratch` entries.

    The diagonal blocks of order :data:`LEAF` are inverted by one kernel, then blocks merge
    two by two, order doubling: ``[[A, 0], [B, C]]^-1 = [[A^-1, 0], [-C^-1 B A^-1, C^-1]]``,
    ``T = B A^-1`` and ``-C^-1 T`` by cuBLAS ``gemm`` (the zeros above the diagonal of
    ``A^-1`` and ``C^-1`` make them plain products), all full pairs of a level in one
    strided-batched call (pairs lie ``2s (n + 1)`` entries apart along the diagonal). About
    ``2 n^3 / 3`` flops, all in GEMMs, in ``2 log2(n / LEAF)`` calls plus one per level for a
    ragged last pair. No synchronization."""
    from nvmath.bindings import cublas
    _invert_leaves(v, n)
    handle = get_handle("cublas")
    nn = int(cublas.Operation.N)
    one, zero, minus = (np.array([x], dtype=np.float64) for x in (1.0, 0.0, -1.0))
    p1, p0, pm = one.ctypes.data, zero.ctypes.data, minus.ctypes.data
    base, t, size = v.data.ptr, scratch.data.ptr, 8
    for s, pairs, s2 in _levels(n):
        step = 2 * s * (n + 1)  # entries from one pair's (r, r) to the next one's
        if pairs:  # the first pair at (0, 0): A^-1 = V[:s, :s], B = V[s:2s, :s], C^-1
            a, b, c = base, base + s * size, base + (s * n + s) * size
            cublas.dgemm_strided_batched(handle, nn, nn, s, s, s, p1, b, n, step, a, n, step,
                                         p0, t, s, s * s, pairs)
            cublas.dgemm_strided_batched(handle, nn, nn, s, s, s, pm, c, n, step, t, s, s * s,
                                         p0, b, n, step, pairs)
        if s2:
            r = 2 * s * pairs
            a = base + (r * n + r) * size
            b = base + (r * n + r + s) * size
            c = base + ((r + s) * n + r + s) * size
            cublas.dgemm(handle, nn, nn, s2, s, s, p1, b, n, a, n, p0, t, s2)
            cublas.dgemm(handle, nn, nn, s2, s, s2, pm, c, n, t, s2, p0, b, n)
    return v


def gram_lower(v, n, out, full=False):
    """``K^-1 = V^T V`` from the column-major lower-triangular ``V`` (flat float64 buffer
    ``v``) into the flat buffer ``out`` (column-major, leading dimension ``n``), by cuBLAS
    ``gemm`` in column panels: ``K^-1[j0:, j0:j1] = V[j0:, j0:]^T V[j0:, j0:j1]`` (about
    ``2 n^3 / 3`` flops; the entries above the diagonal outside the diagonal blocks are left
    as they were), or with ``full`` the whole symmetric matrix,
    ``K^-1[:, j0:j1] = V[j0:, :]^T V[j0:, j0:j1]`` (``n^3`` flops)."""
    from nvmath.bindings import cublas
    handle = get_handle("cublas")
    one, zero = np.ones(1, dtype=np.float64), np.zeros(1, dtype=np.float64)
    op_n, op_t = int(cublas.Operation.N), int(cublas.Operation.T)
    base, dst, size = v.data.ptr, out.data.ptr, 8
    panel = LOWER_PANEL
    for j0 in range(0, n, panel):
        b, k = min(panel, n - j0), n - j0
        diag = (j0 * n + j0) * size
        if full:
            cublas.dgemm(handle, op_t, op_n, n, b, k, one.ctypes.data, base + j0 * size, n,
                         base + diag, n, zero.ctypes.data, dst + j0 * n * size, n)
        else:
            cublas.dgemm(handle, op_t, op_n, k, b, k, one.ctypes.data, base + diag, n,
                         base + diag, n, zero.ctypes.data, dst + diag, n)
    return out
