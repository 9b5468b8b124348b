"""Cholesky of one float32 symmetric positive definite matrix whose trailing updates run on
tensor cores: the factor that ``solve(..., assume_a="pos", precision="mixed")`` refines.

Right-looking and blocked, lower triangle: each diagonal block of :data:`PANEL` columns is
factored by cuSOLVER's ``potrf`` (float32), the block column below it is solved with it
(``trsm``, float32), and the trailing lower triangle takes ``A22 -= L21 L21^T`` in column
blocks, each one cuBLAS GEMM whose products run in TF32 (only the blocks on and below the
diagonal are computed: about ``n^3 / 3`` flops, nearly all on tensor cores).
"""

import numpy as np

from .._gpu._blas_cuda import gemm_update, trsm
from .._gpu._cusolver_cuda import Solver

__all__ = ["factor", "applies", "PANEL", "TENSOR_MIN"]

#: Width of the diagonal blocks and of the trailing update's column blocks (the fastest
#: measured of 512, 1024 and 2048).
PANEL = 2048
#: Order from which :func:`factor` serves mixed-precision solves (where the solve was measured
#: faster than the float64 one).
TENSOR_MIN = 16384


def applies(n, dtype):
    """Whether a real float32 factor of order ``n`` is made here."""
    return np.dtype(dtype) == np.float32 and n >= TENSOR_MIN


def factor(w, panel=None):
    """Factor the column-major float32 matrix ``w`` (``n x n``, lower triangle read) in place
    into its lower Cholesky factor (the upper triangle is scratch, as ``cho_factor``'s);
    returns the ``info`` code (``> 0``: the leading minor of that order is not positive
    definite, found at the end of its diagonal block's ``potrf``: the factorization stops
    there). One synchronization per diagonal block, for its code."""
    n, panel = w.shape[0], panel or PANEL
    with Solver(np.float32, 1) as sv:
        for j in range(0, n, panel):
            b = min(panel, n - j)
            sv.potrf(w[j:j + b, j:j + b], True)
            code = int(sv.check("potrf")[0])  # a failed block ends the factorization early
            if code:
                return code + j
            e = j + b
            if e < n:
                trsm(w[j:e, j:e], w[e:, j:e], left=False, lower=True, trans=True)
                for c in range(e, n, panel):  # the lower part of A22, a block column at a time
                    d = min(c + panel, n)
                    gemm_update(w[c:, c:d], w[c:, j:e], w[c:d, j:e], trans_b=True,
                                compute="tf32")
    return 0
