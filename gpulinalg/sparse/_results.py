"""What the sparse solvers return, warn and raise, and what a factor reports (no computation)."""

from __future__ import annotations

from typing import NamedTuple

from .._runtime.errors import LinAlgError

__all__ = ["LogDetResult", "NotPositiveDefiniteWarning", "ResidualError", "new_timings",
           "describe"]


class NotPositiveDefiniteWarning(RuntimeWarning):
    """``method="auto"`` tried Cholesky, found the matrix indefinite, and used LDLᵀ instead."""


class ResidualError(LinAlgError):
    """A solve's backward error stayed above tolerance after refinement (``check="raise"``)."""


class LogDetResult(NamedTuple):
    """``sign * exp(logabsdet)`` is the determinant (as :func:`numpy.linalg.slogdet`)."""

    sign: float
    logabsdet: float


def new_timings():
    """Seconds spent per phase, as every factorization reports them in ``info``."""
    return {"analysis_seconds": 0.0, "factorization_seconds": 0.0, "solve_seconds": None}


def describe(factor):
    """The ``info`` fields a factor reports (also noted in :func:`gpulinalg.last_run`)."""
    return {"library": factor.backend, "device": factor.device, "method": factor.method,
            "reordering": factor.reordering, "factor_nnz": factor.factor_nnz,
            "n": factor.n, "nnz": int(factor.m.nnz), "dtype": str(factor.dtype),
            "multithreaded_analysis": getattr(factor, "multithreaded", None),
            **factor.timings}
