"""Gradients of the LU family's ``solve``, ``inv``, ``det``, ``slogdet``, ``lu_factor``,
``lu_solve`` and ``lu`` for torch tensors (the rules of :mod:`gpulinalg._runtime.gradients`):
torch.linalg's formulas, the solves and inverses on this family's own engines.

``lu`` and ``lu_factor`` take square, wide and tall matrices: torch's ``linalg_lu_backward``
(and ``lu_factor_ex_backward``'s split of the packed factor), its triangular solves through
:func:`~gpulinalg.decomp.solve_triangular`, so the backward is differentiable again.

``assume_a`` decides what the gradient of ``a`` holds: a triangular, diagonal or banded
structure the entries the call reads; "pos", "her" and "sym" a Hermitian (symmetric) gradient,
as torch.linalg differentiates over Hermitian matrices."""

import numpy as np

from ..._runtime.arrays import to_host
from ..._runtime.gradients import FUNCTIONS, as_tensors, bound, call, rule, unbroadcast
from ..triangular._triangular_grad import by_trans, from_op, solve_backward
from ._lu_rules import SOLVE_STRUCTURES
from ._lu_pivots import row_permutation

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
        gb, gop = solve_backward(x, b, gx, lambda g: adjoint_solve(a, g))
        ga = project(gop.mT if transposed else gop, kind, a)
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


def _rows(piv, m):
    """``perm`` with ``a[perm] = L U`` from LAPACK's row interchanges ``piv`` (0-based, as
    SciPy's ``lu_factor``) applied to ``m`` rows, on ``piv``'s device."""
    import torch
    return torch.as_tensor(row_permutation(np.asarray(to_host(piv)), m), device=piv.device)


def _unpermute(x, perm):
    """``g`` with ``g[perm] = x`` (rows; batched)."""
    inverse = perm.argsort(dim=-1)
    return x.gather(-2, inverse[..., :, None].expand(x.shape))


def _permute(x, perm):
    return x.gather(-2, perm[..., :, None].expand(x.shape))


def _rows_of(p_indices):
    """``perm`` with ``a[perm] = L U`` from ``lu``'s ``p_indices`` (``a = L[p_indices] U``)."""
    return p_indices.long().argsort(dim=-1)


def _right_solve_h(up, x):
    """``x U^-H`` (``U`` upper triangular) through ``solve_triangular``."""
    solve = FUNCTIONS["decomp.solve_triangular"]
    return solve(up, x.mH, lower=False, check_finite=False).mH


def _left_solve_h(low, x):
    """``L^-H x`` (``L`` unit lower triangular) through ``solve_triangular``."""
    solve = FUNCTIONS["decomp.solve_triangular"]
    return solve(low, x, trans=2, lower=True, unit_diagonal=True, check_finite=False)


def _factor_grad(low, up, gl, gu):
    """The gradient of ``P^T a`` (``m x n``) from those of its unit lower ``L`` (``m x k``) and
    upper ``U`` (``k x n``) factors, ``k = min(m, n)``: torch's ``linalg_lu_backward``. Square:
    ``L^-H (tril(L^H gL, -1) + triu(gU U^H)) U^-H``. Wide (``U = (U1 | U2)``):
    ``L^-H ((tril(L^H gL - triu(gU) U^H, -1) U1^-H + triu(gU1)) | gU2)``. Tall
    (``L = (L1; L2)``): ``((L1^-H triu(gU U^H - L^H tril(gL, -1)) + tril(gL1, -1)); gL2)
    U^-H``. ``gl`` or ``gu`` may be ``None`` (not both)."""
    import torch
    m, n = low.shape[-2], up.shape[-1]
    k = min(m, n)
    if m == n:
        x = 0
        if gl is not None:
            x = x + (low.mH @ gl).tril(-1)
        if gu is not None:
            x = x + (gu @ up.mH).triu()
        return _left_solve_h(low, _right_solve_h(up, x))
    if m < n:  # wide: the extra columns U2 take gU2 through L^-H only
        x = low.mH @ gl if gl is not None else 0
        if gu is not None:
            x = x - gu.triu() @ up.mH
        x = _right_solve_h(up[..., :k], x.tril(-1))
        if gu is not None:
            x = torch.cat([x + gu[..., :k].triu(), gu[..., k:]], dim=-1)
        x = _left_solve_h(low, x)
        if gu is None:
            x = torch.cat([x, x.new_zeros(x.shape[:-1] + (n - k,))], dim=-1)
        return x
    # tall: the extra rows L2 take gL2 through U^-H only
    x = gu @ up.mH if gu is not None else 0
    if gl is not None:
        x = x - low.mH @ gl.tril(-1)
    x = _left_solve_h(low[..., :k, :], x.triu())
    if gl is not None:
        x = torch.cat([x + gl[..., :k, :].tril(-1), gl[..., k:, :]], dim=-2)
    x = _right_solve_h(up, x)
    if gl is None:
        x = torch.cat([x, x.new_zeros(x.shape[:-2] + (m - k, k))], dim=-2)
    return x


def _split(lu):
    """The unit lower ``L`` (``m x k``) and upper ``U`` (``k x n``) packed in ``lu``."""
    import torch
    m, n = lu.shape[-2:]
    k = min(m, n)
    eye = torch.eye(m, k, dtype=lu.dtype, device=lu.device)
    return lu[..., :k].tril(-1) + eye, lu[..., :k, :].triu()


@rule("decomp.lu_factor")
def _lu_factor(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    kept = {}

    def forward(a):
        lu, piv = fn(a, check_finite=p["check_finite"])
        kept["piv"] = piv
        return (lu,)

    def backward(ins, outs, grads):
        (lu,), (g,) = outs, grads
        if g is None:
            return (None,)
        low, up = _split(lu)
        k = min(lu.shape[-2:])  # lu_factor_ex's: L's gradient from the first k columns, U's rows
        g = _factor_grad(low, up, g[..., :k].tril(-1), g[..., :k, :].triu())
        return (_unpermute(g, _rows(kept["piv"], lu.shape[-2])),)
    return call(forward, backward, p["a"])[0], kept["piv"]


@rule("decomp.lu_solve")
def _lu_solve(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    lu, piv = p["lu_and_piv"]
    lu, b = as_tensors(lu, p["b"])
    trans = {0: 0, 1: 1, 2: 2}[int(p["trans"])]
    check = p["check_finite"]

    def forward(lu, b):
        return (fn((lu, piv), b, trans=trans, check_finite=check),)

    def backward(ins, outs, grads):
        lu, b = ins
        (x,), (gx,) = outs, grads
        if gx is None:
            return None, None
        solve = by_trans(lambda g, t: fn((lu, piv), g, trans=t, check_finite=False), trans)
        gb, gop = solve_backward(x, b, gx, solve)
        low, up = _split(lu)
        g = _permute(from_op(gop, trans), _rows(piv, lu.shape[-2]))  # the gradient of P^T a = L U
        g_lu = (g @ up.mH).tril(-1) + (low.mH @ g).triu()
        return unbroadcast(g_lu, lu.shape), unbroadcast(gb, b.shape)
    return call(forward, backward, lu, b)[0]


@rule("decomp.lu")
def _lu(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    permute_l, p_indices = bool(p["permute_l"]), bool(p["p_indices"])
    kept = {}

    def forward(a):
        perm_idx, low, up = fn(a, check_finite=p["check_finite"], p_indices=True)
        kept["perm"] = perm_idx
        return low, up

    def backward(ins, outs, grads):
        (low, up), (gl, gu) = outs, grads
        if gl is None and gu is None:
            return (None,)
        g = _factor_grad(low, up, None if gl is None else gl.tril(-1), gu)
        return (_unpermute(g, _rows_of(kept["perm"])),)
    low, up = call(forward, backward, p["a"])
    perm = _rows_of(kept["perm"])
    if permute_l:
        return _unpermute(low, perm), up
    if p_indices:
        return kept["perm"], low, up
    import torch
    m = low.shape[-2]  # P is m x m and real, as the call without grad returns it
    eye = torch.eye(m, dtype=low.real.dtype, device=low.device)
    return _unpermute(eye.expand(low.shape[:-1] + (m,)).contiguous(), perm), low, up
