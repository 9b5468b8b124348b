"""The sparse solvers' options: methods, the residual policy and its default tolerance.

Pure Python (no array computation): the checks every public function of
:mod:`gpulinalg.sparse` runs on its keyword arguments, and the warnings it issues afterwards
from what the engines reported.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import DTypeLike

from .._runtime.errors import IllConditionedWarning, ResidualWarning, warn
from ._results import NotPositiveDefiniteWarning

__all__ = ["METHODS", "CHECKS", "DEFAULT_REFINE_STEPS", "check_method", "validate_policy",
           "default_tol", "emit", "warn_fallback"]

METHODS = ("auto", "cholesky", "ldlt", "lu", "qr")
CHECKS = ("raise", "warn", "ignore")
#: Most refinement steps ``refine="auto"`` takes.
DEFAULT_REFINE_STEPS = 5


def check_method(method: str) -> None:
    """Raise ``ValueError`` unless ``method`` is one of :data:`METHODS`."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def default_tol(n: int, dtype: DTypeLike) -> float:
    """Default backward-error tolerance: ``max(100, 10 sqrt(n)) * eps(dtype)``.

    Examples
    --------
    >>> import numpy as np
    >>> bool(default_tol(10_000, np.float64) == 1000 * np.finfo(np.float64).eps)
    True
    """
    return float(max(100.0, 10.0 * math.sqrt(max(n, 1))) * np.finfo(np.dtype(dtype)).eps)


def validate_policy(check: str, tol: float | None, refine: str | bool | int | None) -> int:
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


def emit(report):
    """Issue the warnings a ``check="warn"`` solve left in ``report``: the
    :class:`~gpulinalg.IllConditionedWarning` of a numerically singular matrix and the
    :class:`~gpulinalg.ResidualWarning` of a backward error above tolerance, both pointing at
    the user's line."""
    if report and report.get("ill_conditioned"):
        warn(report["ill_conditioned"], IllConditionedWarning)
    if report and report.get("warning"):
        warn(report["warning"], ResidualWarning)


def warn_fallback(message):
    """Issue the :class:`NotPositiveDefiniteWarning` of an ``auto`` Cholesky that became LDLᵀ
    (pointing at the user's line)."""
    if message:
        warn(message, NotPositiveDefiniteWarning)
