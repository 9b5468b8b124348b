"""Modified batched preconditioned conjugate gradients (mBCG) and stochastic Lanczos
quadrature, written once for any array module.

:func:`mbcg` solves ``K X = B`` for a block of right-hand sides at once (Gardner et al. 2018,
"GPyTorch: Blackbox Matrix-Matrix Gaussian Process Inference", algorithm 2; GPyTorch's
``linear_operator.utils.linear_cg``): one product ``K P`` per iteration for all columns
still moving, each column stopping once its relative residual is at most the tolerance.
Its step sizes ``a_k`` and ratios ``b_k`` are those of a Lanczos process on the preconditioned
matrix ``P^-1/2 K P^-1/2`` started at ``P^-1/2 b`` (Saad, "Iterative methods", 6.7.3), so
each column also yields the tridiagonal matrix ``T`` of that process for free:
``T_00 = 1/a_0``, ``T_kk = 1/a_k + b_k/a_(k-1)``, ``T_k,k-1 = sqrt(b_k)/a_(k-1)``.

:func:`logdet_quadrature` turns those into ``log|P^-1 K| ~ n/s sum_j e1^T log(T_j) e1`` for
``s`` probes ``z_j ~ N(0, P)`` (stochastic Lanczos quadrature, Ubaru et al. 2017, with
GPyTorch's normalised probes).
"""

import math

import numpy as np

from .._runtime.arrays import to_host
from .._runtime.validation import namespace

__all__ = ["CGResult", "mbcg", "tridiagonals", "logdet_quadrature"]


class CGResult:
    """What :func:`mbcg` returns: ``x`` (the solutions, ``n x t``), ``iterations`` (the
    products made), ``residual`` (each column's final ``||b - K x|| / ||b||``, host array),
    ``converged`` (all of them at most the tolerance), and the recorded coefficients
    ``alphas``, ``betas``, ``steps`` (host arrays, ``iterations x t``; ``steps`` says which
    columns took each step)."""

    __slots__ = ("x", "iterations", "residual", "converged", "alphas", "betas", "steps")

    def __init__(self, **kw):
        for name in self.__slots__:
            setattr(self, name, kw[name])


def _col_dot(a, b):
    return (a * b).sum(axis=0)


def mbcg(matmul, b, solve, *, tol, max_iter):
    """Preconditioned conjugate gradients for ``K x = b``, all columns of ``b`` at once.

    Parameters
    ----------
    matmul : callable
        ``v -> K v`` for ``v`` of shape ``(n, t')``.
    b : (n, t) array
    solve : callable
        ``r -> P^-1 r`` (the preconditioner), for ``r`` of shape ``(n, t')``.
    tol : float
        A column stops once ``||b - K x|| <= tol ||b||`` (a zero column at once).
    max_iter : int

    Returns
    -------
    CGResult

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> a = rng.standard_normal((50, 50)); K = a @ a.T + 50 * np.eye(50)
    >>> b = rng.standard_normal((50, 3))
    >>> res = mbcg(lambda v: K @ v, b, lambda r: r.copy(), tol=1e-10, max_iter=200)
    >>> bool(np.allclose(K @ res.x, b)), res.converged
    (True, True)
    """
    xp = namespace(b)
    n, t = b.shape
    bnorm = to_host(xp.sqrt(_col_dot(b, b)))
    scale = np.where(bnorm > 0, bnorm, 1.0)
    x = xp.zeros_like(b)
    r = b.copy()
    active = np.flatnonzero(bnorm > 0)
    z = solve(r)
    p = z.copy()
    rz = _col_dot(r, z)
    residual = np.where(bnorm > 0, 1.0, 0.0)
    alphas, betas, steps = [], [], []
    k = 0
    while active.size and k < max_iter:
        idx = xp.asarray(active)
        whole = active.size == t  # every column moves: no gathering
        pa = p if whole else p[:, idx]
        q = matmul(pa)
        rza = rz if whole else rz[idx]
        a = rza / _col_dot(pa, q)
        if whole:
            x += a * pa
            r -= a * q
            ra = r
        else:
            x[:, idx] += a * pa
            r[:, idx] -= a * q
            ra = r[:, idx]
        k += 1
        res = to_host(xp.sqrt(_col_dot(ra, ra))) / scale[active]
        residual[active] = res
        za = solve(ra)
        rz_new = _col_dot(ra, za)
        beta = rz_new / rza
        if whole:
            p *= beta
            p += za
            rz = rz_new
        else:
            p[:, idx] = za + beta * pa
            rz[idx] = rz_new
        for store, value in ((alphas, a), (betas, beta)):
            full = np.full(t, np.nan)
            full[active] = to_host(value)
            store.append(full)
        mask = np.zeros(t, dtype=bool)
        mask[active] = True
        steps.append(mask)
        active = active[res > tol]
    shape = (0, t)
    return CGResult(x=x, iterations=k, residual=residual, converged=not active.size,
                    alphas=np.array(alphas).reshape(-1, t) if alphas else np.zeros(shape),
                    betas=np.array(betas).reshape(-1, t) if betas else np.zeros(shape),
                    steps=np.array(steps).reshape(-1, t) if steps else np.zeros(shape, bool))


def tridiagonals(res, columns):
    """The Lanczos tridiagonal matrices of ``columns`` of an :func:`mbcg` run, as
    ``(diagonal, off_diagonal)`` host arrays per column (``T_00 = 1/a_0``,
    ``T_kk = 1/a_k + b_(k-1)/a_(k-1)``, ``T_k,k-1 = sqrt(b_(k-1))/a_(k-1)``, where ``b_(k-1)``
    is the ratio computed at the end of step ``k - 1``)."""
    out = []
    for j in columns:
        took = res.steps[:, j]
        a, b = res.alphas[took, j], res.betas[took, j]
        diag = 1.0 / a
        diag[1:] += b[:-1] / a[:-1]
        out.append((diag, np.sqrt(b[:-1]) / a[:-1]))
    return out


def logdet_quadrature(res, columns, n):
    """``n/s sum_j e1^T log(T_j) e1`` over the ``s`` probe ``columns``: the stochastic Lanczos
    estimate of ``log|P^-1 K|`` for probes drawn from ``N(0, P)``. Each ``T_j`` is at most
    ``max_iter`` square, diagonalized on the host."""
    total = 0.0
    for diag, off in tridiagonals(res, columns):
        if diag.size == 0:
            continue
        t = np.diag(diag) + np.diag(off, 1) + np.diag(off, -1)
        lam, vec = np.linalg.eigh(t)
        lam = np.maximum(lam, np.finfo(np.float64).tiny)  # rounding: never log of <= 0
        total += float((vec[0] ** 2 * np.log(lam)).sum())
    return n * total / max(len(columns), 1) if math.isfinite(total) else math.nan
