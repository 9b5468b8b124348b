"""Backward error, iterative refinement and what a solve does when its answer is not good enough.

Written once for NumPy/SciPy and CuPy arrays (the module is found from the arrays).

The backward error of ``x`` for ``A x = b`` is, per right-hand side (column) ``j``,

    berr_j = ||b_j - A x_j||_inf / (||A||_inf ||x_j||_inf + ||b_j||_inf)

and the reported value is the largest over the columns. It is computed where ``x`` lives (on
the GPU for a GPU factorization), in the working precision. The default tolerance is

    tol = max(100, 10 * sqrt(n)) * eps(dtype)

(``n`` the order of ``A``; :func:`gpulinalg.sparse.default_tol`): a backward-stable sparse
direct solve lands well below it, a solve that lost accuracy to pivoting, growth or
near-singularity lands above it.
"""

from __future__ import annotations

import math

from .._runtime.dispatch import note
from .._runtime.errors import SingularMatrixError
from ._input_xp import xp_of
from ._results import ResidualError

__all__ = ["norm_inf", "backward_error", "growth", "solve_checked"]


def norm_inf(m):
    """``||A||_inf`` (largest absolute row sum) of a SciPy or CuPy CSR matrix."""
    if m.nnz == 0:
        return 0.0
    xp = xp_of(m.data)
    rows = abs(m).sum(axis=1)
    return float(xp.asarray(rows).max())


def backward_error(m, x, b, anorm):
    """Largest normwise backward error over the columns of ``x`` (see the module docstring)."""
    xp = xp_of(x)
    if x.size == 0:
        return 0.0
    r = b - m @ x
    axis = 0
    num = abs(r).max(axis=axis)
    den = anorm * abs(x).max(axis=axis) + abs(b).max(axis=axis)
    ratio = xp.where(den > 0, num / xp.where(den > 0, den, 1), xp.where(num > 0, xp.inf, 0))
    return float(ratio.max())


def growth(x, b, anorm):
    """``||A|| ||x|| / ||b||`` (largest over columns): a lower bound on ``cond(A)``."""
    xp = xp_of(x)
    bmax = abs(b).max(axis=0)
    ratio = anorm * abs(x).max(axis=0) / xp.where(bmax > 0, bmax, 1)
    return float(ratio.max()) if x.size else 0.0


def _finite(x):
    xp = xp_of(x)
    return bool(xp.isfinite(x).all())


def solve_checked(solve_fn, m, b, anorm, *, tol, check, max_steps, what, perturbed=0,
                  pivot_eps=None):
    """Solve with ``solve_fn``, measure, refine while above ``tol``, then act per ``check``.

    Returns ``(x, report)``; ``report`` (also noted in :func:`gpulinalg.last_run`) holds
    ``backward_error``, ``backward_error_initial``, ``refinement_steps``, ``tol`` and
    ``growth`` (``||A|| ||x|| / ||b||``, a lower bound on the condition number).
    ``perturbed`` is the number of pivots the factorization replaced by ``pivot_eps`` (cuDSS).
    With any, the matrix is singular, and :class:`~gpulinalg.SingularMatrixError` raised, when
    ``||A|| ||x|| / ||b||`` (a lower bound on the condition number) reaches ``0.01 / pivot_eps``:
    the solution is then made of the perturbations (its backward error alone cannot tell, since
    a huge ``x`` makes it small).
    """
    x = solve_fn(b)
    berr = first = backward_error(m, x, b, anorm)
    if not math.isfinite(berr) and not _finite(x):  # NaN/Inf in x make berr NaN or Inf
        raise SingularMatrixError(f"{what}: the solution has infs or NaNs: the matrix is singular "
                                  "or too ill conditioned for this factorization")
    steps = 0
    while berr > tol and steps < max_steps:
        dx = solve_fn(b - m @ x)
        x_new = x + dx
        berr_new = backward_error(m, x_new, b, anorm) if _finite(x_new) else math.inf
        if not berr_new < berr:  # refinement stopped helping: keep the better iterate
            break
        stalled = berr_new > 0.5 * berr
        x, berr, steps = x_new, berr_new, steps + 1
        if stalled:
            break
    g = growth(x, b, anorm)
    report = {"backward_error": berr, "backward_error_initial": first,
              "refinement_steps": steps, "tol": tol, "growth": g}
    note(**report)
    if perturbed and pivot_eps:
        if g >= 0.01 / pivot_eps:
            raise SingularMatrixError(
                f"{what}: the matrix is numerically singular: {perturbed} pivot(s) were at the "
                f"perturbation threshold {pivot_eps:.2g} and ||A|| ||x|| / ||b|| = {g:.3g}")
    if berr > tol and check != "ignore":
        msg = (f"{what}: backward error {berr:.3g} is above the tolerance {tol:.3g} after "
               f"{steps} refinement step(s) (the matrix may be singular or ill conditioned)")
        if check == "raise":
            raise ResidualError(msg)
        report["warning"] = msg  # warned by the public function, with the caller's stacklevel
    return x, report
