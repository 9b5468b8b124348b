"""GPU entry points: cuDSS when it loads, cuSOLVER-Sp otherwise (and always for ``qr``).

``$GPULINALG_SPARSE_GPU_LIBRARY`` (``cudss`` or ``cusolversp``) forces one library, for tests
and benchmarks.
"""

import os

from . import _cudss
from ._core import factorize_with, solve_once_with

__all__ = ["factor_class", "factorize", "solve_once"]


def factor_class(method):
    """The GPU factor class for ``method`` (cuDSS has no QR; cuSOLVER-Sp does)."""
    forced = os.environ.get("GPULINALG_SPARSE_GPU_LIBRARY", "").lower()
    if forced not in ("", "cudss", "cusolversp"):
        raise ValueError("GPULINALG_SPARSE_GPU_LIBRARY must be 'cudss' or 'cusolversp', "
                         f"got {forced!r}")
    if forced != "cusolversp" and method != "qr" and _cudss.available():
        return _cudss.CuDSSFactor
    from ._cusolversp import CuSolverSpFactor
    return CuSolverSpFactor


def factorize(indptr, indices, data, *, method, **kwargs):
    """Factorize canonical CSR arrays (CuPy) on the current device."""
    return factorize_with(factor_class(method), indptr, indices, data, method=method, **kwargs)


def solve_once(indptr, indices, data, b, *, method, **kwargs):
    """Factorize, solve with checks, and free, on the current device."""
    return solve_once_with(factor_class(method), indptr, indices, data, b, method=method,
                           **kwargs)
