"""Sparse direct solvers: CSR/COO Cholesky, LDLᵀ, LU and QR on the GPU with factor reuse.

GPU engines: cuDSS (``nvmath.sparse.advanced.DirectSolver``), or cuSOLVER-Sp when cuDSS is not
installed (``gpulinalg.set_config(sparse_gpu_solver=...)`` picks one); CPU engine: SciPy's SuperLU.
Every solve checks its backward error, refines, and warns or raises per ``check``. See
``docs/sparse.md``.
"""

from .._runtime.errors import (LinAlgError, NotPositiveDefiniteError, ResidualWarning,
                               SingularMatrixError)
from ._policy import default_tol
from ._results import LogDetResult, NotPositiveDefiniteWarning, ResidualError
from ._solve_api import SparseFactorization, factorize, solve

__all__ = ["solve", "factorize", "SparseFactorization", "LogDetResult", "ResidualError",
           "NotPositiveDefiniteWarning", "default_tol", "LinAlgError", "NotPositiveDefiniteError",
           "SingularMatrixError", "ResidualWarning"]
