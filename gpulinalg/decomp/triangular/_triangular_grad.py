"""The gradient of :func:`solve_triangular` for torch tensors (the rule of
:mod:`gpulinalg._runtime.gradients`): torch.linalg.solve_triangular's formula, its solves on
this family's own engine."""

from ..._runtime.gradients import as_tensors, bound, call, rule, unbroadcast

__all__ = ["TRANS", "outer", "triangle", "stacked_vector", "solve_backward", "by_trans",
           "from_op"]

#: SciPy's ``trans`` values: 0 ``a``, 1 ``a.T``, 2 ``a.H``.
TRANS = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2, "n": 0, "t": 1, "c": 2}


def outer(g, x):
    """``g x^H`` of two right-hand sides, vectors (n,) or matrices (..., n, k)."""
    if g.dim() == 1:
        return g[:, None] * x.conj()[None, :]
    return g @ x.mH


def stacked_vector(b, x):
    """Whether ``x`` is a stack of vectors solved for one 1-D ``b`` (SciPy's rule: one
    right-hand side for every matrix); the backward then works on columns ``x[..., None]``."""
    return b.dim() == 1 and x.dim() > 1


def solve_backward(x, b, gx, adjoint_solve):
    """``(g_b, g_op)`` of ``x = op(A)^-1 b``: ``g_b = op(A)^-H g_x`` by ``adjoint_solve``, and
    ``g_op = -g_b x^H``, the gradient of ``op(A)`` (a 1-D ``b`` of a stack as columns)."""
    vec = stacked_vector(b, x)
    if vec:
        gx, x = gx[..., None], x[..., None]
    gb = adjoint_solve(gx)
    return (gb[..., 0] if vec else gb), -outer(gb, x)


def by_trans(solve, trans):
    """``op(A)^-H g`` from ``solve(g, trans)`` (``op`` named by ``trans``, 0, 1 or 2)."""
    if trans == 1:  # op(a)^H = conj(a)
        return lambda g: solve(g.conj(), 0).conj()
    return lambda g: solve(g, 2 if trans == 0 else 0)


def from_op(g, trans):
    """The gradient of ``A`` from that of ``op(A)``."""
    return g if trans == 0 else g.mT if trans == 1 else g.mH


def triangle(g, lower, unit_diagonal=False):
    """``g`` restricted to the triangle a triangular solve reads."""
    out = g.tril() if lower else g.triu()
    if unit_diagonal:
        out = out - out.diagonal(dim1=-2, dim2=-1).diag_embed()
    return out


@rule("decomp.solve_triangular")
def _solve_triangular(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    trans, lower, unit = TRANS[p["trans"]], bool(p["lower"]), bool(p["unit_diagonal"])
    a, b = as_tensors(p["a"], p["b"])
    opts = dict(lower=lower, unit_diagonal=unit, check_finite=p["check_finite"])

    def forward(a, b):
        return (fn(a, b, trans, **opts),)

    def backward(ins, outs, grads):
        a, b = ins
        (x,), (gx,) = outs, grads
        if gx is None:
            return None, None
        gb, gop = solve_backward(x, b, gx, by_trans(lambda g, t: fn(a, g, t, **opts), trans))
        ga = triangle(from_op(gop, trans), lower, unit)
        return unbroadcast(ga, a.shape), unbroadcast(gb, b.shape)
    return call(forward, backward, a, b)[0]
