"""The gradient of ``truncated_svd`` for torch tensors (the rule of
:mod:`gpulinalg._runtime.gradients`): that of the ``k`` largest singular values,
``U diag(gS) Vh`` (exact for the exact top ``k``, which the randomized values approximate). The
singular vectors' gradient couples them with the discarded spectrum the call never computed: a
loss of ``U`` or ``Vh`` raises ``NotImplementedError`` in the backward."""

from ..._runtime.gradients import bound, call, rule
from .._results import SVDResult
from ._truncated_plan import LowRankSVDResult

__all__: list[str] = []


@rule("decomp.truncated_svd")
def _truncated_svd(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    a, k = p.pop("a"), p.pop("k")
    kept = {}

    def forward(a):
        res = fn(a, k, **p)
        kept["error"] = res.error if p["error_estimate"] else None
        return tuple(res)[:3]

    def backward(ins, outs, grads):
        (u, _, vh), (gu, gs, gvh) = outs, grads
        if gu is not None or gvh is not None:
            raise NotImplementedError(
                "decomp.truncated_svd: the singular vectors have no gradient here (it couples "
                "them with the singular values the call did not compute); a loss of the "
                "singular values S has one, or use decomp.svd")
        return (None if gs is None else (u * gs[..., None, :]) @ vh,)
    u, s, vh = call(forward, backward, a)
    return LowRankSVDResult(u, s, vh, kept["error"]) if p["error_estimate"] else \
        SVDResult(u, s, vh)
