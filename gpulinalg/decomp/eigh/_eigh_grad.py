"""Gradients of ``eigh`` and ``eigvalsh`` for torch tensors (the rules of
:mod:`gpulinalg._runtime.gradients`): torch.linalg.eigh's formula,
``V (diag(gw) + skew(V^H gV) / E) V^H`` with ``E_ij = w_j - w_i``, a Hermitian gradient.

A subset of the spectrum (``subset_by_index``, ``subset_by_value``): a loss of the eigenvalues
alone takes ``V_s diag(gw) V_s^H``; a loss of the eigenvectors couples them with the eigenpairs
the call left out, so its backward costs one full ``eigh`` of ``a``: the subset's own eigenpairs
go in their columns of the whole spectrum, the others take zero gradients, and the formula above
applies (differentiable again: the full ``eigh`` has this rule).

The generalized problem (``b``; types 1, 2 and 3) runs, when a gradient is required, as its
reduction to a standard problem through calls that have rules, which is what LAPACK's ``sygvd``
does: ``L = cholesky(b, lower=True)``, ``C = L^-1 A L^-H`` (type 1) or ``L^H A L`` (types 2
and 3), ``eigh(C)`` (with the subset), ``v = L^-H y`` (types 1 and 2: ``v^H B v = I``) or
``v = L y`` (type 3: ``v^H B^-1 v = I``). The values are those of the call without gradients to
rounding, the eigenvectors with its deterministic signs; ``a`` and ``b`` are read in the
``lower`` triangle, their gradients are Hermitian."""

from ..._runtime.gradients import FUNCTIONS, as_tensors, bound, call, rule
from .._checks import broadcast_batch
from .._results import EighResult

__all__ = ["eigh_backward"]

#: The standard problem's driver for the generalized problem's (SciPy's names).
_STANDARD_DRIVER = {"gv": "ev", "gvd": "evd", "gvx": "evx"}


def eigh_backward(w, v, gw, gv, free=None):
    """The gradient of the Hermitian matrix from those of its eigenvalues ``w`` and
    eigenvectors ``v`` (either ``None``); ``free`` (..., n, n) boolean marks the pairs whose
    quotient is zero over zero (both eigenpairs without gradient), left out of the division."""
    if gv is None:
        return (v * gw[..., None, :]) @ v.mH
    vhgv = v.mH @ gv
    vhgv = 0.5 * (vhgv - vhgv.mH)  # the tangent space of the unitary group: skew-Hermitian
    e = w[..., None, :] - w[..., :, None]
    if free is not None:
        e = e.masked_fill(free, 1.0)
    e.diagonal(dim1=-2, dim2=-1).fill_(1.0)
    inner = vhgv / e
    if gw is not None:
        inner = inner + gw.diag_embed() - inner.diagonal(dim1=-2, dim2=-1).diag_embed()
    return v @ inner @ v.mH


def _columns(index, w_all, w):
    """The columns (..., k) of the whole spectrum ``w_all`` that the subset ``w`` holds: from
    ``subset_by_index``'s start, else the window of ``k`` eigenvalues nearest to ``w``."""
    import torch
    k = w.shape[-1]
    ramp = torch.arange(k, device=w.device)
    if k == w_all.shape[-1]:
        return ramp.expand(w.shape)
    if index is not None:
        return (int(index[0]) + ramp).expand(w.shape)
    windows = w_all.unfold(-1, k, 1)  # (..., n - k + 1, k)
    start = (windows - w[..., None, :]).abs().sum(dim=-1).argmin(dim=-1)
    return start[..., None] + ramp


def _subset_backward(a, p, w, v, gw, gv):
    """The gradient of ``a`` from those of a subset's eigenpairs, through its whole spectrum."""
    import torch
    if w.shape[-1] == 0:
        return torch.zeros_like(a)
    w_all, v_all = FUNCTIONS["decomp.eigh"](a, lower=bool(p["lower"]), check_finite=False)
    idx = _columns(p["subset_by_index"], w_all.detach(), w.detach())
    cols = idx[..., None, :].expand(v.shape)
    chosen = torch.zeros(w_all.shape, dtype=torch.bool, device=w.device).scatter(-1, idx, True)
    free = ~chosen[..., :, None] & ~chosen[..., None, :]
    # the forward's own eigenpairs in their columns: the gauge its gradients refer to
    w_all, v_all = w_all.scatter(-1, idx, w), v_all.scatter(-1, cols, v)
    g_w = None if gw is None else torch.zeros_like(w_all).scatter(-1, idx, gw)
    return eigh_backward(w_all, v_all, g_w, torch.zeros_like(v_all).scatter(-1, cols, gv), free)


def _standard(fn, p, eigvals_only):
    """A standard problem (``b=None``): one recorded call of ``fn``."""
    subset = p["subset_by_index"] is not None or p["subset_by_value"] is not None
    options = dict(lower=bool(p["lower"]), check_finite=p["check_finite"], driver=p["driver"],
                   subset_by_index=p["subset_by_index"], subset_by_value=p["subset_by_value"])

    def forward(a):  # the eigenvectors are needed for the gradient either way
        return tuple(fn(a, None, **options))

    def backward(ins, outs, grads):
        (w, v), (gw, gv) = outs, grads
        if gw is None and gv is None:
            return (None,)
        if gv is None or not subset or w.shape[-1] == v.shape[-2]:
            return (eigh_backward(w, v, gw, gv),)
        return (_subset_backward(ins[0], p, w, v, gw, gv),)
    w, v = call(forward, backward, p["a"])
    return w if eigvals_only else EighResult(w, v)


def _hermitian(x, lower):
    """The Hermitian matrix that ``x``'s ``lower`` (else upper) triangle names, with the
    gradient of ``(x + x^H) / 2`` (torch's convention: differentiated over Hermitian
    matrices)."""
    half = x.tril(-1) if lower else x.triu(1)
    diag = x.diagonal(dim1=-2, dim2=-1)
    value = half + half.mH + (diag.real if x.is_complex() else diag).diag_embed().to(x.dtype)
    sym = 0.5 * (x + x.mH)
    return value.detach() + (sym - sym.detach())


def _positive_peaks(v):
    """``v`` with the largest-magnitude entry of each column real and positive, as the
    forward's engines make it (a constant unit phase per column: the same eigenvector)."""
    import torch
    with torch.no_grad():
        peak = v.gather(-2, v.abs().argmax(dim=-2, keepdim=True))
        mag = peak.abs()
        phase = torch.where(mag > 0, peak / torch.where(mag > 0, mag, 1), 1).to(v.dtype)
    return v * phase.conj()


def _generalized(p, eigvals_only):
    """The generalized problem of type 1, 2 or 3 through its reduction to a standard one."""
    import torch
    a, b = as_tensors(p["a"], p["b"])
    itype, driver = p["type"], p["driver"]
    if b.shape[-2:] != a.shape[-2:]:
        raise ValueError(f"wrong b dimensions {tuple(b.shape[-2:])}, should be "
                         f"{tuple(a.shape[-2:])}")
    if itype not in (1, 2, 3):
        raise ValueError('"type" keyword only accepts 1, 2, and 3.')
    if driver in ("ev", "evd", "evr", "evx"):
        raise ValueError(f'"{driver}" does not accept input b array '
                         "for standard eigenvalue problems.")
    batch = broadcast_batch(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = (_hermitian(x.to(dtype), bool(p["lower"])).expand(*batch, *x.shape[-2:])
            for x in (a, b))
    tri = FUNCTIONS["decomp.solve_triangular"]
    low = FUNCTIONS["decomp.cholesky"](b, lower=True, check_finite=p["check_finite"])
    if itype == 1:
        c = tri(low, tri(low, a, lower=True, check_finite=p["check_finite"]).mH, lower=True,
                check_finite=False)
    else:
        c = low.mH @ a @ low
    res = FUNCTIONS["decomp.eigh"](c, eigvals_only=eigvals_only, check_finite=False,
                                   subset_by_index=p["subset_by_index"],
                                   subset_by_value=p["subset_by_value"],
                                   driver=_STANDARD_DRIVER.get(driver, driver))
    if eigvals_only:
        return res
    w, y = res
    v = low @ y if itype == 3 else tri(low, y, trans=2, lower=True, check_finite=False)
    return EighResult(w, _positive_peaks(v))


def _run(fn, p, eigvals_only):
    if p["b"] is not None:
        return _generalized(p, eigvals_only)
    return _standard(fn, p, eigvals_only)


@rule("decomp.eigh")
def _eigh(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    return _run(fn, p, bool(p["eigvals_only"]))


@rule("decomp.eigvalsh")
def _eigvalsh(fn, *args, **kwargs):
    return _run(FUNCTIONS["decomp.eigh"], bound(fn, args, kwargs), True)
