"""Gradients of the Cholesky family for torch tensors (the rules of
:mod:`gpulinalg._runtime.gradients`): torch.linalg.cholesky's and torch.cholesky_solve's
formulas, the triangular solves on :func:`~gpulinalg.decomp.solve_triangular`'s engine.

As torch.linalg, a Hermitian input's gradient is Hermitian (the functions are differentiated
over Hermitian matrices), though the forward reads one triangle as SciPy's does."""

from ..._runtime.gradients import as_tensor, bound, call, rule, unbroadcast
from ..triangular._triangular_api import solve_triangular

__all__ = ["factor_backward"]


def _phi(x):
    """The lower triangle of ``x`` with its diagonal halved."""
    return x.tril() - 0.5 * x.diagonal(dim1=-2, dim2=-1).diag_embed()


def factor_backward(c, gc, lower):
    """The gradient of ``a`` from that of its Cholesky factor ``c`` (the triangle ``lower``
    names; zeros elsewhere): ``L^-H phi(L^H gL) L^-1``, made Hermitian."""
    low, g = (c, gc) if lower else (c.mH, gc.mH)
    p = _phi(low.mH @ g.tril())
    s = solve_triangular(low, p, trans=2, lower=True, check_finite=False)
    s = solve_triangular(low, s.mH, trans=2, lower=True, check_finite=False).mH
    return 0.5 * (s + s.mH)


def _pair_input(fn, args, kwargs, key="c_and_lower"):
    p = bound(fn, args, kwargs)
    c, lower = p.pop(key)
    return p, c, bool(lower)


@rule("decomp.cholesky")
def _cholesky(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    lower, a = bool(p["lower"]), p["a"]

    def forward(a):
        return (fn(a, lower=lower, check_finite=p["check_finite"]),)

    def backward(ins, outs, grads):
        return (None if grads[0] is None else factor_backward(outs[0], grads[0], lower),)
    return call(forward, backward, a)[0]


@rule("decomp.cho_factor")
def _cho_factor(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    lower, a = bool(p["lower"]), p["a"]

    def forward(a):
        return (fn(a, lower=lower, check_finite=p["check_finite"])[0],)

    def backward(ins, outs, grads):
        (c,), (gc,) = outs, grads
        if gc is None:
            return (None,)
        tri = gc.tril() if lower else gc.triu()
        factor = c.tril() if lower else c.triu()
        return (factor_backward(factor, tri, lower) + (gc - tri),)  # a's entries kept: copied
    return call(forward, backward, a)[0], lower


@rule("decomp.cho_solve")
def _cho_solve(fn, *args, **kwargs):
    p, c, lower = _pair_input(fn, args, kwargs)
    b = as_tensor(p["b"], c)
    c = as_tensor(c, b)

    def forward(c, b):
        return (fn((c, lower), b, check_finite=p["check_finite"]),)

    def backward(ins, outs, grads):
        c, b = ins
        (x,), (gx,) = outs, grads
        if gx is None:
            return None, None
        vec = b.dim() == 1  # one vector, or one for every matrix of a stack: columns
        xc, gxc = (x[..., None], gx[..., None]) if vec else (x, gx)
        gbc = fn((c, lower), gxc, check_finite=False)  # a^-H = a^-1: one more solve
        low = c.tril() if lower else c.triu().mH  # a = low low^H
        # (g_op + g_op^H) low with g_op = -g_b x^H is of rank 2k: no n x n x n product
        t = -(gbc @ (xc.mH @ low) + xc @ (gbc.mH @ low))
        gc = t.tril() if lower else t.mH.triu()
        return unbroadcast(gc, c.shape), unbroadcast(gbc[..., 0] if vec else gbc, b.shape)
    return call(forward, backward, c, b)[0]


@rule("decomp.logdet_cholesky")
def _logdet_cholesky(fn, *args, **kwargs):
    _, c, lower = _pair_input(fn, args, kwargs)

    def forward(c):
        return (fn((c, lower)),)

    def backward(ins, outs, grads):
        (c,), (g,) = ins, grads
        if g is None:
            return (None,)
        d = c.diagonal(dim1=-2, dim2=-1)
        return ((2 * g[..., None] / d.conj()).diag_embed(),)
    return call(forward, backward, c)[0]
