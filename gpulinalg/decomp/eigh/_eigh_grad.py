"""Gradients of ``eigh`` and ``eigvalsh`` for torch tensors (the rules of
:mod:`gpulinalg._runtime.gradients`): torch.linalg.eigh's formula,
``V (diag(gw) + skew(V^H gV) / E) V^H`` with ``E_ij = w_j - w_i``, a Hermitian gradient.

The generalized problem (``b``, ``type=1``) and the subsets give the eigenvalues' gradient
(``dw_i = v_i^H (dA - w_i dB) v_i``); a loss of their eigenvectors raises ``NotImplementedError``
in the backward (that gradient needs the whole spectrum)."""

from ..._runtime.gradients import FUNCTIONS, bound, call, rule
from .._results import EighResult

__all__ = ["eigh_backward"]


def eigh_backward(w, v, gw, gv):
    """The gradient of the Hermitian matrix from those of its eigenvalues ``w`` and
    eigenvectors ``v`` (either ``None``)."""
    if gv is None:
        return (v * gw[..., None, :]) @ v.mH
    vhgv = v.mH @ gv
    vhgv = 0.5 * (vhgv - vhgv.mH)  # the tangent space of the unitary group: skew-Hermitian
    e = w[..., None, :] - w[..., :, None]
    e.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    inner = vhgv / e
    if gw is not None:
        inner = inner + gw.diag_embed() - inner.diagonal(dim1=-2, dim2=-1).diag_embed()
    return v @ inner @ v.mH


def _run(fn, p, eigvals_only):
    op = "decomp.eigvalsh" if eigvals_only else "decomp.eigh"
    if int(p["type"]) != 1:
        raise NotImplementedError(f"{op}: gradients of type={p['type']} generalized problems "
                                  "are not supported (type=1 is)")
    b = p["b"]
    partial = b is not None or p["subset_by_index"] is not None or \
        p["subset_by_value"] is not None
    options = dict(lower=bool(p["lower"]), check_finite=p["check_finite"], driver=p["driver"],
                   subset_by_index=p["subset_by_index"], subset_by_value=p["subset_by_value"])

    def forward(a, *rest):  # the eigenvectors are needed for the gradient either way
        return tuple(fn(a, rest[0] if rest else None, **options))

    def backward(ins, outs, grads):
        (w, v), (gw, gv) = outs, grads
        if gw is None and gv is None:
            return (None,) * len(ins)
        if not partial:
            return (eigh_backward(w, v, gw, gv),)
        if gv is not None:
            raise NotImplementedError(
                f"{op}: the eigenvectors of a generalized problem (b=) or of a subset of the "
                "spectrum have no gradient here (only the eigenvalues have); use the whole "
                "standard problem for a loss of the eigenvectors")
        ga = (v * gw[..., None, :]) @ v.mH  # dw_i = v_i^H (dA - w_i dB) v_i, v^H B v = I
        if len(ins) == 1:
            return (ga,)
        return ga, -(v * (gw * w)[..., None, :]) @ v.mH
    w, v = call(forward, backward, p["a"], *(() if b is None else (b,)))
    return w if eigvals_only else EighResult(w, v)


@rule("decomp.eigh")
def _eigh(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    return _run(fn, p, bool(p["eigvals_only"]))


@rule("decomp.eigvalsh")
def _eigvalsh(fn, *args, **kwargs):
    return _run(FUNCTIONS["decomp.eigh"], bound(fn, args, kwargs), True)
