"""Cholesky of one float32 symmetric positive definite matrix whose trailing updates run on
tensor cores: the factor that ``solve(..., assume_a="pos", precision="mixed")`` refines, and
its solve.

Right-looking and blocked, lower triangle: each diagonal block of :data:`PANEL` columns is
factored by cuSOLVER's ``potrf`` (float32; with :data:`INNER`, by this same algorithm with
that panel, so that its updates run on tensor cores too), the block column below it is solved
with it (``trsm``, float32; with :data:`INVERTED`, one TF32 GEMM with the block's inverse),
and the trailing lower triangle takes ``A22 -= L21 L21^T`` in column blocks, each one cuBLAS
GEMM whose products run in TF32 (only the blocks on and below the diagonal are computed:
about ``n^3 / 3`` flops, nearly all on tensor cores).

A factor made with the inverted diagonal blocks keeps them: :func:`solve` then substitutes
block by block with matrix-vector products only (no triangular kernel).
"""

import numpy as np

from .._gpu._blas_cuda import gemm_update, trsm
from .._gpu._cusolver_cuda import Solver

__all__ = ["factor", "solve", "applies", "PANEL", "INNER", "INVERTED", "TENSOR_MIN"]

#: Width of the diagonal blocks and of the trailing update's column blocks (the fastest
#: measured of 512, 1024 and 2048).
PANEL = 2048
#: Panel of the diagonal blocks' own blocked factorization (``None``: cuSOLVER's ``potrf``).
INNER = None
#: Whether each block column is a TF32 product with its diagonal block's inverse (kept for
#: :func:`solve`) rather than a float32 ``trsm``.
INVERTED = False
#: Order from which :func:`factor` serves mixed-precision solves (where the solve was measured
#: faster than the float64 one).
TENSOR_MIN = 16384


def applies(n, dtype):
    """Whether a real float32 factor of order ``n`` is made here."""
    return np.dtype(dtype) == np.float32 and n >= TENSOR_MIN


def factor(w, panel=None, inner=None, inverted=None, inverses=None):
    """Factor the column-major float32 matrix ``w`` (``n x n``, lower triangle read) in place
    into its lower Cholesky factor (the upper triangle is scratch, as ``cho_factor``'s);
    returns the ``info`` code (``> 0``: the leading minor of that order is not positive
    definite, found at the end of its diagonal block's ``potrf``: the factorization stops
    there). One synchronization per innermost diagonal block, for its code.

    ``panel``, ``inner``, ``inverted``: :data:`PANEL`, :data:`INNER`, :data:`INVERTED` unless
    given. ``inverses``: a list that receives the inverse of each ``panel`` diagonal block
    (column-major), in order, when ``inverted``."""
    n = w.shape[0]
    panel = panel or PANEL
    inner = INNER if inner is None else inner
    inverted = INVERTED if inverted is None else inverted
    with Solver(np.float32, 1) as sv:
        for j in range(0, n, panel):
            e = min(n, j + panel)
            d = w[j:j + panel, j:j + panel]
            if inner and e - j > inner:
                code = factor(d, inner, 0, inverted)
            else:
                sv.potrf(d, True)
                code = int(sv.check("potrf")[0])  # a failed block ends the factorization early
            if code:
                return code + j
            inv = _inverse(d) if inverted and (e < n or inverses is not None) else None
            if inverses is not None and inv is not None:
                inverses.append(inv)
            if e == n:
                break
            if inv is not None:
                _times_inverse(w[e:, j:e], inv)
            else:
                trsm(d, w[e:, j:e], left=False, lower=True, trans=True)
            for c in range(e, n, panel):  # the lower part of A22, a block column at a time
                f = min(c + panel, n)
                gemm_update(w[c:, c:f], w[c:, j:e], w[c:f, j:e], trans_b=True, compute="tf32")
    return 0


def _inverse(d):
    """``L^-1`` of the lower factor in the column-major block ``d`` (a float32 ``trsm`` of the
    identity), column-major."""
    import cupy
    inv = cupy.asfortranarray(cupy.eye(d.shape[0], dtype=d.dtype))
    trsm(d, inv, left=True, lower=True)
    return inv


def _times_inverse(col, inv):
    """``col <- col L^-T`` in place (``inv``: ``L^-1``), one TF32 GEMM: ``0 - (-col) inv^T``."""
    import cupy
    neg = cupy.asfortranarray(-col)
    col[...] = 0
    gemm_update(col, neg, inv, trans_b=True, compute="tf32")


def solve(w, inverses, b):
    """``(L L^T)^-1 b`` for the lower factor in ``w`` made with ``inverses`` (see
    :func:`factor`; their count gives the panel) and ``b`` ``(n, k)`` float32: block
    substitution, each diagonal block's solve a product with its inverse, the off-diagonal
    blocks one product each. A new array."""
    n = w.shape[0]
    panel = inverses[0].shape[0]
    starts = range(0, n, panel)
    y = b.astype(w.dtype, copy=True)
    for i, j in enumerate(starts):  # L y = b
        e = min(n, j + panel)
        r = y[j:e] - w[j:e, :j] @ y[:j] if j else y[j:e]
        y[j:e] = inverses[i] @ r
    for i in reversed(range(len(starts))):  # L^T x = y
        j = starts[i]
        e = min(n, j + panel)
        r = y[j:e] - w[e:, j:e].T @ y[e:] if e < n else y[j:e]
        y[j:e] = inverses[i].T @ r
    return y
