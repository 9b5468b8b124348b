"""The gradient of :func:`~gpulinalg.gp.exact_gp_solve` for torch tensors (the rule of
:mod:`gpulinalg._runtime.gradients`): the GP engine runs once in the forward; the backward takes
``alpha``, ``L``, the log-determinant and the log marginal likelihood back to ``K`` and ``y``
through solves with ``L`` (decomp's ``cho_solve``), a Hermitian gradient of ``K``.

With ``g_a``, ``g_d``, ``g_l`` those of ``alpha``, ``logdet`` and the likelihood and
``Kj = K + jitter I`` (the jitter held constant)::

    g_y = Kj^-1 g_a - g_l alpha
    g_K = sym(-(Kj^-1 g_a) alpha^T + (g_d - t g_l / 2) Kj^-1 + g_l alpha alpha^T / 2)
          + the Cholesky backward of g_L
"""

from .._runtime.gradients import FUNCTIONS, bound, call, rule
from ..decomp._engines import cholesky_factor_backward
from ._results import GPSolveResult

__all__: list[str] = []


def _columns(x):
    return x[:, None] if x.dim() == 1 else x


@rule("gp.exact_gp_solve")
def _exact_gp_solve(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    kept = {}

    def forward(k, y):
        res = fn(k, y, jitter=p["jitter"])
        kept["jitter"] = res.jitter
        return res.alpha, res.L, res.logdet, res.log_marginal_likelihood

    def backward(ins, outs, grads):
        k, y = ins
        alpha, low, _, _ = outs
        g_alpha, g_low, g_logdet, g_lml = grads
        cho_solve = FUNCTIONS["decomp.cho_solve"]
        a2, t = _columns(alpha), _columns(y).shape[1]
        gk = 0 * k
        gy = 0 * y
        if g_alpha is not None:
            w = cho_solve((low, True), _columns(g_alpha))
            gk = gk - w @ a2.mT
            gy = gy + w.reshape(y.shape)
        if g_lml is not None:
            gk = gk + 0.5 * g_lml * (a2 @ a2.mT)
            gy = gy - g_lml * alpha
        scale = (0 if g_logdet is None else g_logdet) - (0 if g_lml is None else 0.5 * t * g_lml)
        if g_logdet is not None or g_lml is not None:
            eye = _eye(k)
            gk = gk + scale * cho_solve((low, True), eye)
        gk = 0.5 * (gk + gk.mT)
        if g_low is not None:
            gk = gk + cholesky_factor_backward(low, g_low, True)
        return gk, gy
    alpha, low, logdet, lml = call(forward, backward, p["K"], p["y"])
    return GPSolveResult(alpha, low, logdet, lml, kept["jitter"])


def _eye(k):
    import torch
    return torch.eye(k.shape[-1], dtype=k.dtype, device=k.device)
