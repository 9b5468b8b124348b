"""The functional core: a Cholesky with diagonal-jitter retries, and :func:`exact_gp_solve`."""

import math
import warnings
from typing import Any, NamedTuple

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime.dispatch import dispatch
from .._runtime.errors import IllConditionedWarning, NotPositiveDefiniteError
from .._runtime.validation import as_array, check_finite, check_square, float_dtype, namespace

__all__ = ["GPSolveResult", "exact_gp_solve", "cholesky_jitter", "JITTER_START", "JITTER_TRIES"]

#: First jitter of the ``"auto"`` schedule, in units of ``eps(dtype) * mean(diag(K))``.
JITTER_START = 100.0
#: Retries of the ``"auto"`` schedule; the jitter grows tenfold at each one.
JITTER_TRIES = 6

_LOG_2PI = math.log(2.0 * math.pi)


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


def jitter_schedule(k, jitter):
    """The diagonal shifts to try in turn on kernel matrix ``k``.

    ``"auto"``: none first, then ``JITTER_START * eps * mean(diag(k))`` growing tenfold for
    ``JITTER_TRIES`` retries. A number: that shift only. ``None`` or 0: no shift.
    """
    if isinstance(jitter, str):
        if jitter != "auto":
            raise ValueError(f"jitter must be 'auto', a number >= 0 or None, got {jitter!r}")
        scale = float(abs(namespace(k).diagonal(k).mean())) if k.shape[0] else 1.0
        scale = scale if scale > 0 and math.isfinite(scale) else 1.0
        start = JITTER_START * float(np.finfo(k.dtype).eps) * scale
        return [0.0] + [start * 10.0 ** i for i in range(JITTER_TRIES)]
    value = 0.0 if jitter is None else float(jitter)
    if not value >= 0 or not math.isfinite(value):
        raise ValueError(f"jitter must be 'auto', a number >= 0 or None, got {jitter!r}")
    return [value]


def cholesky_jitter(k, jitter="auto", *, overwrite_k=False):
    """Lower Cholesky factor of ``k + j I`` for the first ``j`` of the jitter schedule that works.

    Warns (:class:`~gpulinalg.IllConditionedWarning`) before each retry with the jitter added;
    raises :class:`~gpulinalg.NotPositiveDefiniteError` when every try fails. ``k`` is left as it
    was unless ``overwrite_k``. Returns ``(L, jitter_used)``.
    """
    from .. import decomp
    schedule = jitter_schedule(k, jitter)
    n, failure = k.shape[0], None
    for i, j in enumerate(schedule):
        if failure is not None:
            warnings.warn(f"gpulinalg.gp: Cholesky failed (leading minor {failure.minor}); "
                          f"retrying with jitter {j:.3g} added to the diagonal",
                          IllConditionedWarning, stacklevel=3)
        last = i == len(schedule) - 1
        kj = k if overwrite_k and last else k.copy()
        if j:
            kj.reshape(-1)[::n + 1] += j
        try:
            return decomp.cholesky(kj, lower=True, overwrite_a=True, check_finite=False), j
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


def solve_body(k, y, *, jitter):
    """Shared GPU/CPU body of :func:`exact_gp_solve` (``k`` is the function's own copy)."""
    from .. import decomp
    L, used = cholesky_jitter(k, jitter, overwrite_k=True)
    alpha = decomp.cho_solve((L, True), y, check_finite=False)
    logdet = float(decomp.logdet_cholesky((L, True)))
    y2 = y.reshape(y.shape[0], -1)
    lml = gaussian_lml(y2, alpha.reshape(y2.shape), logdet)
    return GPSolveResult(alpha, L, logdet, lml, float(used))


def exact_gp_solve(K, y, *, jitter="auto"):
    """Solve an exact Gaussian process given its kernel matrix ``K`` (noise included) and ``y``.

    Factors ``K = L L^T`` (retrying with diagonal jitter when that fails), then returns
    ``alpha = K^-1 y``, ``L``, ``log|K|`` and the log marginal likelihood.

    Parameters
    ----------
    K : (n, n) array_like
        Symmetric positive definite kernel matrix (NumPy, CuPy or torch). Not modified.
    y : (n,) or (n, t) array_like
        Targets; ``t`` columns are ``t`` independent outputs sharing ``K``.
    jitter : "auto", float or None, default "auto"
        ``"auto"``: when the Cholesky fails, retry with ``JITTER_START * eps * mean(diag(K))``
        on the diagonal, growing tenfold for up to ``JITTER_TRIES`` retries, with an
        :class:`~gpulinalg.IllConditionedWarning` at each retry. A number: add exactly that.
        ``None``: no jitter.

    Returns
    -------
    GPSolveResult
        ``(alpha, L, logdet, log_marginal_likelihood, jitter)``; arrays in ``K``'s package.

    Raises
    ------
    NotPositiveDefiniteError
        When no tried jitter makes ``K`` positive definite.
    ValueError
        Shapes that do not match, or NaN/Inf in ``K`` or ``y``.

    Notes
    -----
    Runs in float64 unless both ``K`` and ``y`` are float32; float32 is honoured with an
    :class:`~gpulinalg.IllConditionedWarning`, since kernel matrices are often too ill
    conditioned for single precision.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.gp import exact_gp_solve
    >>> x = np.linspace(0, 1, 20)
    >>> K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.1 ** 2) + 1e-2 * np.eye(20)
    >>> y = np.sin(6 * x)
    >>> res = exact_gp_solve(K, y)
    >>> bool(np.allclose(K @ res.alpha, y)), bool(np.allclose(res.L @ res.L.T, K))
    (True, True)
    >>> bool(np.isclose(res.logdet, np.linalg.slogdet(K)[1]))
    True
    """
    K = as_array(K, "K", min_ndim=2, max_ndim=2)
    y = as_array(y, "y", min_ndim=1, max_ndim=2)
    check_square(K, "K")
    if y.shape[0] != K.shape[0]:
        raise ValueError(f"y must have {K.shape[0]} rows to match K {tuple(K.shape)}, "
                         f"got shape {tuple(y.shape)}")
    check_finite(K, "K")
    check_finite(y, "y")
    dtype = _gp_dtype(K, y)
    jitter_schedule(np.zeros((0, 0)), jitter)  # validate before any work
    n, width = K.shape[0], (y.shape[1] if y.ndim == 2 else 1)
    if n == 0:
        xp = namespace(K)
        return GPSolveResult(xp.zeros(y.shape, dtype=dtype), xp.zeros((0, 0), dtype=dtype),
                             0.0, 0.0, 0.0)
    k, yc = _as_dtype(K, dtype, copy=True), _as_dtype(y, dtype, copy=False)
    itemsize = np.dtype(dtype).itemsize
    from . import _cpu
    return dispatch("gp.exact_gp_solve", solve_body, _cpu.solve_body, (k, yc), {"jitter": jitter},
                    nbytes=(2 * n * n + 2 * n * width) * itemsize, flops=n ** 3 / 3 + 2 * n * n,
                    like=K)


def _gp_dtype(*arrays):
    from .._runtime.validation import _np_dtype
    dt = float_dtype(*[_np_dtype(a) for a in arrays], allowed=(np.float32, np.float64))
    if dt == np.float32:
        warnings.warn("gpulinalg.gp: computing in float32 as asked; kernel matrices are often "
                      "too ill conditioned for single precision (expect jitter or large "
                      "errors); pass float64 arrays for float64", IllConditionedWarning,
                      stacklevel=3)
    return dt


def _as_dtype(a, dtype, copy):
    """``a`` in ``dtype`` as a C-contiguous array of its own package (a copy when ``copy``)."""
    kind = _arrays.kind_of(a)
    if kind is _arrays.Kind.TORCH:
        a = _arrays.to_kind(a, _arrays.Kind.NUMPY) if a.device.type == "cpu" else \
            _arrays.to_device(a)
        return _as_dtype(a, dtype, copy)
    xp = namespace(a)
    out = xp.ascontiguousarray(a, dtype=dtype)
    return out.copy() if copy and out is a else out
