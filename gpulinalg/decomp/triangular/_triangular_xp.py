"""Checks of triangular matrices written once for NumPy and CuPy (both engines run them).

The conditioning rule of the dense triangular solves (``solve_triangular``, ``cho_solve``),
the same on both backends:

1. a zero on the diagonal of the triangular matrix (unless ``unit_diagonal``) raises
   :class:`gpulinalg.SingularMatrixError`: it is exactly singular;
2. otherwise ``rcond``, an upper bound on the reciprocal condition number
   ``1 / (||op(T)|| ||op(T)^-1||)`` (infinity norm) made from two lower bounds on the
   condition number that cost O(n + n k), not O(n^2)::

       max|t_ii| / min|t_ii|                         (the diagonal of T^-1 is 1 / t_ii)
       max|t_ii| * max_j ||x_j||_inf / ||b_j||_inf   (||T|| >= max|t_ii|, x_j = T^-1 b_j)

   is compared with the machine epsilon of the computation's dtype: ``rcond < eps`` warns
   :class:`gpulinalg.IllConditionedWarning` (the solution may have no correct digit). For
   ``cho_solve`` with ``a = c^H c`` both bounds are squared / use ``max|c_ii|^2``.

The bound never raises a false alarm (the true condition number is at least as large); it
can miss ill-conditioning that neither the diagonal nor this right-hand side reveals. LAPACK's
``?trcon`` estimator is sharper but costs 10 to 14 times a solve with one right-hand side, more
than the solve it would guard: the CPU engine runs it only when the bound is already below
``sqrt(eps)`` (a Hilbert matrix's factor: bound 1e-13, ``trcon`` 2e-17), and the smaller of the
two is the verdict. A NaN bound or a non-finite solution is reported, never read as well
conditioned.
"""

import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime.arrays import to_host
from ..._runtime.errors import IllConditionedWarning, SingularMatrixError
from ..._runtime.errors import warn as _warn
from .._checks import batch_index

__all__ = ["check_nonsingular", "singular_error", "rhs_scale", "rhs_scale_host",
           "column_absmax", "column_absmax_host", "check_conditioning",
           "check_conditioning_host", "figures", "judge", "judge_bound", "raise_zero_diagonal",
           "inv_norm1_estimate"]


def _singular(flat, a):
    n = a.shape[-1]
    entry, pos = divmod(int(flat), n)
    where = batch_index(entry, tuple(a.shape[:-2]))
    at = "" if where is None else f" of batch entry {where}"
    return SingularMatrixError(f"triangular matrix{at} is singular: diagonal entry "
                               f"{pos} is zero")


def singular_error(pos, a):
    """The :class:`gpulinalg.SingularMatrixError` of a zero at diagonal entry ``pos`` of the
    single matrix ``a``."""
    return _singular(pos, a)


def check_nonsingular(a, xp):
    """Raise :class:`gpulinalg.SingularMatrixError` when a triangular ``a`` (or a stack) has
    a zero on its diagonal: a triangular solve would return infs/NaNs silently."""
    zero = xp.diagonal(a, axis1=-2, axis2=-1) == 0
    if bool(zero.any()):
        raise _singular(xp.flatnonzero(zero.reshape(-1))[0], a)


def rhs_scale(b, xp):
    """``max_i |b_ij|`` per right-hand side (float64; shape ``(..., k)``, ``(1,)`` for a
    vector): taken before a solve that may overwrite ``b``."""
    b2 = b[:, None] if b.ndim == 1 else b
    return column_absmax(b2, xp)


def rhs_scale_host(b):
    """:func:`rhs_scale` of a NumPy ``b`` through :func:`column_absmax_host`."""
    return column_absmax_host(b[:, None] if b.ndim == 1 else b)


#: Right-hand sides up to this many are reduced from a transposed copy on the host: NumPy's
#: reduction over the first axis of a C-ordered ``(n, k)`` block runs an inner loop of length
#: ``k`` and is several times slower for few columns.
NARROW_COLUMNS = 16


def column_absmax(x, xp):
    """``max_i |x_ij|`` over the second-to-last axis, in float64 (shape ``(..., k)``)."""
    return xp.abs(x).max(axis=-2).astype(np.float64)


def column_absmax_host(x):
    """:func:`column_absmax` of a NumPy ``x``, a narrow C-ordered block from its transposed
    copy, a single column as a vector (NumPy reduces an ``(n, 1)`` block over its first axis
    with an inner loop of length 1, several times slower)."""
    if x.ndim == 2 and x.shape[1] == 1:
        return np.abs(x[:, 0]).max(keepdims=True).astype(np.float64)
    if x.ndim == 2 and 1 < x.shape[1] <= NARROW_COLUMNS and x.flags.c_contiguous:
        t = np.empty(x.shape[::-1], x.real.dtype)
        np.abs(x.T, out=t)
        return t.max(axis=1).astype(np.float64)
    return column_absmax(x, np)


def check_conditioning(a, scale, x, unit_diagonal, xp, squared=False, *, estimate=None):
    """Apply the module's rule to the triangular ``a`` (..., n, n) after solving
    ``op(a) x = b`` (``scale``: :func:`rhs_scale` of ``b``): the reductions of
    :func:`figures` on ``a``'s device, one read-back, then :func:`judge`.

    ``squared``: ``a`` is a Cholesky factor and the system matrix ``a^H a`` (``cho_solve``).
    ``estimate``: a sharper reciprocal condition number on demand (the CPU engine's
    :func:`._triangular_host.trcon`), run when the bound is below ``sqrt(eps)``. The bound is
    noted as ``rcond_bound`` in :func:`gpulinalg.last_run`.
    """
    judge(a, *figures(a, scale, x, unit_diagonal, xp), x.dtype, squared, estimate)


def check_conditioning_host(a, scale, x, unit_diagonal, squared=False, *, estimate=None):
    """:func:`check_conditioning` for NumPy arrays: one matrix on scalars
    (:func:`_judge_matrix`), a stack as any array package's."""
    if a.ndim == 2 and x.ndim <= 2:
        return _judge_matrix(a, scale, x, unit_diagonal, squared, estimate)
    check_conditioning(a, scale, x, unit_diagonal, np, squared, estimate=estimate)


def _judge_matrix(a, scale, x, unit_diagonal, squared, estimate):
    """:func:`figures` and :func:`judge` of one NumPy matrix, on scalars: the same verdicts
    with a few reductions instead of a stack's array bookkeeping (the per-call cost of a small
    solve)."""
    if unit_diagonal:
        dmax = dmin = 1.0
    else:
        d = np.abs(a.diagonal())
        dmax, dmin = float(d.max()), float(d.min())
        if not dmin > 0:  # a zero, or a NaN that may hide one
            zero = np.flatnonzero(d == 0)
            if zero.size:
                raise _singular(zero[0], a)
    xn = column_absmax_host(x[:, None] if x.ndim == 1 else x)
    finite = bool(np.isfinite(xn).all())  # else the bound is NaN, whatever the ratio
    if not finite:
        ratio = 0.0
    elif xn.shape[-1] <= NARROW_COLUMNS:  # Python floats: an overflowing quotient is inf
        ratio = max((v / s for v, s in zip(xn.tolist(), scale.tolist()) if s > 0),
                    default=0.0)
    else:
        with np.errstate(over="ignore"):
            pos = scale > 0
            ratio = float(np.max(np.where(pos, xn / np.where(pos, scale, 1.0), 0.0)))
    diag_bound = dmax / (dmin if dmin > 0 else 1.0)
    rhs_bound = (dmax * dmax if squared else dmax) * ratio
    if squared:
        diag_bound = diag_bound * diag_bound
    nan = float("nan")
    cond = nan if diag_bound != diag_bound or rhs_bound != rhs_bound or not finite \
        else max(diag_bound, rhs_bound)  # not finite: an overflow or NaN in the solution
    judge_bound(cond, x.dtype, squared, estimate)


def figures(a, scale, x, unit_diagonal, xp):
    """The O(n + n k) reductions of the rule, on the host: ``(dstats, xn, scale)`` with
    ``dstats`` (..., 3) float64 per matrix of ``a``: ``max|a_ii|``, ``min|a_ii|`` and the
    first ``i`` with ``a_ii == 0`` (``-1``: none); ``xn`` (..., k) ``max_i |x_ij|``."""
    d = xp.abs(xp.diagonal(a, axis1=-2, axis2=-1)).astype(np.float64)  # (abatch, n)
    if unit_diagonal:
        d = xp.ones_like(d)
    zero = d == 0
    first = xp.where(zero.any(axis=-1), xp.argmax(zero.astype(np.int8), axis=-1), -1)
    dstats = xp.stack([d.max(axis=-1), d.min(axis=-1), first.astype(np.float64)], axis=-1)
    x2 = x[..., None] if x.ndim == a.ndim - 1 else x
    xn = column_absmax(x2, xp)  # (batch, k)
    return to_host(dstats), to_host(xn), to_host(scale)


def raise_zero_diagonal(a, dstats):
    """Raise :class:`gpulinalg.SingularMatrixError` for the first matrix of ``a`` whose
    figures (``dstats`` of :func:`figures`, host) show a zero on the diagonal."""
    first = dstats[..., 2]
    if first.size and np.max(first) >= 0:
        zero = (first >= 0).reshape(-1)
        entry = int(np.argmax(zero))
        raise _singular(entry * a.shape[-1] + int(first.reshape(-1)[entry]), a)


def judge(a, dstats, xn, scale, dtype, squared=False, estimate=None):
    """The rule on the host figures of :func:`figures` (NumPy arrays): raise on a zero
    diagonal entry, note ``rcond_bound``, warn below the epsilon of ``dtype`` (``estimate``:
    see :func:`judge_bound`)."""
    raise_zero_diagonal(a, dstats)
    dmax, dmin = dstats[..., 0], dstats[..., 1]
    # Whole-array operations only (a reduction along a short last axis, as the k columns of
    # a stack's solutions, costs NumPy several times more: most of a 4096-stack's host time)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        pos = scale > 0
        ratio = np.where(pos, xn / np.where(pos, scale, 1.0), 0.0)  # (x batch..., k)
        diag_bound = dmax / np.where(dmin > 0, dmin, 1.0)
        dcol = dmax[..., None]  # broadcasts a's batch against the solution's
        rhs_bound = dcol * ratio if not squared else (dcol * dcol) * ratio
        if squared:
            diag_bound = diag_bound * diag_bound
        cond = float(np.maximum(np.max(diag_bound), np.max(rhs_bound)))
        if not np.all(np.isfinite(xn)):  # an overflow or NaN in the solution: report it
            cond = float("nan")
    judge_bound(cond, dtype, squared, estimate)


_EPS: dict = {}


def judge_bound(cond, dtype, squared=False, estimate=None):
    """The end of :func:`judge` on the bound ``cond`` (a float: the largest lower bound on the
    condition number over the stack, NaN when a figure or the solution was not finite): note
    ``rcond_bound`` and warn below the epsilon of ``dtype``. ``estimate`` (a callable giving a
    sharper reciprocal condition number, as :func:`._triangular_host.trcon`) runs when the bound is
    below ``sqrt(eps)`` and is noted as ``rcond_estimate``. The fused GPU solves work ``cond`` out
    on the device (:mod:`._fused_cuda`) and call this alone."""
    finite = cond == cond and cond != float("inf")
    rcond = (1.0 / cond if cond > 0 else float("inf")) if finite else 0.0
    _dispatch.note(rcond_bound=rcond)
    eps = _EPS.get(dtype)
    if eps is None:
        eps = _EPS[dtype] = float(np.finfo(dtype).eps)
    if estimate is not None and eps <= rcond < eps ** 0.5:
        rcond = min(rcond, estimate())
        _dispatch.note(rcond_estimate=rcond)
    if rcond < eps:
        what = "Cholesky factor's matrix" if squared else "triangular matrix"
        why = (f"reciprocal condition number <= {rcond:.3g} < eps = {eps:.3g}" if finite else
               "the solution is not finite (overflow or NaN)")
        _warn(f"gpulinalg: ill-conditioned {what}: {why}; the solution may be inaccurate",
              IllConditionedWarning)


def inv_norm1_estimate(solve, nb, n, dtype, xp, steps=1):
    """A lower bound on ``||A_i^-1||_1`` for each of ``nb`` matrices (float64 ``(nb,)``, on
    ``xp``'s device), from ``2 * steps + 1`` solves: the first takes Hager's start vector and
    Higham's alternating vector together (two columns), then each of Hager's power steps
    (``A^-H sign(y)`` picks a unit vector, ``A^-1`` of it) two more.

    ``solve(x, adjoint)``: ``A^-1 x`` (``adjoint``: ``A^-H x``) for a new ``(nb, n, k)`` array
    ``x``, which it may overwrite. Every figure is a lower bound, so no test stops the loop and
    nothing is read back here; one step is LAPACK's ``?lacn2`` cut short (its first step finds
    the norm within a small factor in practice): three solves where it usually takes five."""
    real = np.empty(0, dtype).real.dtype
    i = np.arange(n, dtype=np.float64)
    start = np.stack([np.full(n, 1.0 / n), (-1.0) ** i * (1.0 + i / max(n - 1, 1))], axis=1)
    x = xp.broadcast_to(xp.asarray(start.astype(real)), (nb, n, 2)).astype(dtype)
    y = solve(x, False)
    est = xp.maximum(xp.abs(y[..., 0]).sum(axis=1),
                     2 * xp.abs(y[..., 1]).sum(axis=1) / (3 * n)).astype(np.float64)
    y = y[..., :1]
    rows = xp.arange(nb)
    for _ in range(steps):
        mag = xp.abs(y)
        sgn = xp.where(mag == 0, xp.ones_like(y), y / xp.where(mag == 0, 1, mag).astype(dtype))
        z = solve(sgn.astype(dtype), True)
        j = xp.argmax(xp.abs(z[..., 0]), axis=1)
        x = xp.zeros((nb, n, 1), dtype=dtype)
        x[rows, j, 0] = 1
        y = solve(x, False)
        est = xp.maximum(est, xp.abs(y).sum(axis=(1, 2)).astype(np.float64))
    return est
