"""GPU engine of tall QR by Cholesky (CholeskyQR2), for ``mode="economic"`` and ``"r"``.

For an ``m x n`` matrix with many more rows than columns (which ones: :func:`._batched_plan.
tall_qr`), Householder QR (``Xgeqrf`` + ``orgqr``) spends most of its time factoring panels of
a few columns at a time. CholeskyQR2 does BLAS-3 work only: ``R1 = chol(A^H A)``,
``Q1 = A R1^-1``, then once more on ``Q1``: ``R2 = chol(Q1^H Q1)``, ``Q = Q1 R2^-1``,
``R = R2 R1``; two Gram matrices (GEMM or SYRK/HERK: :data:`GRAM_GEMM_MAX`), two TRSM and two
Cholesky factors of order ``n`` per matrix.

The second pass leaves Q orthogonal to working precision when ``Q1`` is well conditioned
(Yamamoto, Nakatsukasa, Yanagisawa, Fukaya, ETNA 44, 2015). The engine checks it: the
result is kept only where both Cholesky factors succeed and the second Gram matrix
``Q1^H Q1`` lies within :data:`GRAM_TOL` of the identity (Frobenius norm of its upper
triangle minus I; then ``cond(Q1)^2 < 2.1``), for every matrix of the stack. That holds for
``cond(A)`` up to about ``sqrt(GRAM_TOL / eps)``: ``5e7`` in double, ``2e3`` in single
precision. Elsewhere (or for NaN, when not checked) :func:`qr` returns ``None`` and the caller
runs Householder QR: the check costs one read-back, the rejected attempt its own time.

R's diagonal comes out real and positive (Householder QR's signs are LAPACK's); Q and R
otherwise agree with Householder QR's up to those signs.

CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.
"""

import math

import numpy as np

from ..._runtime import dispatch as _dispatch
from .._gpu._cusolver_cuda import Solver, fortran_batch, routines
from .._gpu._finite_cuda import raise_nonfinite
from .._results import QRResult

__all__ = ["GRAM_TOL", "GRAM_GEMM_MAX", "qr"]

#: How close to the identity the second Gram matrix must be for the result to be kept.
GRAM_TOL = 0.25

#: Gram matrices of at most this many columns are one GEMM (both triangles; cuBLAS splits its
#: long inner dimension across the GPU), of more one SYRK/HERK (half the work, but it keeps a
#: long inner dimension on few multiprocessors); measured: benchmarks/results/
#: h200-decomp-tall-qr-2026-12-02.json and docs/performance-log.md ("CholeskyQR2's Gram").
GRAM_GEMM_MAX = 1024


def qr(a, mode, dtype, finite=False):
    """CholeskyQR2 of the tall CuPy stack ``a`` (..., m, n), ``m >= n``: ``QRResult(Q, R)``
    (Q (..., m, n), R (..., n, n)) for ``mode="economic"``, ``(R,)`` with R (..., m, n)
    (SciPy's zero rows below ``n``) for ``"r"``; ``None`` where the check of the module
    docstring rejects it. ``finite``: raise ``ValueError`` if ``a`` holds NaN or Inf (flagged
    by the working copy, read back with the codes)."""
    import cupy
    m, n = a.shape[-2:]
    batch = tuple(a.shape[:-2])
    nb = math.prod(batch)
    flags = cupy.zeros(1 + nb, dtype=np.int32)  # a's finiteness, then each matrix's check
    w = fortran_batch(a, dtype, flag=flags[:1] if finite else None)  # becomes Q, column-major
    # the two factors of every matrix, column-major (upper triangles; below: unset)
    g = cupy.empty((2, nb, n, n), dtype=dtype).transpose(0, 1, 3, 2)
    blas = _Blas(dtype)
    with Solver(dtype, 2 * nb) as sv:
        for i in range(nb):
            blas.gram(w[i], g[0, i])
            sv.potrf(g[0, i], False, 2 * i)
            blas.right_solve(g[0, i], w[i])
            blas.gram(w[i], g[1, i])
        off = cupy.triu(g[1]) - cupy.eye(n, dtype=dtype)
        flags[1:] = ~(cupy.linalg.norm(off, axis=(-2, -1)) <= GRAM_TOL)  # NaN fails too
        for i in range(nb):
            sv.potrf(g[1, i], False, 2 * i + 1)
            if mode != "r":
                blas.right_solve(g[1, i], w[i])
        codes, extra = sv.check("qr", also=flags)
    if extra[0]:
        raise_nonfinite("a")
    if codes.any() or extra[1:].any():
        _dispatch.note(qr="householder", cholesky_qr="rejected")
        return None
    _dispatch.note(qr="cholesky_qr2")
    r = cupy.matmul(cupy.triu(g[1]), cupy.triu(g[0]))
    if mode == "r":
        full = cupy.zeros((nb, m, n), dtype=dtype)
        full[:, :n] = r
        return (full.reshape(batch + (m, n)),)
    return QRResult(w.reshape(batch + (m, n)), r.reshape(batch + (n, n)))


class _Blas:
    """The two cuBLAS calls of a pass, on column-major matrices (the thread's handle, bound
    to its stream): the Gram matrix's upper triangle and the solve on the right."""

    def __init__(self, dtype):
        from nvmath.bindings import cublas

        from ..._runtime.streams import get_handle
        real = np.dtype(dtype).kind != "c"
        prefix = routines(dtype).prefix
        self.handle = get_handle("cublas")
        self.rank_k = getattr(cublas, prefix + ("syrk" if real else "herk"))
        self.gemm = getattr(cublas, prefix + "gemm")
        self.plain = int(cublas.Operation.N)
        self.trsm = getattr(cublas, prefix + "trsm")
        self.upper = int(cublas.FillMode.UPPER)
        self.adjoint = int(cublas.Operation.T if real else cublas.Operation.C)
        self.solve_args = (int(cublas.SideMode.RIGHT), self.upper, int(cublas.Operation.N),
                           int(cublas.DiagType.NON_UNIT))
        rdt = np.empty(0, dtype).real.dtype  # HERK's scalars are real
        self.one, self.zero = np.ones(1, rdt), np.zeros(1, rdt)
        self.one_t, self.zero_t = np.ones(1, dtype), np.zeros(1, dtype)

    def gram(self, x, c):
        """``c <- x^H x`` (its upper triangle at least); ``x`` (m, n), ``c`` (n, n),
        column-major."""
        m, n = x.shape
        if n <= GRAM_GEMM_MAX:
            self.gemm(self.handle, self.adjoint, self.plain, n, n, m, self.one_t.ctypes.data,
                      x.data.ptr, max(m, 1), x.data.ptr, max(m, 1), self.zero_t.ctypes.data,
                      c.data.ptr, max(n, 1))
            return
        self.rank_k(self.handle, self.upper, self.adjoint, n, m, self.one.ctypes.data,
                    x.data.ptr, max(m, 1), self.zero.ctypes.data, c.data.ptr, max(n, 1))

    def right_solve(self, r, x):
        """``x <- x r^-1`` in place for the upper triangular ``r`` (n, n); column-major."""
        m, n = x.shape
        self.trsm(self.handle, *self.solve_args, m, n, self.one_t.ctypes.data, r.data.ptr,
                  max(n, 1), x.data.ptr, max(m, 1))
