"""Cholesky pieces written once for NumPy and CuPy: the log-determinant from a factor (the GPU
and the CPU function of :func:`gpulinalg.decomp.logdet_cholesky`) and the diagnosis of a failed
factorization (both engines raise what :func:`failure` builds)."""

from ..._runtime.errors import LinAlgError, NotPositiveDefiniteError
from ..._runtime.validation import namespace
from .._checks import batch_index

__all__ = ["logdet", "logdet_checked", "failure", "check_potrf"]


def logdet(c, dtype):
    """``2 * sum(log|diag(c)|)`` over the last two axes, in the real dtype of ``dtype``."""
    xp = namespace(c)
    d = xp.diagonal(c, axis1=-2, axis2=-1).astype(dtype, copy=False)
    return 2 * xp.sum(xp.log(xp.abs(d)), axis=-1)


def logdet_checked(c, dtype):
    """:func:`logdet`, raising ``ValueError`` when ``c``'s diagonal holds NaN or Inf (the
    result would be NaN or Inf without a word). One read-back of a per-matrix flag."""
    xp = namespace(c)
    d = xp.diagonal(c, axis1=-2, axis2=-1)
    out = 2 * xp.sum(xp.log(xp.abs(d.astype(dtype, copy=False))), axis=-1)
    bad = ~xp.isfinite(d).all(axis=-1)
    if bool(bad.any()):
        entry = int(xp.argmax(bad.reshape(-1).astype("int8")))
        where = batch_index(entry, tuple(c.shape[:-2]))
        at = "" if where is None else f" (batch entry {where})"
        raise ValueError(f"the Cholesky factor{at} holds NaN or Inf on its diagonal: its "
                         "log-determinant is undefined (was the factorization run on a "
                         "matrix with NaN/Inf and check_finite=False?)")
    return out


def failure(minor, a, lower, overwritten, where, input_finite=False):
    """The exception for a Cholesky factorization of ``a`` (one matrix; ``where``: its batch
    index or ``None``) that stopped at leading minor ``minor`` (1-based) or produced a
    non-finite diagonal there.

    Only called on failure, so the input's finiteness is checked only then (one reduction):
    NaN or Inf in the triangle that was read is reported as such (``ValueError``, as
    ``check_finite=True`` would have), never as a leading minor that is "not positive". When
    the input was factored in place (``overwritten``) it can no longer be told apart from an
    overflow: a :class:`gpulinalg.LinAlgError` says both. ``input_finite``: the input was
    checked finite before it was factored (``check_finite``), so a NaN or Inf in the factor
    comes from a pivot that is not positive: :class:`~gpulinalg.NotPositiveDefiniteError`.
    """
    xp = namespace(a)
    finite = input_finite or bool(xp.isfinite(xp.tril(a) if lower else xp.triu(a)).all())
    at = "" if where is None else f" (batch entry {where})"
    if not finite and not overwritten:
        return ValueError(f"a{at} holds NaN or Inf (check_finite=False skipped the check): "
                          "its Cholesky factorization is undefined")
    if not finite:
        return LinAlgError(f"the Cholesky factorization of a{at} produced NaN or Inf at the "
                           f"leading minor of order {minor}: a holds NaN/Inf, or its "
                           "entries overflow (factored in place, so the input cannot be "
                           "checked)")
    # SciPy's wording ("Internal potrf return info = [k] for slices [i].") follows ours, so
    # code that matches SciPy's message matches this one too
    slices = "" if where is None else f" for batch entry {where}"
    err = NotPositiveDefiniteError(minor, where)
    return NotPositiveDefiniteError(minor, where, message=(
        f"{err} (Internal potrf return info = [{minor}]{slices})"))


def check_potrf(info, c, a, lower, overwritten, flat_batch, xp, input_finite=False):
    """Raise for LAPACK ``potrf``'s ``info`` or a non-finite diagonal of the factor ``c`` of
    ``a``; ``flat_batch``: ``(flat index, batch shape)`` or ``None``."""
    if info < 0:
        raise ValueError(f"potrf rejected argument {-info}")
    minor = int(info)
    if minor == 0:
        bad = xp.flatnonzero(~xp.isfinite(xp.diagonal(c)))
        if not bad.size:
            return
        minor = int(bad[0]) + 1  # a NaN on the diagonal: never a silent NaN factor
    where = None if flat_batch is None else batch_index(*flat_batch)
    raise failure(minor, a, lower, overwritten, where, input_finite)


