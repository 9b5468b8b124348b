"""CPU tile kernels of the Dask engines (``*_dask``): what one Dask task does to one NumPy block.

Each function has the same signature and results as its GPU twin in :mod:`._tiles_cuda`; the
graph builders pick the twin from the chunks' array package once, when they build the graph.
They call SciPy's LAPACK wrappers directly (one matrix per call, no batching) and the CPU
Gaussian generator (:mod:`._sketch_host`, the same numbers as the GPU's for a seed).
"""

import numpy as np

from .._runtime.errors import NotPositiveDefiniteError, SingularMatrixError
from ._sketch_host import gaussian_real
from ._tiles_xp import complex_gaussian

__all__ = ["qr", "potrf", "trsm", "gaussian", "trsm_right", "gemm_sub", "herk_sub"]


def qr(x):
    """Reduced QR of the block ``x`` (m, n): ``(Q (m, k), R (k, n))``, ``k = min(m, n)``."""
    m, n = x.shape
    k = min(m, n)
    if k == 0:
        return np.zeros((m, k), x.dtype), np.zeros((k, n), x.dtype)
    import scipy.linalg
    q, r = scipy.linalg.qr(x, mode="economic", check_finite=False)
    return q, r


def potrf(x, offset):
    """Lower Cholesky factor of the diagonal tile ``x`` whose first row is row ``offset`` of the
    whole matrix; a failure names the leading minor of the whole matrix."""
    from scipy.linalg import get_lapack_funcs
    if x.shape[0] == 0:
        return x.copy()
    potrf, = get_lapack_funcs(("potrf",), (x,))
    c, info = potrf(x, lower=True, overwrite_a=False, clean=True)
    if info < 0:
        raise ValueError(f"potrf rejected argument {-info}")
    bad = np.flatnonzero(~np.isfinite(np.diagonal(c)))
    if info > 0 or bad.size:  # NaN on the diagonal: never hand back a silent NaN factor
        raise NotPositiveDefiniteError(offset + (info if info > 0 else int(bad[0]) + 1))
    return c


def trsm(l, b, trans):
    """``L^-1 b`` (``trans=0``) or ``L^-H b`` (``trans=2``) for a lower triangular tile ``l``."""
    import scipy.linalg
    if b.size == 0:
        return b.copy()
    if np.any(np.diagonal(l) == 0):
        raise SingularMatrixError("a diagonal entry of the triangular factor is zero")
    return scipy.linalg.solve_triangular(l, b, trans=trans, lower=True, check_finite=False)


def gaussian(shape, dtype, seed):
    """Standard normal block (complex: circular, unit variance) from the 64-bit ``seed``."""
    return complex_gaussian(gaussian_real, shape, dtype, seed)


def trsm_right(l, b):
    """``b <- b l^-H`` in place, for a lower triangular tile ``l`` (a panel's rows ``b``)."""
    import scipy.linalg
    if b.size:
        b[...] = scipy.linalg.solve_triangular(l, b.conj().T, lower=True,
                                               check_finite=False).conj().T


def gemm_sub(c, a, b):
    """``c -= a @ b^H`` in place."""
    c -= a @ b.conj().T


def herk_sub(c, b):
    """``c -= b @ b^H`` in place (the lower triangle is what is read afterwards)."""
    c -= b @ b.conj().T
