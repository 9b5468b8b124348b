"""Sparse direct solvers: CSR/COO Cholesky, LDLᵀ, LU and QR on the GPU with factor reuse.

GPU engines: cuDSS (``nvmath.sparse.advanced.DirectSolver``), or cuSOLVER-Sp when cuDSS is not
installed (``gpulinalg.set_config(sparse_gpu_solver=...)`` picks one); CPU engine: SciPy's SuperLU.
Every solve checks its backward error, refines, and warns or raises per ``check``. SciPy's
names ``spsolve``, ``splu``, ``factorized`` and ``spsolve_triangular`` keep SciPy's semantics.
See ``docs/sparse.md``.
"""

from .._runtime.errors import (LinAlgError, NotPositiveDefiniteError, ResidualWarning,
                               SingularMatrixError)
from ._policy import default_tol
from ._results import LogDetResult, NotPositiveDefiniteWarning, ResidualError
from ._scipy_api import SparseLU, factorized, splu, spsolve, spsolve_triangular
from ._solve_api import SparseFactorization, factorize, solve

__all__ = ["solve", "factorize", "SparseFactorization", "LogDetResult", "ResidualError",
           "spsolve", "splu", "factorized", "spsolve_triangular", "SparseLU",
           "NotPositiveDefiniteWarning", "default_tol", "LinAlgError", "NotPositiveDefiniteError",
           "SingularMatrixError", "ResidualWarning"]
