"""CPU tile kernels of the Dask engines (``*_dask``): what one Dask task does to one NumPy block.

Each function has the same signature and results as its GPU twin in :mod:`._tiles_cuda`; the
graph builders pick the twin from the chunks' array package once, when they build the graph.
They call SciPy's LAPACK wrappers directly (one matrix per call, no batching); a family's own tile
task (QR, the diagonal ``potrf``, the Gaussian block) lives in that family's ``_host`` module.
"""

import numpy as np

from ..._runtime.errors import SingularMatrixError

__all__ = ["trsm", "trsm_right", "gemm_sub", "herk_sub"]


def trsm(l, b, trans):
    """``L^-1 b`` (``trans=0``) or ``L^-H b`` (``trans=2``) for a lower triangular tile ``l``."""
    import scipy.linalg
    if b.size == 0:
        return b.copy()
    if np.any(np.diagonal(l) == 0):
        raise SingularMatrixError("a diagonal entry of the triangular factor is zero")
    return scipy.linalg.solve_triangular(l, b, trans=trans, lower=True, check_finite=False)


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
