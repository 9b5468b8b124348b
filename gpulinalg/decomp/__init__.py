"""Dense factorizations on the GPU (cuSOLVER) with SciPy twins on the CPU.

QR, SVD, Cholesky with its solves and log-determinant, triangular solves; truncated SVD and
PCA. Every function takes NumPy, CuPy or torch arrays (batched over leading dimensions where
the name allows) and returns results in the same package.
"""

from importlib.util import find_spec as _find_spec

from ._cholesky import cho_factor, cho_solve, cholesky, logdet_cholesky
from ._qr import qr
from ._results import QRResult, SVDResult
from ._svd import svd
from ._triangular import solve_triangular

__all__ = ["qr", "svd", "cholesky", "cho_factor", "cho_solve", "solve_triangular",
           "logdet_cholesky", "QRResult", "SVDResult"]

# The low-rank family (truncated SVD, PCA) lives in its own files.
if _find_spec(f"{__name__}._truncated") is not None:
    from ._truncated import truncated_svd  # noqa: F401
    __all__.append("truncated_svd")
if _find_spec(f"{__name__}._pca") is not None:
    from ._pca import PCA  # noqa: F401
    __all__.append("PCA")
