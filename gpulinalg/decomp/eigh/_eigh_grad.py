"""Gradients of ``eigh`` and ``eigvalsh`` for torch tensors (the rules of
:mod:`gpulinalg._runtime.gradients`): torch.linalg.eigh's formula,
``V (diag(gw) + skew(V^H gV) / E) V^H`` with ``E_ij = w_j - w_i``, a Hermitian gradient.

The standard problem of the whole spectrum only: the generalized problem (``b``) and the
subsets raise ``NotImplementedError`` when grad is required."""

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


def _refuse_unsupported(p, op):
    if p["b"] is not None or p["subset_by_index"] is not None or \
            p["subset_by_value"] is not None:
        raise NotImplementedError(
            f"{op}: gradients of the generalized problem (b=) and of a subset of the spectrum "
            "are not supported; call it on tensors that do not require grad, or use "
            "torch.linalg.eigh on the whole spectrum")


def _run(fn, p, eigvals_only):
    _refuse_unsupported(p, "decomp.eigvalsh" if eigvals_only else "decomp.eigh")
    lower, check = bool(p["lower"]), p["check_finite"]

    def forward(a):  # the eigenvectors are needed for the gradient either way
        return tuple(fn(a, lower=lower, check_finite=check, driver=p["driver"]))

    def backward(ins, outs, grads):
        (w, v), (gw, gv) = outs, grads
        if gw is None and gv is None:
            return (None,)
        return (eigh_backward(w, v, gw, gv),)
    w, v = call(forward, backward, p["a"])
    return w if eigvals_only else EighResult(w, v)


@rule("decomp.eigh")
def _eigh(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    return _run(fn, p, bool(p["eigvals_only"]))


@rule("decomp.eigvalsh")
def _eigvalsh(fn, *args, **kwargs):
    return _run(FUNCTIONS["decomp.eigh"], bound(fn, args, kwargs), True)
