"""``solve`` of Dask arrays: a Hermitian positive-definite system (``assume_a="pos"``) through
the blocked Cholesky factorization and substitutions of :mod:`..cholesky._cholesky_dask`."""

from typing import Any

from ..cholesky import _cholesky_dask

__all__ = ["solve_pos"]


def solve_pos(a: Any, b: Any, lower: bool) -> Any:
    """``x`` with ``a x = b`` for the Hermitian positive-definite Dask array ``a`` (square
    tiles), reading its ``lower`` triangle (else the upper one, as SciPy); lazy."""
    if not lower:  # the upper triangle of a is the lower triangle of a^H
        a = a.conj().T if a.dtype.kind == "c" else a.T
    return _cholesky_dask.cho_solve(_cholesky_dask.cho_factor(a, True), b)
