"""The exact-GP solve, written once for any array module: a Cholesky with diagonal-jitter
retries, ``alpha = K^-1 y``, ``log|K|`` and the log marginal likelihood.

The factorizations and solves are those of ``la``, the linear-algebra engine the dispatcher's
GPU or CPU function passes in (:mod:`._engine_cuda` or :mod:`._engine_host`: decomp's internal
layer, arrays already on the right device, no second validation or dispatch).
"""

import math

import numpy as np

from .._runtime.errors import IllConditionedWarning, NotPositiveDefiniteError, warn
from .._runtime.validation import namespace
from ._results import GPSolveResult

__all__ = ["JITTER_START", "JITTER_TRIES", "check_jitter", "jitter_schedule", "cholesky_jitter",
           "gaussian_lml", "solve_body", "symmetric_view"]

#: First jitter of the ``"auto"`` schedule, in units of ``eps(dtype) * mean(diag(K))``.
JITTER_START = 100.0
#: Retries of the ``"auto"`` schedule; the jitter grows tenfold at each one.
JITTER_TRIES = 6

_LOG_2PI = math.log(2.0 * math.pi)


def check_jitter(jitter):
    """``"auto"``, or the one shift that ``jitter`` (a number >= 0 or None) asks for."""
    if isinstance(jitter, str):
        if jitter != "auto":
            raise ValueError(f"jitter must be 'auto', a number >= 0 or None, got {jitter!r}")
        return jitter
    value = 0.0 if jitter is None else float(jitter)
    if not value >= 0 or not math.isfinite(value):
        raise ValueError(f"jitter must be 'auto', a number >= 0 or None, got {jitter!r}")
    return value


def jitter_schedule(k, jitter, dtype=None):
    """The diagonal shifts to try in turn on kernel matrix ``k``.

    ``"auto"``: none first, then ``JITTER_START * eps * mean(diag(k))`` growing tenfold for
    ``JITTER_TRIES`` retries (``eps`` of ``dtype``, default ``k``'s). A number: that shift
    only. ``None`` or 0: no shift.
    """
    jitter = check_jitter(jitter)
    if jitter != "auto":
        return [jitter]
    scale = float(abs(namespace(k).diagonal(k).mean())) if k.shape[0] else 1.0
    scale = scale if scale > 0 and math.isfinite(scale) else 1.0
    start = JITTER_START * float(np.finfo(dtype or k.dtype).eps) * scale
    return [0.0] + [start * 10.0 ** i for i in range(JITTER_TRIES)]


def symmetric_view(k):
    """``k`` (symmetric, ours) as the view whose layout decomp factors in place: a C-ordered
    symmetric matrix is its own transpose, and its transpose is column-major, the layout of
    the fast lower-triangle kernel (no working copy, no second ``n x n`` buffer)."""
    return k.T if k.flags.c_contiguous and not k.flags.f_contiguous else k


def cholesky_jitter(la, k, jitter="auto", *, overwrite_k=False, symmetric=False, dtype=None):
    """Lower Cholesky factor of ``k + j I`` for the first ``j`` of the jitter schedule that works.

    Warns (:class:`~gpulinalg.IllConditionedWarning`) before each retry with the jitter added;
    raises :class:`~gpulinalg.NotPositiveDefiniteError` when every try fails. ``k`` is left as it
    was unless ``overwrite_k``; with ``symmetric`` (both triangles of ``k`` hold the matrix)
    the last try factors ``k`` itself in place (see :func:`symmetric_view`). ``dtype``: the
    factor's, when ``k`` (left as it was) is of another dtype or layout, as the caller's
    matrix can be: each try works on its own C-ordered copy in ``dtype``. Returns
    ``(L, jitter_used)``.
    """
    schedule = jitter_schedule(k, jitter, dtype)
    n, failure = k.shape[0], None
    for i, j in enumerate(schedule):
        if failure is not None:
            warn(f"gpulinalg.gp: Cholesky failed (leading minor {failure.minor}); "
                 f"retrying with jitter {j:.3g} added to the diagonal", IllConditionedWarning)
        last = i == len(schedule) - 1
        kj = k if overwrite_k and last else k.astype(dtype or k.dtype, order="C", copy=True)
        if j:
            kj.reshape(-1)[::n + 1] += j
        try:
            # finite=True: checked with the factorization, so that a NaN the factorization
            # makes (a pivot that is not positive, factored in place) reads as not positive
            # definite and the next jitter is tried
            return la.cholesky(symmetric_view(kj) if symmetric else kj, True, True, True,
                               kj.dtype, True), j
        except NotPositiveDefiniteError as exc:
            failure = exc
    raise NotPositiveDefiniteError(
        failure.minor, message=f"kernel matrix is not positive definite even with jitter "
        f"{schedule[-1]:.3g} on the diagonal (leading minor {failure.minor} failed); "
        "increase the noise term (alpha or a WhiteKernel)") from failure


def gaussian_lml(y2, a2, logdet):
    """Log marginal likelihood summed over the columns of ``y2`` (n x t) given ``a2 = K^-1 y2``."""
    n, t = y2.shape
    return -0.5 * float((y2 * a2).sum()) - 0.5 * t * logdet - 0.5 * t * n * _LOG_2PI


def solve_body(la, k, y, *, jitter, symmetric=False, overwrite_k=True):
    """:func:`gpulinalg.gp.exact_gp_solve` on ``la``'s device (``k``: the call's own copy, or
    with ``overwrite_k=False`` the caller's matrix in any dtype and layout, copied here in
    ``y``'s dtype, after the dispatcher's memory check; ``symmetric``: both of its triangles
    hold the matrix, so it is factored in place)."""
    L, used = cholesky_jitter(la, k, jitter, overwrite_k=overwrite_k, symmetric=symmetric,
                              dtype=y.dtype)
    alpha = la.cho_solve(L, True, y, False, L.dtype)
    logdet = float(la.logdet(L, L.dtype))
    y2 = y.reshape(y.shape[0], -1)
    lml = gaussian_lml(y2, alpha.reshape(y2.shape), logdet)
    if not math.isfinite(lml):  # alpha (or y^T alpha) overflowed, or a NaN came through
        part = "alpha = K^-1 y" if not bool(namespace(alpha).isfinite(alpha).all()) else \
            "the log marginal likelihood"
        warn(f"gpulinalg.gp: {part} is not finite (overflow or NaN): K is too "
             "ill conditioned or too badly scaled for its dtype; rescale K and y, or add jitter",
             IllConditionedWarning)
    return GPSolveResult(alpha, L, logdet, lml, float(used))
