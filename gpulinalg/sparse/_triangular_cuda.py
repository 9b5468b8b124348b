"""GPU engine of ``spsolve_triangular``: cuSPARSE's triangular solve (SpSM) through CuPy's
``cupyx.scipy.sparse.linalg.spsolve_triangular``.

The front end (:mod:`~gpulinalg.sparse._scipy_api`) has already refused a zero on the diagonal
(cuSPARSE reports no zero pivot) and cast the values to the result dtype; the CPU twin is
:func:`gpulinalg.sparse._superlu_host.triangular_solve`.
"""

from __future__ import annotations

from ._csr_cuda import csr_matrix

__all__ = ["triangular_solve"]


def triangular_solve(indptr, indices, data, b, *, n, lower, unit_diagonal):
    """``x`` with ``A x = b`` for the triangular CSR matrix (CuPy arrays); ``b`` (n,) or (n, k).

    Only the triangle named by ``lower`` is read (with ``unit_diagonal``, not the diagonal).
    """
    import cupyx.scipy.sparse.linalg as cspla
    m = csr_matrix(indptr, indices, data, n)
    rhs = b.astype(data.dtype, copy=False)
    x = cspla.spsolve_triangular(m, rhs.reshape(n, -1), lower=lower,
                                 unit_diagonal=unit_diagonal)
    return x.reshape(b.shape).astype(data.dtype, copy=False)  # CuPy solves float32 in float64
