"""What :func:`gpulinalg.gp.exact_gp_solve` returns (no array computation here)."""

from typing import Any, NamedTuple

__all__ = ["GPSolveResult"]


class GPSolveResult(NamedTuple):
    """What :func:`exact_gp_solve` returns.

    Attributes
    ----------
    alpha : array, shape (n,) or (n, t)
        ``(K + jitter I)^-1 y``.
    L : array, shape (n, n)
        Lower Cholesky factor of ``K + jitter I`` (zeros above the diagonal).
    logdet : float
        ``log |K + jitter I|``.
    log_marginal_likelihood : float
        ``-1/2 y^T alpha - t/2 logdet - t n/2 log(2 pi)``, summed over the ``t`` columns of ``y``.
    jitter : float
        The diagonal jitter that was added (0.0 when the first factorization succeeded).
    """

    alpha: Any
    L: Any
    logdet: float
    log_marginal_likelihood: float
    jitter: float
