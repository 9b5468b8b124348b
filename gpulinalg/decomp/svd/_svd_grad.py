"""The gradient of ``svd`` for torch tensors (the rule of :mod:`gpulinalg._runtime.gradients`):
torch.linalg.svd's formula on the reduced factors, with its limits: ``full_matrices=True``
of a non-square matrix has no gradient (the extra columns are arbitrary), and repeated singular
values make the singular vectors' gradient infinite, as in torch."""

from ..._runtime.gradients import bound, call, rule
from .._results import SVDResult

__all__ = ["svd_backward"]


def _skew(x):
    return x - x.mH


def svd_backward(u, s, vh, gu, gs, gvh):
    """The gradient of ``a = u diag(s) vh`` (reduced) from those of its factors (any
    ``None``)."""
    m, n = u.shape[-2], vh.shape[-1]
    if gu is None and gvh is None:
        return (u * gs[..., None, :]) @ vh
    v, gv = vh.mH, None if gvh is None else gvh.mH
    s2 = s * s
    e = s2[..., None, :] - s2[..., :, None]
    e.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    inner = 0
    uhgu = None if gu is None else _skew(u.mH @ gu)
    if uhgu is not None:
        inner = inner + uhgu * s[..., None, :]
    if gv is not None:
        inner = inner + s[..., :, None] * _skew(v.mH @ gv)
    inner = inner / e
    if gs is not None:
        inner = inner + gs.diag_embed()
    if u.is_complex() and uhgu is not None:  # the phase the gauge leaves to U's columns
        inner = inner + (uhgu.diagonal(dim1=-2, dim2=-1) / (2 * s)).diag_embed()
    if m > n and gu is not None:
        gusinv = gu / s[..., None, :]
        return (u @ inner + gusinv - u @ (u.mH @ gusinv)) @ vh
    if m < n and gv is not None:
        gvsinv = gv / s[..., None, :]
        return u @ (inner @ vh + gvsinv.mH - (gvsinv.mH @ v) @ vh)
    return u @ inner @ vh


@rule("decomp.svd")
def _svd(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    a = p["a"]
    m, n = a.shape[-2:]
    if p["compute_uv"] and p["full_matrices"] and m != n:
        raise NotImplementedError(
            "decomp.svd: full_matrices=True of a non-square matrix has no gradient (its extra "
            "singular vectors are arbitrary, as torch.linalg.svd says); pass "
            "full_matrices=False")
    options = dict(check_finite=p["check_finite"], lapack_driver=p["lapack_driver"],
                   driver=p["driver"])

    def forward(a):  # the singular vectors are needed for the gradient either way
        return tuple(fn(a, full_matrices=False, **options))

    def backward(ins, outs, grads):
        if all(g is None for g in grads):
            return (None,)
        return (svd_backward(*outs, *grads),)
    u, s, vh = call(forward, backward, a)
    return SVDResult(u, s, vh) if p["compute_uv"] else s
