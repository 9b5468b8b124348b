"""Checks of triangular matrices written once for NumPy and CuPy (both engines run them)."""

from ._checks import batch_index

__all__ = ["check_nonsingular"]


def check_nonsingular(a, xp):
    """Raise :class:`gpulinalg.SingularMatrixError` when a triangular ``a`` (or a stack) has
    a zero on its diagonal: a triangular solve would return infs/NaNs silently."""
    from .._runtime.errors import SingularMatrixError
    zero = xp.diagonal(a, axis1=-2, axis2=-1) == 0
    if bool(zero.any()):
        flat = int(xp.flatnonzero(zero.reshape(-1))[0])
        n = a.shape[-1]
        entry, pos = divmod(flat, n)
        where = batch_index(entry, tuple(a.shape[:-2]))
        at = "" if where is None else f" of batch entry {where}"
        raise SingularMatrixError(f"triangular matrix{at} is singular: diagonal entry "
                                  f"{pos} is zero")
