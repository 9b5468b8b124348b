"""CPU tile kernels of the Dask engines (``*_dask``): what one Dask task does to one NumPy block.

Each function has the same signature and results as its GPU twin in :mod:`._tiles_cuda`; the
graph builders pick the twin from the chunks' array package once, when they build the graph.
They wrap decomp's CPU engine (:mod:`._factor_host`) and the CPU Gaussian generator
(:mod:`._sketch_host`, the same numbers as the GPU's for a seed).
"""

import numpy as np

from .._runtime.errors import NotPositiveDefiniteError
from . import _factor_host
from ._sketch_host import gaussian_real
from ._tiles_xp import complex_gaussian

__all__ = ["qr", "potrf", "trsm", "gaussian"]


def qr(x):
    """Reduced QR of the block ``x`` (m, n): ``(Q (m, k), R (k, n))``, ``k = min(m, n)``."""
    m, n = x.shape
    k = min(m, n)
    if k == 0:
        return np.zeros((m, k), x.dtype), np.zeros((k, n), x.dtype)
    q, r = _factor_host.qr(x, "reduced", x.dtype)
    return q, r


def potrf(x, offset):
    """Lower Cholesky factor of the diagonal tile ``x`` whose first row is row ``offset`` of the
    whole matrix; a failure names the leading minor of the whole matrix."""
    if x.shape[0] == 0:
        return x.copy()
    try:
        return _factor_host.cholesky(x, True, False, True, x.dtype)
    except NotPositiveDefiniteError as e:
        raise NotPositiveDefiniteError(offset + e.minor) from None


def trsm(l, b, trans):
    """``L^-1 b`` (``trans=0``) or ``L^-H b`` (``trans=2``) for a lower triangular tile ``l``."""
    if b.size == 0:
        return b.copy()
    return _factor_host.solve_triangular(l, b, trans, True, False, False, b.dtype)


def gaussian(shape, dtype, seed):
    """Standard normal block (complex: circular, unit variance) from the 64-bit ``seed``."""
    return complex_gaussian(gaussian_real, shape, dtype, seed)
