"""LU with partial pivoting of one float32 square matrix whose trailing updates run on tensor
cores: the factor that ``solve(..., precision="mixed")`` refines for a general system.

Right-looking and blocked: each panel of :data:`PANEL` columns (from its diagonal down) is
factored by cuSOLVER's ``getrf`` (float32, partial pivoting over the whole column), its row
interchanges are applied to the columns left and right of it, the block row right of it is
solved with its unit lower triangle (``trsm``, float32), and the trailing matrix takes
``A22 -= L21 U12`` as one cuBLAS GEMM whose products run in TF32 (nearly all of the
``2 n^3 / 3`` flops). The result has ``getrf``'s layout: ``L`` and ``U`` packed in place and
1-based pivots, which ``getrs`` and the triangular solves read.
"""

import numpy as np

from .._gpu._blas_cuda import gemm_update, trsm
from .._gpu._cusolver_cuda import Solver
from ._lu_pivots import row_permutation

__all__ = ["factor", "applies", "PANEL", "TENSOR_MIN"]

#: Width of the panels (the trailing GEMM's inner dimension).
PANEL = 512
#: Order from which :func:`factor` serves mixed-precision solves.
TENSOR_MIN = 8192


def applies(n, dtype):
    """Whether a real float32 factor of order ``n`` is made here."""
    return np.dtype(dtype) == np.float32 and n >= TENSOR_MIN


def factor(w, piv, panel=None):
    """Factor the column-major float32 matrix ``w`` (``n x n``) in place into ``P A = L U``
    (``L`` unit lower, below the diagonal; ``U`` on and above it) with its 1-based int64
    pivots in ``piv`` (``n``, as ``getrf``'s); returns ``getrf``'s ``info`` (``> 0``: that
    diagonal entry of ``U`` is exactly zero; the factorization stops with that panel). One
    synchronization per panel, which reads its pivots."""
    import cupy
    n, panel = w.shape[0], panel or PANEL
    with Solver(np.float32, 1) as sv:
        for j in range(0, n, panel):
            e = min(n, j + panel)
            sv.getrf(w[j:, j:e], piv[j:e])
            codes, steps = sv.check("getrf", also=piv[j:e])
            if codes[0]:
                return int(codes[0]) + j
            perm = row_permutation(steps - 1, n - j)
            moved = np.flatnonzero(perm != np.arange(n - j))
            if moved.size:  # only the rows the panel exchanged move left and right of it
                src, dst = cupy.asarray(perm[moved] + j), cupy.asarray(moved + j)
                if j:
                    w[dst, :j] = w[src, :j]
                if e < n:
                    w[dst, e:] = w[src, e:]
            piv[j:e] += j
            if e < n:
                trsm(w[j:e, j:e], w[j:e, e:], left=True, lower=True, unit=True)
                gemm_update(w[e:, e:], w[e:, j:e], w[j:e, e:], compute="tf32")
    return 0
