"""LOVE predictive variances for the matrix-free solver (Pleiss et al. 2018, "Constant-Time
Predictive Distributions for Gaussian Processes"; GPyTorch's ``fast_pred_var``), written once
for any array module.

A block Lanczos process on ``K = k(X) + diag(noise)``, started from ``BLOCK`` seeded Gaussian
vectors and fully reorthogonalized, builds an orthonormal basis ``V`` (``n x r``) of a Krylov
space and ``T = V^T K V``. With ``T = L L^T`` and ``R = V L^-T``, ``K^-1 ~ R R^T`` on that
space, so a query point's variance is ``k** - ||R^T k||^2`` (``k = k(X, x*)``): one product
with ``R`` per query block instead of a conjugate-gradient run. The approximation is a
Galerkin projection: ``||R^T k||^2 <= k^T K^-1 k``, it grows with ``r``, and the variances
it gives are never below the exact ones.

The rank grows one block (one kernel-matrix product) at a time until a stopping test passes:
the exact variances of ``CHECKS`` query points (conjugate-gradient solves with the
pivoted-Cholesky preconditioner, whose quadratic forms are accurate to second order in the
residual) against the factor's, in standard deviations. Where the test never passes below
the largest rank, the factor says so (``passed``) and the caller decides.

Plain Lanczos rather than Lanczos on the preconditioned matrix: with the preconditioner,
``K^-1 ~ P^-1 + V (T^-1 - I) V^T`` needed half the rank at moderate accuracy on some
kernels, but its error was not monotone in ``r`` and rounding in the ``P`` inner product
stopped it short of the plain process's accuracy at high rank.
"""

import math

import numpy as np

from .._runtime.arrays import to_host
from .._runtime.validation import namespace

__all__ = ["BLOCK", "CHECKS", "AUTO_MIN_QUERIES", "LoveFactor", "lanczos_factor",
           "variance_method"]

#: New Lanczos vectors per step: one product ``K V`` (one pass over the kernel's tiles) each.
BLOCK = 32
#: Query points whose exact variances check the factor as its rank grows.
CHECKS = 32
#: ``variance="auto"`` takes the factor from this many query points on (or once it is
#: cached): below, exact solves cost less than building the factor.
AUTO_MIN_QUERIES = 1000
#: A new direction whose squared norm after reorthogonalization is at most this fraction of
#: the block's largest is dropped: the Krylov space is exhausted in it (rounding only).
DEFLATE = 1e-14


class LoveFactor:
    """A cached LOVE factor: ``R`` (``n x r``, ``K^-1 ~ R R^T``; ``None`` once dropped) and
    what built it: ``rank``, ``steps`` (kernel-matrix products), ``check_error`` (the
    largest difference of standard deviation at the check points, in the kernel's units),
    ``passed`` (at most the tolerance), ``check_iterations`` (of the exact solves that
    checked it)."""

    __slots__ = ("R", "rank", "steps", "check_error", "passed", "check_iterations")

    def __init__(self, R, steps, check_error, passed, check_iterations):
        self.R, self.rank, self.steps, self.check_error = R, R.shape[1], steps, check_error
        self.passed, self.check_iterations = passed, check_iterations

    def quadratic(self, kT):
        """``||R^T k||^2`` per column of ``kT`` (``n x b``), in ``kT``'s array module."""
        xp = namespace(kT)
        R = self.R
        if namespace(R) is not xp:  # built on the other device: moved for this call
            R = xp.asarray(to_host(R))
        u = R.T @ kT
        return (u * u).sum(axis=0)


def variance_method(option, m, cached):
    """``"lanczos"`` or ``"exact"`` for ``CGOptions.variance`` ``option``, ``m`` query points
    and whether a factor is ``cached`` (``True``, ``False`` for one that failed its check,
    ``None`` for none yet).

    >>> variance_method("auto", 10, None), variance_method("auto", 5000, None)
    ('exact', 'lanczos')
    >>> variance_method("auto", 10, True), variance_method("auto", 5000, False)
    ('lanczos', 'exact')
    """
    if option != "auto":
        return option
    if cached is not None:
        return "lanczos" if cached else "exact"
    return "lanczos" if m >= AUTO_MIN_QUERIES else "exact"


def _orthonormal(w, q, cap):
    """At most ``cap`` orthonormal columns spanning ``w`` less its part in the orthonormal
    ``q``'s span (classical Gram-Schmidt twice, the block normalized through its Gram
    matrix); directions that vanish (:data:`DEFLATE`) are dropped."""
    xp = namespace(w)
    top = None
    for _ in range(2):
        if q.shape[1]:
            w = w - q @ (q.T @ w)
        g = to_host(w.T @ w)
        lam, u = np.linalg.eigh(0.5 * (g + g.T))
        top = lam[-1] if top is None else 1.0  # pass 2: the block is orthonormal already
        keep = np.flatnonzero(lam > DEFLATE * max(top, 0.0))[::-1][:cap]
        if not keep.size:
            return w[:, :0]
        w = w @ xp.asarray(u[:, keep] / np.sqrt(lam[keep]), dtype=w.dtype)
        cap = keep.size
    return w


def _inverse_root(t):
    """``F`` (``r x r'``, host) with ``F F^T = T^-1``: ``L^-T`` from the Cholesky factor, or
    the eigenvectors over the square roots of the eigenvalues where rounding left ``T``
    short of positive definite (those at or below rounding dropped)."""
    r = t.shape[0]
    try:
        low = np.linalg.cholesky(t)
        return np.linalg.solve(low, np.eye(r)).T  # host r x r: NumPy's solve, no SciPy in xp code
    except np.linalg.LinAlgError:
        lam, s = np.linalg.eigh(t)
        keep = lam > r * np.finfo(np.float64).eps * max(lam[-1], 0.0)
        return s[:, keep] / np.sqrt(lam[keep])


def _check(t, b, exact, prior):
    """The largest difference of standard deviation at the check points between the factor
    of ``T`` and the ``exact`` quadratic forms (``b = V^T k_c``, host arrays)."""
    f = _inverse_root(t)
    u = f.T @ b
    q = (u * u).sum(axis=0)
    std = np.sqrt(np.maximum(prior - q, 0.0))
    return float(np.abs(std - np.sqrt(np.maximum(prior - exact, 0.0))).max())


def lanczos_factor(matmul, kc, exact, prior, *, rank, tol, seed):
    """The LOVE factor of ``K`` by block Lanczos, its rank grown until the check passes.

    Parameters
    ----------
    matmul : callable
        ``v -> K v`` for ``v`` of shape ``(n, s)``.
    kc : (n, c) array
        Cross-kernel columns ``k(X, x_c)`` of the check points.
    exact : (c,) host array
        Their exact quadratic forms ``k_c^T K^-1 k_c``.
    prior : (c,) host array
        Their prior variances ``k(x_c, x_c)``.
    rank : int
        Largest rank (at most ``n``).
    tol : float
        The check passes once every check point's standard deviation is within ``tol``.
    seed : int
        Seed of the starting block.

    Returns
    -------
    LoveFactor
        ``R`` in ``kc``'s array module; ``check_iterations`` 0 (the caller's to fill).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> a = rng.standard_normal((200, 200)); K = a @ a.T / 200 + 0.1 * np.eye(200)
    >>> kc = rng.standard_normal((200, 4))
    >>> exact = (kc * np.linalg.solve(K, kc)).sum(axis=0); prior = exact + 0.01
    >>> f = lanczos_factor(lambda v: K @ v, kc, exact, prior, rank=200, tol=1e-6, seed=0)
    >>> f.passed, f.rank <= 200
    (True, True)
    >>> q = f.quadratic(kc)
    >>> bool(np.abs(q - exact).max() < 1e-7), bool((q <= exact * (1 + 1e-12)).all())
    (True, True)
    """
    xp = namespace(kc)
    n = kc.shape[0]
    rmax = max(1, min(int(rank), n))
    v = xp.empty((n, rmax), dtype=kc.dtype)
    t, b = np.zeros((rmax, rmax)), np.zeros((rmax, kc.shape[1]))
    start = np.random.default_rng(seed).standard_normal((n, min(BLOCK, rmax)))
    block = _orthonormal(xp.asarray(start, dtype=kc.dtype), v[:, :0], rmax)
    r, steps, error = 0, 0, math.inf
    while block.shape[1]:
        s = block.shape[1]
        v[:, r:r + s] = block
        w = matmul(block)
        steps += 1
        c = to_host(v[:, :r + s].T @ w)  # the new block's columns of T = V^T K V
        t[:r + s, r:r + s] = c
        t[r:r + s, :r] = c[:r].T
        t[r:r + s, r:r + s] = 0.5 * (c[r:] + c[r:].T)
        b[r:r + s] = to_host(block.T @ kc)
        r += s
        error = _check(t[:r, :r], b[:r], exact, prior)
        if error <= tol or r >= rmax:
            break
        block = _orthonormal(w, v[:, :r], rmax - r)  # empty: the Krylov space is exhausted
    f = xp.asarray(_inverse_root(t[:r, :r]), dtype=kc.dtype)
    rows = max(1, (1 << 24) // max(r, 1))
    for i0 in range(0, n, rows):  # R = V F, row block by row block in V's own memory
        v[i0:i0 + rows, :f.shape[1]] = v[i0:i0 + rows, :r] @ f
    R = v if f.shape[1] == rmax else xp.ascontiguousarray(v[:, :f.shape[1]])  # frees the rest
    return LoveFactor(R, steps, error, error <= tol, 0)
