"""The gradient of ``truncated_svd`` for torch tensors (the rule of
:mod:`gpulinalg._runtime.gradients`): that of the ``k`` largest singular triplets (exact for the
exact top ``k``, which the randomized ones approximate).

A loss of the singular values alone takes ``U diag(gS) Vh``. A loss of ``U`` or ``Vh`` couples
them with the singular triplets the call did not compute, so its backward costs one full
(reduced) SVD of ``a``: the forward's own ``k`` triplets go in the first ``k`` columns of ``U``
and rows of ``Vh`` (the gauge their gradients refer to), the others take zero gradients, and
torch.linalg.svd's formula (:func:`~gpulinalg.decomp.svd._svd_grad.svd_backward`) applies. The
backward is differentiable again (the full SVD has a rule). As torch's, it is infinite or NaN
where two singular values of ``a`` are equal (the discarded ones included), or one is zero and
``a`` is not square."""

from ..._runtime.gradients import FUNCTIONS, bound, call, rule
from .._results import SVDResult
from ..svd._svd_grad import svd_backward
from ._truncated_plan import LowRankSVDResult

__all__: list[str] = []


def _padded(g, zeros, dim):
    """The gradient ``g`` of the ``k`` leading triplets, zeros for the rest (``None``: none)."""
    import torch
    return None if g is None else torch.cat([g, zeros], dim=dim)


def _vectors_backward(a, u, s, vh, gu, gs, gvh):
    """The gradient of ``a`` from those of its top-``k`` triplets, through its whole SVD."""
    import torch
    k = s.shape[-1]
    full_u, full_s, full_vh = FUNCTIONS["decomp.svd"](a, full_matrices=False, check_finite=False)
    rest = full_s.shape[-1] - k
    return svd_backward(torch.cat([u, full_u[..., k:]], dim=-1),
                        torch.cat([s, full_s[..., k:]], dim=-1),
                        torch.cat([vh, full_vh[..., k:, :]], dim=-2),
                        _padded(gu, u.new_zeros(*u.shape[:-1], rest), -1),
                        _padded(gs, s.new_zeros(*s.shape[:-1], rest), -1),
                        _padded(gvh, vh.new_zeros(*vh.shape[:-2], rest, vh.shape[-1]), -2))


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
        (u, s, vh), (gu, gs, gvh) = outs, grads
        if gu is None and gvh is None:
            return (None if gs is None else (u * gs[..., None, :]) @ vh,)
        return (_vectors_backward(ins[0], u, s, vh, gu, gs, gvh),)
    u, s, vh = call(forward, backward, a)
    return LowRankSVDResult(u, s, vh, kept["error"]) if p["error_estimate"] else \
        SVDResult(u, s, vh)
