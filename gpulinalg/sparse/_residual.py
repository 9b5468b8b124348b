"""Backward error, iterative refinement and what a solve does when its answer is not good enough.

The backward error of ``x`` for ``A x = b`` is, per right-hand side (column) ``j``,

    berr_j = ||b_j - A x_j||_inf / (||A||_inf ||x_j||_inf + ||b_j||_inf)

and the reported value is the largest over the columns. It is computed where ``x`` lives (on
the GPU for a GPU factorization), in the working precision. The default tolerance is

    tol = max(100, 10 * sqrt(n)) * eps(dtype)

(``n`` the order of ``A``): a backward-stable sparse direct solve lands well below it, a solve
that lost accuracy to pivoting, growth or near-singularity lands above it.
"""

import math
import warnings

import numpy as np

from .._runtime.dispatch import note
from .._runtime.errors import LinAlgError, ResidualWarning, SingularMatrixError
from ._input import xp_of

__all__ = ["ResidualError", "default_tol", "norm_inf", "backward_error", "solve_checked",
           "validate_policy", "DEFAULT_REFINE_STEPS", "emit"]

#: Most refinement steps ``refine="auto"`` takes.
DEFAULT_REFINE_STEPS = 5
CHECKS = ("raise", "warn", "ignore")


class ResidualError(LinAlgError):
    """A solve's backward error stayed above tolerance after refinement (``check="raise"``)."""


def default_tol(n, dtype):
    """Default backward-error tolerance: ``max(100, 10 sqrt(n)) * eps(dtype)``.

    Examples
    --------
    >>> import numpy as np
    >>> bool(default_tol(10_000, np.float64) == 1000 * np.finfo(np.float64).eps)
    True
    """
    return float(max(100.0, 10.0 * math.sqrt(max(n, 1))) * np.finfo(np.dtype(dtype)).eps)


def validate_policy(check, tol, refine):
    """Check the ``check`` / ``tol`` / ``refine`` arguments; return ``refine`` as a step count."""
    if check not in CHECKS:
        raise ValueError(f"check must be one of {CHECKS}, got {check!r}")
    if tol is not None and not (isinstance(tol, (int, float)) and tol > 0):
        raise ValueError(f"tol must be a positive number or None, got {tol!r}")
    if refine == "auto" or refine is True:
        return DEFAULT_REFINE_STEPS
    if refine is False or refine is None:
        return 0
    if isinstance(refine, (int, np.integer)) and not isinstance(refine, bool) and refine >= 0:
        return int(refine)
    raise ValueError(f"refine must be 'auto', a bool or a step count >= 0, got {refine!r}")


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
    ``backward_error``, ``backward_error_initial``, ``refinement_steps``, ``tol``.
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
    report = {"backward_error": berr, "backward_error_initial": first,
              "refinement_steps": steps, "tol": tol}
    note(**report)
    if perturbed and pivot_eps:
        g = growth(x, b, anorm)
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


def emit(report, stacklevel=3):
    """Issue the :class:`~gpulinalg.ResidualWarning` a ``check="warn"`` solve left in ``report``."""
    if report and report.get("warning"):
        warnings.warn(report["warning"], ResidualWarning, stacklevel=stacklevel)
