"""The log-determinant from a Cholesky factor, written once for NumPy and CuPy (the GPU and the
CPU function of :func:`gpulinalg.decomp.logdet_cholesky`)."""

from .._runtime.validation import namespace

__all__ = ["logdet"]


def logdet(c, dtype):
    """``2 * sum(log|diag(c)|)`` over the last two axes, in the real dtype of ``dtype``."""
    xp = namespace(c)
    d = xp.diagonal(c, axis1=-2, axis2=-1).astype(dtype, copy=False)
    return 2 * xp.sum(xp.log(xp.abs(d)), axis=-1)
