"""Gradients of the LU family's ``solve``, ``inv``, ``det`` and ``slogdet`` for torch tensors
(the rules of :mod:`gpulinalg._runtime.gradients`): torch.linalg's formulas, the solves and
inverses on this family's own engines.

``assume_a`` decides what the gradient of ``a`` holds: a triangular, diagonal or banded
structure the entries the call reads; "pos", "her" and "sym" a Hermitian (symmetric) gradient,
as torch.linalg differentiates over Hermitian matrices."""

from ..._runtime.gradients import FUNCTIONS, as_tensors, bound, call, rule, unbroadcast
from ..triangular._triangular_grad import outer, stacked_vector
from ._lu_rules import SOLVE_STRUCTURES

__all__ = ["project"]

_OTHER = {"upper triangular": "lower triangular", "lower triangular": "upper triangular"}


def project(g, kind, a):
    """The gradient ``g`` of the matrix a call read, as the gradient of ``a`` under the
    structure ``kind`` (:data:`SOLVE_STRUCTURES`' values)."""
    if kind in ("pos", "her"):
        return 0.5 * (g + g.mH)
    if kind == "sym":
        return 0.5 * (g + g.mT)
    if kind == "upper triangular":
        return g.triu()
    if kind == "lower triangular":
        return g.tril()
    if kind == "diagonal":
        return g.diagonal(dim1=-2, dim2=-1).diag_embed()
    if kind in ("tridiagonal", "banded"):
        return g * _band(a, 1 if kind == "tridiagonal" else None)
    return g


def _band(a, width):
    """The mask of the band a banded solve reads: ``width`` diagonals each side, or those of
    ``a``'s nonzeros."""
    import torch
    n = a.shape[-1]
    i = torch.arange(n, device=a.device)
    off = i[None, :] - i[:, None]  # j - i
    if width is not None:
        return (off.abs() <= width).to(a.real.dtype)
    nz = (a != 0).reshape(-1, n, n).any(0)
    upper = int(off[nz].max()) if nz.any() else 0
    lower = int((-off[nz]).max()) if nz.any() else 0
    return ((off <= upper) & (-off <= lower)).to(a.real.dtype)


@rule("decomp.solve")
def _solve(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    a, b = as_tensors(p["a"], p["b"])
    assume, lower, transposed = p["assume_a"], bool(p["lower"]), bool(p["transposed"])
    kind = SOLVE_STRUCTURES.get(assume, "gen")
    opts = dict(check_finite=p["check_finite"])

    def forward(a, b):
        return (fn(a, b, lower=lower, assume_a=assume, transposed=transposed, **opts),)

    def adjoint_solve(a, g):
        """``op(a)^-H g`` on the structure's own route."""
        if transposed:  # real: (a^T)^H = a
            return fn(a, g, lower=lower, assume_a=assume, **opts)
        if kind in ("pos", "her"):
            return fn(a, g, lower=lower, assume_a=assume, **opts)
        if kind == "sym":
            return fn(a, g.conj(), lower=lower, assume_a=assume, **opts).conj()
        return fn(a.mH, g, lower=lower, assume_a=_OTHER.get(kind, assume), **opts)

    def backward(ins, outs, grads):
        a, b = ins
        (x,), (gx,) = outs, grads
        if gx is None:
            return None, None
        vec = stacked_vector(b, x)
        if vec:
            gx, x = gx[..., None], x[..., None]
        gb = adjoint_solve(a, gx)
        gop = -outer(gb, x)
        ga = project(gop.mT if transposed else gop, kind, a)
        gb = gb[..., 0] if vec else gb
        return unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)
    return call(forward, backward, a, b)[0]


@rule("decomp.inv")
def _inv(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    assume, lower = p["assume_a"], bool(p["lower"])
    kind = SOLVE_STRUCTURES.get(assume, "gen")

    def forward(a):
        return (fn(a, check_finite=p["check_finite"], assume_a=assume, lower=lower),)

    def backward(ins, outs, grads):
        (a,), (x,), (gx,) = ins, outs, grads
        if gx is None:
            return (None,)
        return (project(-(x.mH @ gx @ x.mH), kind, a),)
    return call(forward, backward, p["a"])[0]


def _inverse_h(a):
    """``a^-H`` through :func:`inv`'s engine (differentiable again)."""
    return FUNCTIONS["decomp.inv"](a).mH


@rule("decomp.det")
def _det(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)

    def forward(a):
        return (fn(a, check_finite=p["check_finite"]),)

    def backward(ins, outs, grads):
        (a,), (d,), (g,) = ins, outs, grads
        if g is None:
            return (None,)
        return ((g * d.conj())[..., None, None] * _inverse_h(a),)
    return call(forward, backward, p["a"])[0]


@rule("decomp.slogdet")
def _slogdet(fn, *args, **kwargs):
    from .._results import SlogdetResult
    p = bound(fn, args, kwargs)

    def forward(a):
        return tuple(fn(a))

    def backward(ins, outs, grads):
        (a,), (sign, _), (g_sign, g_logabs) = ins, outs, grads
        if g_logabs is None and (g_sign is None or not a.is_complex()):
            return (None,)
        g = g_logabs if g_logabs is not None else sign.real.new_zeros(sign.shape)
        if a.is_complex():
            g = g.to(a.dtype)
            if g_sign is not None:  # the phase: d sign = sign * i Im(tr(a^-1 da))
                g = g - 1j * (g_sign.conj() * sign).imag
        return (g[..., None, None] * _inverse_h(a),)
    sign, logabs = call(forward, backward, p["a"])
    return SlogdetResult(sign, logabs)
