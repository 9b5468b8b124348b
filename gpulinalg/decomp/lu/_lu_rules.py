"""The LU family's rules, the same on both engines: the names ``assume_a`` takes, and SciPy's
ill-conditioning rule (``rcond < lamch("E")`` warns, ``rcond == 0`` or a zero pivot raises).

The warning is :class:`IllConditioned`, a subclass of both :class:`gpulinalg.IllConditionedWarning`
and ``scipy.linalg.LinAlgWarning`` (what SciPy's ``solve`` and ``inv`` warn), made on first use:
``import gpulinalg`` never imports ``scipy.linalg``.
"""

import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime.errors import IllConditionedWarning, SingularMatrixError
from ..._runtime.errors import warn as _warn
from .._checks import batch_index

__all__ = ["SOLVE_STRUCTURES", "INV_STRUCTURES", "structure", "ill_conditioned",
           "singular_error", "judge_rcond", "LAMCH_E", "UnknownStructure"]


class UnknownStructure(ValueError, KeyError):
    """``inv``'s ``assume_a`` names no structure: a ``ValueError`` (our rule) that is also the
    ``KeyError`` SciPy's ``inv`` raises."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""

#: ``assume_a`` of :func:`solve` -> the structure it names (SciPy's table).
SOLVE_STRUCTURES = {
    None: None, "general": "gen", "gen": "gen", "diagonal": "diagonal",
    "tridiagonal": "tridiagonal", "banded": "banded",
    "upper triangular": "upper triangular", "lower triangular": "lower triangular",
    "pos": "pos", "positive definite": "pos", "sym": "sym", "symmetric": "sym",
    "her": "her", "hermitian": "her",
}
#: ``assume_a`` of :func:`inv` (SciPy's, shorter: no long names, tridiagonal or banded).
INV_STRUCTURES = {None: None, "general": "gen", "gen": "gen", "diagonal": "diagonal",
                  "upper triangular": "upper triangular",
                  "lower triangular": "lower triangular", "pos": "pos", "sym": "sym",
                  "her": "her"}

#: LAPACK's ``lamch("E")`` (the relative rounding error) per real dtype: SciPy's threshold.
LAMCH_E = {np.dtype(np.float32): float(np.finfo(np.float32).eps) / 2,
           np.dtype(np.float64): float(np.finfo(np.float64).eps) / 2}


def structure(assume_a, table, dtype):
    """The structure ``assume_a`` names in ``table`` (``ValueError`` for another name); a real
    "her" is "sym", as in SciPy."""
    try:
        kind = table[assume_a]
    except (KeyError, TypeError):
        raise UnknownStructure(f"{assume_a} is not a recognized matrix structure") from None
    if kind == "her" and np.dtype(dtype).kind != "c":
        return "sym"
    return kind


_CLASS: list = []


def ill_conditioned():
    """The warning class of the family's ill-conditioned systems (made once, on first use)."""
    if not _CLASS:
        from scipy.linalg import LinAlgWarning
        _CLASS.append(type("IllConditioned", (IllConditionedWarning, LinAlgWarning), {
            "__module__": __name__,
            "__doc__": "An ill-conditioned matrix: a gpulinalg.IllConditionedWarning that is "
                       "also scipy.linalg.LinAlgWarning."}))
    return _CLASS[0]


def singular_error(bad, batch_shape):
    """:class:`gpulinalg.SingularMatrixError` in SciPy's words for the flat batch entries
    ``bad`` (a non-empty sequence of ints)."""
    where = [batch_index(i, batch_shape) or i for i in bad] if batch_shape else [0]
    return SingularMatrixError(f"A singular matrix detected: slice(s) {where[:8]} are "
                               "singular.")


def judge_rcond(rcond, dtype, batch_shape=()):
    """SciPy's rule on the reciprocal condition numbers ``rcond`` (host array, one per matrix):
    zero raises :class:`gpulinalg.SingularMatrixError`; below ``lamch("E")`` of ``dtype``'s
    real type, or NaN, warns :func:`ill_conditioned`. The smallest is noted as ``rcond`` in
    :func:`gpulinalg.last_run`."""
    rcond = np.asarray(rcond, dtype=np.float64).reshape(-1)
    if rcond.size == 0:
        return
    zero = np.flatnonzero(rcond == 0)
    if zero.size:
        raise singular_error(zero.tolist(), batch_shape)
    worst = float(np.min(rcond)) if not np.isnan(rcond).any() else float("nan")
    _dispatch.note(rcond=worst)
    real = np.dtype(np.empty(0, dtype).real.dtype)
    low = np.flatnonzero(~(rcond >= LAMCH_E[real]))  # NaN warns too
    if low.size:
        slices = ",".join(f"slice {int(i)} has rcond = {rcond[i]:.6g}" for i in low[:8])
        _warn(f"An ill-conditioned matrix detected: {slices}.", ill_conditioned())
