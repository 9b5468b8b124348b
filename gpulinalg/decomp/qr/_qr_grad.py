"""The gradient of ``qr`` for torch tensors (the rule of :mod:`gpulinalg._runtime.gradients`):
the formula torch.linalg.qr differentiates with (Walter and Lehmann; Liao et al. for wide
matrices), its triangular solve on :func:`~gpulinalg.decomp.solve_triangular`'s engine.

``mode="economic"`` and ``"r"``, and ``"full"`` where ``Q`` is square (``m <= n``); a pivoted
QR has no gradient (the permutation is piecewise constant), nor has the ``m x m`` ``Q`` of a tall
matrix (its extra columns are arbitrary): both raise ``NotImplementedError``."""

from ..._runtime.gradients import FUNCTIONS, bound, call, rule
from .._results import QRResult

__all__ = ["qr_backward"]


def _copyltu(m):
    """The Hermitian matrix of ``m``'s strict lower triangle and its diagonal's real part."""
    low = m.tril(-1)
    return low + low.mH + m.diagonal(dim1=-2, dim2=-1).real.to(m.dtype).diag_embed()


def _tall(q, r, gq, gr):
    """``m >= n``: ``(gQ + Q copyltu(M)) R^-H``, ``M = R gR^H - gQ^H Q``."""
    m = 0
    if gr is not None:
        m = m + r @ gr.mH
    if gq is not None:
        m = m - gq.mH @ q
    b = q @ _copyltu(m) + (gq if gq is not None else 0)
    solve = FUNCTIONS["decomp.solve_triangular"]
    return solve(r, b.mH, lower=False, check_finite=False).mH


def qr_backward(q, r, gq, gr):
    """The gradient of ``a = q r`` (``q`` with orthonormal columns, ``r`` upper triangular;
    ``gq``, ``gr`` either ``None``)."""
    import torch
    m, n = q.shape[-2], r.shape[-1]
    if m >= n:
        return _tall(q, r, gq, gr)
    u, v = r[..., :, :m], r[..., :, m:]  # a = [x | y] = q [u | v]
    gu = None if gr is None else gr[..., :, :m]
    gv = None if gr is None else gr[..., :, m:]
    if gv is not None:
        gq = (q @ v) @ gv.mH + (gq if gq is not None else 0)
    gx = _tall(q, u, gq, gu)
    gy = q @ gv if gv is not None else torch.zeros_like(v)
    return torch.cat([gx, gy], dim=-1)


@rule("decomp.qr")
def _qr(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    a, mode = p["a"], p["mode"]
    m, n = a.shape[-2:]
    if p["pivoting"] or mode == "raw" or (mode == "full" and m > n):
        raise NotImplementedError(
            "decomp.qr: no gradient for pivoting=True (the permutation is piecewise constant), "
            "mode='raw', or mode='full' of a tall matrix (its extra columns of Q are "
            "arbitrary); use mode='economic'")

    def forward(a):
        return tuple(fn(a, mode="economic", check_finite=p["check_finite"]))

    def backward(ins, outs, grads):
        if all(g is None for g in grads):
            return (None,)
        return (qr_backward(*outs, *grads),)
    q, r = call(forward, backward, a)
    return (r,) if mode == "r" else QRResult(q, r)
