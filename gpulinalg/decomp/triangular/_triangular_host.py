"""CPU engine of triangular solves: SciPy's ``solve_triangular`` over the broadcast batch; the
twin of :mod:`._triangular_cuda`."""

import numpy as np

from ..._runtime.validation import check_finite
from .._checks import batched_solve, writable
from ._triangular_xp import (check_conditioning_host, check_nonsingular, rhs_scale_host,
                             singular_error)

__all__ = ["solve_triangular", "trcon"]


def solve_triangular(a, b, trans, lower, unit_diagonal, overwrite_b, dtype, check=False,
                     finite=False):
    """SciPy's ``solve_triangular`` over the broadcast batch. A zero on the diagonal raises
    :class:`gpulinalg.SingularMatrixError`; with ``check``, also the conditioning rule of
    :func:`._triangular_xp.check_conditioning` (after the solve); ``finite``: SciPy's
    ``check_finite`` of ``a`` and ``b``."""
    import scipy.linalg
    if finite:
        check_finite(a, "a")
        check_finite(b, "b")
    a, b = np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)
    single = a.ndim == 2 and b.ndim <= 2
    if not unit_diagonal and not single:  # trtrs finds the first zero of a single matrix
        check_nonsingular(a, np)
    scale = rhs_scale_host(b) if check else None  # before overwrite_b may destroy b

    def one(aa, bb, overwrite=False):
        return scipy.linalg.solve_triangular(aa, bb, trans=trans, lower=lower,
                                             unit_diagonal=unit_diagonal,
                                             overwrite_b=overwrite, check_finite=False)
    if single:
        x = _trtrs(a, b, trans, lower, unit_diagonal, writable(b, overwrite_b))
    else:
        x = batched_solve(one, a, b)
    if check:
        check_conditioning_host(a, scale, x, unit_diagonal,
                           estimate=lambda: trcon(a, lower, unit_diagonal, trans))
    return x


def _trtrs(a, b, trans, lower, unit_diagonal, overwrite_b):
    """LAPACK ``?trtrs`` on one validated system, as SciPy's ``solve_triangular`` calls it (a
    C-ordered ``a`` is passed as its transpose), without SciPy's validation and batching
    wrapper: this engine's caller has validated the call. A zero on the diagonal (``trtrs``
    reports the first) raises :class:`gpulinalg.SingularMatrixError`."""
    from scipy.linalg import get_lapack_funcs
    trtrs, = get_lapack_funcs(("trtrs",), (a, b))
    if a.flags.f_contiguous or trans == 2:
        x, info = trtrs(a, b, overwrite_b=overwrite_b, lower=lower, trans=trans,
                        unitdiag=unit_diagonal)
    else:
        x, info = trtrs(a.T, b, overwrite_b=overwrite_b, lower=not lower, trans=1 - trans,
                        unitdiag=unit_diagonal)
    if info > 0:
        raise singular_error(info - 1, a)
    if info < 0:
        raise ValueError(f"illegal value in {-info}-th argument of internal trtrs")
    return x


def trcon(a, lower, unit_diagonal, trans, squared=False):
    """LAPACK ``?trcon``'s reciprocal condition number of ``op(a)`` (infinity norm), the
    smallest over a stack; squared for a Cholesky factor's matrix ``a^H a``."""
    from scipy.linalg.lapack import get_lapack_funcs
    fn, = get_lapack_funcs(("trcon",), (a,))
    norm = "I" if trans == 0 else "1"  # ||T^T||_inf is ||T||_1
    worst = float("inf")
    for idx in np.ndindex(*a.shape[:-2]):
        r, info = fn(a[idx], norm=norm, uplo="L" if lower else "U",
                     diag="U" if unit_diagonal else "N")
        worst = min(worst, float(r) if info == 0 else 0.0)
    return worst * worst if squared else worst
