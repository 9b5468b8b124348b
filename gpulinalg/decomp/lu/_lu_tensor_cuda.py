"""LU with partial pivoting of one float32 matrix whose trailing updates run on tensor cores.

Right-looking and blocked: each panel of :data:`PANEL` columns is factored by cuSOLVER's
``getrf`` in float32, its row interchanges are applied to the columns on both sides, the block
row right of it is solved with the panel's unit lower triangle (``trsm``, float32), and the
trailing matrix takes ``A22 -= L21 U12`` as one cuBLAS GEMM whose products run in TF32 (inputs
rounded to 10-bit mantissas, float32 accumulation). Almost all of the ``2 n^3 / 3`` flops are
in those GEMMs, which tensor cores run several times faster than float32 or float64 ``getrf``.

The factor is less accurate than a float32 one (TF32's unit roundoff is ``2^-11``): it is made
for ``solve(..., precision="mixed")``, which refines against the float64 matrix
(:mod:`._refine_xp`). The pivots are LAPACK's (1-based, global), so the factor solves through
the same ``getrs`` and triangular routes as a cuSOLVER one.
"""

import numpy as np

from ..._runtime.arrays import to_host
from .._gpu._blas_cuda import gemm_update, trsm
from .._gpu._cusolver_cuda import Solver
from ._lu_pivots import row_permutation

__all__ = ["factor", "applies", "PANEL", "TENSOR_MIN", "UNIT"]

#: Panel width: wide enough that the trailing GEMMs run near the tensor cores' rate, narrow
#: enough that the float32 panel factorizations stay a small share.
PANEL = 512
#: Order from which :func:`factor` replaces float32 ``getrf`` for mixed-precision solves
#: (below it the panels' latency is most of the time).
TENSOR_MIN = 4096
#: Unit roundoff of the factor's products (TF32's): what the refinement's gate assumes.
UNIT = 2.0 ** -11


def applies(n, dtype):
    """Whether a real float32 factor of order ``n`` is made here."""
    return np.dtype(dtype) == np.float32 and n >= TENSOR_MIN


def factor(w, ipiv, panel=None):
    """Factor the column-major float32 matrix ``w`` (``n x n``) in place into LAPACK's packed
    ``L\\U``, 1-based pivots into the int64 device array ``ipiv`` (``n``); returns the ``info``
    code (``> 0``: ``U[info-1, info-1]`` is exactly zero; the factor is complete all the same).

    One synchronization per panel: its pivots are read back to move the rows they swap
    (at most ``2 * panel`` rows) in the columns left and right of it."""
    import cupy
    n, panel = w.shape[0], panel or PANEL
    steps = range(0, n, panel)
    with Solver(np.float32, len(steps)) as sv:
        for i, j in enumerate(steps):
            b = min(panel, n - j)
            sv.getrf(w[j:, j:j + b], ipiv[j:j + b], i)
            perm = row_permutation(to_host(ipiv[j:j + b]) - 1, n - j)
            moved = np.flatnonzero(perm != np.arange(n - j))
            if moved.size:
                dst, src = cupy.asarray(moved + j), cupy.asarray(perm[moved] + j)
                for side in (w[:, :j], w[:, j + b:]):
                    if side.size:
                        side[dst] = side[src]
            ipiv[j:j + b] += j
            if j + b < n:
                trsm(w[j:j + b, j:j + b], w[j:j + b, j + b:], lower=True, unit=True)
                gemm_update(w[j + b:, j + b:], w[j + b:, j:j + b], w[j:j + b, j + b:],
                            compute="tf32")
        codes = sv.check("getrf")
    bad = [(int(c) + j) for c, j in zip(codes, steps) if c > 0]
    return min(bad) if bad else 0
