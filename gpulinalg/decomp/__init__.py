"""Dense factorizations on the GPU (cuSOLVER) with SciPy twins on the CPU.

QR, SVD, Cholesky with its solves and log-determinant, triangular solves; LU with the general
solve, determinant and inverse; symmetric
eigenproblems, least squares and the pseudo-inverse; truncated SVD and
PCA. Every function takes NumPy, CuPy or torch arrays (batched over leading dimensions where
the name allows) and returns results in the same package.
"""

import importlib

from .cholesky._cholesky_api import cho_factor, cho_solve, cholesky, logdet_cholesky
from .lu._lu_api import det, inv, lu, lu_factor, lu_solve, slogdet, solve
from .eigh._eigh_api import eigh, eigvalsh
from .lstsq._lstsq_api import lstsq, pinv
from .qr._qr_api import qr
from ._results import EighResult, LstsqResult, QRResult, SlogdetResult, SVDResult
from .svd._svd_api import svd
from .triangular._triangular_api import solve_triangular

#: The low-rank family lives in its own files and loads on first use.
_LAZY = {"truncated_svd": ".lowrank._truncated_api", "PCA": ".pca._pca_api",
         "TruncatedSVD": ".pca._truncated_svd_api"}

__all__ = ["qr", "svd", "cholesky", "cho_factor", "cho_solve", "solve_triangular",
           "logdet_cholesky", "QRResult", "SVDResult", "eigh", "eigvalsh", "lstsq", "pinv",
           "EighResult", "LstsqResult", "solve", "lu_factor", "lu_solve", "lu", "det", "slogdet",
           "inv", "SlogdetResult", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
