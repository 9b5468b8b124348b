"""The pivoted-Cholesky preconditioner of the matrix-free solver, written once for any array
module: ``P = L L^T + D`` for ``K = k(X) + diag(noise)``.

``L`` (``n x r``) is the rank-``r`` greedy pivoted Cholesky factor of the noise-free kernel
``k(X, X)`` (Harbrecht et al. 2012; Gardner et al. 2018 use it for GP solves): each step takes
the point of largest remaining diagonal and one row of the kernel, made from the kernel plan,
so that the ``n x n`` matrix is never stored. ``D`` is ``K``'s diagonal less that of
``L L^T`` (the noise plus what the factor leaves), so that ``P`` and ``K`` share their
diagonal. Solves go through the Woodbury identity with the ``r x r`` Cholesky factor ``R`` of
``I + L^T D^-1 L``: ``P^-1 = D^-1 - G G^T``, ``G = D^-1 L R^-T``, and
``log|P| = sum log D + 2 sum log diag R``; samples ``z = L g + D^(1/2) h`` have covariance
``P``.
"""

import numpy as np

from .._runtime.validation import namespace

__all__ = ["Preconditioner", "pivoted_cholesky"]

#: The factorization stops where the largest remaining diagonal falls below this fraction of
#: the largest one: the kernel's numerical rank is exhausted.
RANK_TOL = 1e-12


#: Steps of the factorization between two read-backs of whether the rank is exhausted (the
#: pivot and its test stay on the device in between: no synchronization per step on a GPU).
CHECK_EVERY = 32


def pivoted_cholesky(plan, x, rank, shift):
    """``(L, residual)``: the pivoted Cholesky factor ``L`` (``n x r``, ``r <= rank``) of the
    noise-free ``k(x, x)`` and the diagonal it leaves, ``diag(k(x, x) - L L^T) >= 0``. One
    kernel row per step (``O(n d)``) and an update of ``O(n r)``. The pivot stays an array:
    a step past the kernel's numerical rank (or at a NaN pivot) writes a zero row, and the
    rows are counted by one read-back at the end (and every :data:`CHECK_EVERY` steps, to
    stop early); once a pivot fails, every later one does (the diagonal only shrinks)."""
    xp = namespace(x)
    n = x.shape[0]
    d = xp.array(plan.diag(x, white=False), dtype=x.dtype)
    rank = min(int(rank), n)
    rows = xp.zeros((rank, n), dtype=x.dtype)
    live = xp.zeros(rank, dtype=bool)
    floor = None
    for m in range(rank):
        p = xp.argmax(d)
        top = d[p]
        floor = RANK_TOL * top if floor is None else floor
        ok = top > floor  # False for NaN
        row = plan.matrix(x[p][None, :], x, shift=shift)[0]
        if m:
            row = row - rows[:m, p] @ rows[:m]
        row = xp.where(ok, row / xp.sqrt(xp.where(ok, top, 1.0)), 0.0)
        rows[m] = row
        live[m] = ok
        d -= row * row
        d[p] = xp.where(ok, 0.0, d[p])
        if m % CHECK_EVERY == CHECK_EVERY - 1 and not bool(ok):
            break
    m = int(live.sum())
    xp.maximum(d, 0.0, out=d)
    return rows[:m].T, d


class Preconditioner:
    """``P = L L^T + D`` and what the solver needs of it: ``solve`` (``P^-1 v``), ``logdet``
    (``log|P|``, a host float), ``sample`` (draws of ``N(0, P)``) and ``dense_rows`` (rows of
    ``P^-1``, for the gradient's control variate).

    Parameters
    ----------
    la : module
        The engine of :mod:`._fit_xp` (its ``pivoted_cholesky``, ``cholesky`` and
        ``solve_triangular``).
    plan : KernelPlan
    x : (n, d) array
        Training inputs (float64).
    noise : float or (n,) array
        The diagonal added to ``k(x)`` (``alpha`` plus any jitter).
    rank : int
        Largest rank of ``L`` (0: ``P = diag(K)``, Jacobi).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    >>> from gpulinalg.gp import _engine_host
    >>> from gpulinalg.gp._kernels_xp import compile_kernel
    >>> x = np.random.default_rng(0).uniform(0, 1, (100, 2))
    >>> kernel = RBF(0.5) + WhiteKernel(0.01)
    >>> pre = Preconditioner(_engine_host, compile_kernel(kernel, 2), x, 0.0, 20)
    >>> P = pre.L @ pre.L.T + np.diag(pre.D)
    >>> bool(np.allclose(np.diag(P), np.diag(kernel(x))))
    True
    >>> v = np.ones((100, 1))
    >>> bool(np.allclose(pre.solve(v), np.linalg.solve(P, v)))
    True
    >>> bool(np.isclose(pre.logdet, np.linalg.slogdet(P)[1]))
    True
    """

    def __init__(self, la, plan, x, noise, rank, shift=None):
        xp = namespace(x)
        shift = x.mean(axis=0) if shift is None else shift
        L, resid = la.pivoted_cholesky(plan, x, rank, shift)
        noise = noise if not getattr(noise, "ndim", 0) else xp.asarray(noise, dtype=x.dtype)
        # K's diagonal (white noise included) less what L L^T holds of it
        D = plan.diag(x) - plan.diag(x, white=False) + resid + noise
        top = float(D.max())
        D = xp.maximum(D, max(top, 1.0) * np.finfo(x.dtype).eps)  # positive: P stays SPD
        self.rank, self.L, self.D = L.shape[1], L, D
        self._logdet = float(xp.log(D).sum())
        self.G = None
        if self.rank:
            Ls = L / xp.sqrt(D)[:, None]
            C = Ls.T @ Ls
            C.reshape(-1)[::self.rank + 1] += 1.0
            R = la.cholesky(C, True, True, True, C.dtype)
            self._logdet += 2.0 * float(xp.log(xp.diagonal(R)).sum())
            # G^T = R^-1 L^T D^-1: one triangular solve with n right-hand sides, once
            self.G = la.solve_triangular(R, xp.ascontiguousarray((L / D[:, None]).T), 0, True,
                                         False, True, R.dtype).T

    @property
    def logdet(self):
        """``log|P|`` (host float)."""
        return self._logdet

    def solve(self, v):
        """``P^-1 v`` for ``v`` of shape ``(n, t)``."""
        out = v / self.D[:, None]
        if self.G is not None:
            out -= self.G @ (self.G.T @ v)
        return out

    def sample(self, g, h):
        """``L g + D^(1/2) h``: draws of ``N(0, P)`` from standard normal ``g`` (at least
        ``rank`` rows; the first ``rank`` used) and ``h`` (``n`` rows)."""
        xp = namespace(h)
        z = xp.sqrt(self.D)[:, None] * h
        if self.rank:
            z += self.L @ g[:self.rank]
        return z

    def dense_rows(self, i0, i1):
        """Rows ``i0:i1`` of ``P^-1`` (``(i1 - i0) x n``; the gradient's exact trace term)."""
        xp = namespace(self.D)
        n = self.D.shape[0]
        out = -(self.G[i0:i1] @ self.G.T) if self.G is not None else \
            xp.zeros((i1 - i0, n), dtype=self.D.dtype)
        flat = out.reshape(-1)
        flat[i0:i0 + (i1 - i0 - 1) * (n + 1) + 1:n + 1] += 1.0 / self.D[i0:i1]
        return out
