"""Condition estimate of a factorized sparse matrix and the one ill-conditioning rule.

Written once for NumPy and CuPy arrays: the solves are passed in (the factor's own, through
:func:`gpulinalg.sparse._factor_xp.solve_op`), the arrays' module is found from the arrays.

The rule (``docs/sparse.md``, "Singular and ill-conditioned systems"):

* a pivot the engine reports as zero (SuperLU's exactly singular factor, cuDSS's failed
  factorization or perturbed pivots with a solution made of the perturbation, cuSOLVER-Sp's
  ``singularity`` output) raises :class:`~gpulinalg.SingularMatrixError`, whatever ``check``;
* otherwise the reciprocal condition number ``rcond = 1 / (||A||_1 ||A^-1||_1)`` is estimated
  with Hager and Higham's 1-norm estimator (LAPACK ``xLACN2``, what ``xGECON`` uses and
  ``scipy.sparse.linalg.onenormest`` with ``t=1``) applied to ``A^-1`` through the factor's
  solves with ``A`` and ``A^H``; ``rcond < eps(dtype)`` (SciPy's ``LinAlgWarning`` rule) is
  numerically singular: ``check="raise"`` raises :class:`~gpulinalg.SingularMatrixError`,
  ``check="warn"`` warns :class:`~gpulinalg.IllConditionedWarning`, ``check="ignore"`` does
  nothing (and estimates nothing).

A factorization that replaced tiny pivots (cuDSS's pivot perturbation, ``pivot_eps``) is of a
nearby matrix whose rcond cannot fall far below ``pivot_eps``: the engine then sets
``rcond_floor`` (``RCOND_FLOOR_PIVOTS * pivot_eps``) and that, not ``eps``, is the limit.

The estimate costs a handful of solves, so a solve runs it only when a free sign points at
trouble: the growth ``||A||_inf ||x||_inf / ||b||_inf`` (a lower bound on ``cond_inf(A)``) is at
least :data:`GROWTH_TRIGGER` ``/ sqrt(eps)``, or the smallest pivot the engine already holds is
below ``sqrt(eps)`` times the largest. The estimate is kept with the factorization until it is
refactorized.
"""

from __future__ import annotations

import math

import numpy as np

from .._runtime.dispatch import note
from .._runtime.errors import SingularMatrixError
from ._input_xp import xp_of

__all__ = ["GROWTH_TRIGGER", "PIVOT_TRIGGER", "MAX_ITERATIONS", "inverse_norm1", "norm1",
           "rcond_of", "triggered", "assess"]

#: growth ``||A|| ||x|| / ||b||`` from which a solve estimates rcond, in units of 1/sqrt(eps)
GROWTH_TRIGGER = 1.0
#: smallest/largest pivot ratio under which a solve estimates rcond, in units of sqrt(eps)
PIVOT_TRIGGER = 1.0
#: most power-method steps of the 1-norm estimator (LAPACK's ITMAX)
MAX_ITERATIONS = 5


def norm1(m):
    """``||A||_1`` (largest absolute column sum) of a SciPy or CuPy CSR matrix."""
    if m.nnz == 0:
        return 0.0
    xp = xp_of(m.data)
    return float(xp.asarray(abs(m).sum(axis=0)).max())


def _sign(y, xp):
    """``y / |y|`` with 1 where ``y`` is 0 (real: ±1)."""
    a = abs(y)
    safe = xp.where(a > 0, a, 1)
    return xp.where(a > 0, y / safe, 1).astype(y.dtype)


def inverse_norm1(solve, solve_h, n, like):
    """Estimate ``||A^-1||_1`` from solves with ``A`` (``solve``) and ``A^H`` (``solve_h``),
    for vectors of ``like``'s package and dtype.

    Hager's method with Higham's safeguards (LAPACK ``xLACN2``): at most
    :data:`MAX_ITERATIONS` steps of one solve with each, plus one last solve with the
    alternating-sign vector; the estimate is a lower bound, almost always within a factor 3.
    """
    xp, dtype = xp_of(like), like.dtype
    x = xp.full(n, 1.0 / n, dtype=dtype)
    y = solve(x)
    est = float(abs(y).sum())
    if n == 1 or not math.isfinite(est):
        return est
    last = None
    for _ in range(MAX_ITERATIONS):
        z = solve_h(_sign(y, xp))
        j = int(abs(z).argmax())
        if last is not None and float(abs(z[j])) <= float(abs(z[last])):
            break
        x = xp.zeros(n, dtype=dtype)
        x[j] = 1
        y = solve(x)
        new = float(abs(y).sum())
        if not new > est:
            est = max(est, new)
            break
        est, last = new, j
    i = xp.arange(n, dtype=np.float64)
    alt = ((-1.0) ** i * (1.0 + i / (n - 1))).astype(dtype)
    return max(est, 2.0 * float(abs(solve(alt)).sum()) / (3.0 * n))


def rcond_of(factor, solve, solve_h):
    """``1 / (||A||_1 est||A^-1||_1)`` of ``factor``'s matrix, kept on the factor."""
    cached = getattr(factor, "rcond_estimate", None)
    if cached is not None:
        return cached
    anorm = norm1(factor.m)
    if anorm == 0:
        value = 0.0
    else:
        inv = inverse_norm1(solve, solve_h, factor.n, factor.m.data)
        value = 0.0 if not math.isfinite(inv) or inv == 0 else 1.0 / (anorm * inv)
    factor.rcond_estimate = value
    return value


def triggered(growth, pivot_ratio, dtype):
    """Whether a solve's free signs (growth, smallest/largest pivot) call for the estimate."""
    root = math.sqrt(np.finfo(np.dtype(dtype)).eps)
    if growth is not None and not growth < GROWTH_TRIGGER / root:
        return True
    return pivot_ratio is not None and pivot_ratio < PIVOT_TRIGGER * root


def assess(factor, growth, check, what, solve, solve_h):
    """Apply the rule after a solve: raise, return a warning message, or return ``None``."""
    if check == "ignore" or not triggered(growth, getattr(factor, "pivot_ratio", None),
                                          factor.dtype):
        return None
    rcond = rcond_of(factor, solve, solve_h)
    eps = float(np.finfo(np.dtype(factor.dtype)).eps)
    floor = getattr(factor, "rcond_floor", None) or 0.0
    limit = max(eps, floor)
    note(rcond=rcond)
    if rcond >= limit:
        return None
    what_limit = (f"eps = {eps:.3g}" if limit == eps else
                  f"{limit:.3g}, the resolution left by the perturbed pivots")
    msg = (f"{what}: the matrix is numerically singular: its estimated reciprocal condition "
           f"number {rcond:.3g} is below {what_limit}; the result may be meaningless")
    if check == "raise":
        raise SingularMatrixError(msg)
    return msg
