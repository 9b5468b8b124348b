"""Gradients of ``pinv`` and ``lstsq`` for torch tensors (the rules of
:mod:`gpulinalg._runtime.gradients`): torch.linalg.pinv's formula (the rank held constant), and
``lstsq`` as ``x = pinv(a) @ b`` as torch.linalg.lstsq differentiates it, with the residues and
the singular values.

A rank-deficient ``lstsq`` has no gradient (its solution jumps with the rank decision): it
raises ``NotImplementedError`` when grad is required."""

from ..._runtime.gradients import FUNCTIONS, as_tensors, bound, call, rule, unbroadcast
from .._results import LstsqResult
from ..triangular._triangular_grad import outer, stacked_vector

__all__ = ["pinv_backward"]


def pinv_backward(a, p, gp):
    """The gradient of ``a`` from that of ``p = pinv(a)``:
    ``-P^H gP P^H + (I - A P) gP^H P P^H + P^H P gP^H (I - P A)``."""
    ph = p.mH
    g = -ph @ gp @ ph
    g = g + (gp.mH @ p - a @ (p @ gp.mH @ p)) @ ph
    return g + ph @ (p @ gp.mH - (p @ gp.mH @ p) @ a)


@rule("decomp.pinv")
def _pinv(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    options = dict(atol=p["atol"], rtol=p["rtol"], check_finite=p["check_finite"])
    kept = {}

    def forward(a):
        inv, rank = fn(a, return_rank=True, **options)
        kept["rank"] = rank
        return (inv,)

    def backward(ins, outs, grads):
        return (None if grads[0] is None else pinv_backward(ins[0], outs[0], grads[0]),)
    inv = call(forward, backward, p["a"])[0]
    return (inv, kept["rank"]) if p["return_rank"] else inv


@rule("decomp.lstsq")
def _lstsq(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    a, b = as_tensors(p["a"], p["b"])
    options = dict(cond=p["cond"], check_finite=p["check_finite"],
                   lapack_driver=p["lapack_driver"])
    m, n = a.shape[-2:]
    kept = {}

    def forward(a, b):
        x, residues, rank, s = fn(a, b, **options)
        if int(rank.min() if hasattr(rank, "min") else rank) < min(m, n):
            raise NotImplementedError(
                "decomp.lstsq: a rank-deficient a has no gradient (the solution jumps with the "
                "rank decision); call it on tensors that do not require grad")
        kept["rank"] = rank
        outs = (x, residues) + ((s,) if s is not None else ())
        return outs

    def backward(ins, outs, grads):
        a, b = ins
        x, residues = outs[:2]
        gx, gres = grads[:2]
        gs = grads[2] if len(grads) > 2 else None
        pinv = FUNCTIONS["decomp.pinv"](a)
        vec = stacked_vector(b, x) or b.dim() == 1
        x2, b2 = (x[..., None], b[..., None]) if vec else (x, b)
        ga, gb = 0 * a, 0 * b2
        if gx is not None:
            gx2 = gx[..., None] if vec else gx
            ga = ga + pinv_backward(a, pinv, outer(gx2, b2))
            gb = gb + pinv.mH @ gx2
        if gres is not None and residues.numel():
            r = b2 - a @ x2  # at the optimum d(residues)/dx = 0: residues move with a and b only
            w = r * (2 * gres.reshape(gres.shape + (1,) * (r.dim() - gres.dim()))
                     if vec else 2 * gres[..., None, :])
            ga, gb = ga - outer(w, x2), gb + w
        if gs is not None:
            u, _, vh = FUNCTIONS["decomp.svd"](a, full_matrices=False)
            ga = ga + (u * gs[..., None, :]) @ vh
        gb = gb[..., 0] if vec else gb
        return unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)
    outs = call(forward, backward, a, b)
    x, residues = outs[:2]
    return LstsqResult(x, residues, kept["rank"], outs[2] if len(outs) > 2 else None)
