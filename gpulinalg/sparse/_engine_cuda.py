"""GPU entry points: the library :func:`factor_class` picks, then the shared factor logic.

The library comes from ``gpulinalg.set_config(sparse_gpu_solver=...)``
(:attr:`~gpulinalg._runtime.config.Settings.sparse_gpu_solver`): ``"auto"`` takes cuDSS when it
loads and cuSOLVER-Sp otherwise, ``"cudss"`` insists on cuDSS, ``"cusolversp"`` takes
cuSOLVER-Sp. ``method="qr"`` always runs on cuSOLVER-Sp (cuDSS has no QR).
"""

from __future__ import annotations

from .._runtime.config import SparseGPUSolver, get_config
from .._runtime.errors import GPUUnavailableError
from . import _cudss_cuda
from ._csr_cuda import csr_matrix
from ._factor_xp import factorize_with, solve_once_with

__all__ = ["factor_class", "factorize", "solve_once"]


def factor_class(method):
    """The GPU factor class for ``method`` under the calling thread's ``sparse_gpu_solver``.

    Raises
    ------
    GPUUnavailableError
        ``sparse_gpu_solver="cudss"`` and cuDSS cannot be loaded.
    """
    if method != "qr":
        choice = get_config().sparse_gpu_solver
        if choice is SparseGPUSolver.CUDSS:
            if not _cudss_cuda.available():
                raise GPUUnavailableError(
                    "gpulinalg.set_config(sparse_gpu_solver='cudss') but cuDSS cannot be loaded "
                    "(install nvidia-cudss-cu12 or -cu13 with nvmath-python, or set "
                    "sparse_gpu_solver='auto' or 'cusolversp')")
            return _cudss_cuda.CuDSSFactor
        if choice is SparseGPUSolver.AUTO and _cudss_cuda.available():
            return _cudss_cuda.CuDSSFactor
    from ._cusolversp_cuda import CuSolverSpFactor
    return CuSolverSpFactor


def factorize(indptr, indices, data, *, method, **kwargs):
    """Factorize canonical CSR arrays (CuPy) on the current device."""
    return factorize_with(factor_class(method), csr_matrix, indptr, indices, data, method=method,
                          **kwargs)


def solve_once(indptr, indices, data, b, *, method, **kwargs):
    """Factorize, solve with checks, and free, on the current device."""
    return solve_once_with(factor_class(method), csr_matrix, indptr, indices, data, b,
                           method=method, **kwargs)
