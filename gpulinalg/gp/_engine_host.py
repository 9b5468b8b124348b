"""The CPU engine of gp: ``la`` for the bodies of :mod:`._solve_xp` and :mod:`._fit_xp`, and
the dispatcher's CPU functions of gp's four operations (:class:`._fit_xp.Operations` on it).

``la`` is this module: decomp's internal SciPy layer (:mod:`gpulinalg.decomp._engines`,
NumPy arrays), :func:`cho_inverse`, :func:`keep` and :func:`training`. The GPU twin, with the
same signatures, is :mod:`._engine_cuda`.
"""

import sys

import numpy as np

from ..decomp._engines import cho_solve_host as cho_solve
from ..decomp._engines import cholesky_host as cholesky
from ..decomp._engines import logdet_host as logdet
from ..decomp._engines import solve_triangular_host as solve_triangular
from ._cg_fit_xp import CGOperations
from ._fit_xp import Operations, mirror_lower
from ._mixed_xp import Operator
from ._precond_xp import pivoted_cholesky

__all__ = ["exact_gp_solve", "log_marginal_likelihood", "fit", "predict", "cholesky",
           "cho_solve", "solve_triangular", "logdet", "cho_inverse", "keep", "training",
           "cg_log_marginal_likelihood", "cg_fit", "cg_predict", "cg_operator",
           "pivoted_cholesky"]


def cho_inverse(L):
    """``K^-1`` (full, symmetric) from the lower Cholesky factor ``L`` of ``K``, by LAPACK's
    ``potri`` (``2 n^3 / 3`` flops) in ``L``'s own memory when it is column-major (the factor
    that :func:`cholesky` leaves in place), then :func:`._fit_xp.mirror_lower`."""
    from scipy.linalg import get_lapack_funcs
    potri, = get_lapack_funcs(("potri",), (L,))
    c, info = potri(L, lower=1, overwrite_c=1)
    if info != 0:  # a zero on the diagonal of a factor potrf accepted: not expected
        raise np.linalg.LinAlgError(f"potri failed (info {info})")
    c = mirror_lower(c)
    return c.T if c.flags.f_contiguous and not c.flags.c_contiguous else c


def cg_operator(plan, x, noise, tol, products="auto"):
    """The matrix-free solver's ``K v``: the kernel ``plan`` row block by row block
    (:class:`._mixed_xp.Operator`), whatever the tolerance ``tol`` and ``products``."""
    return Operator(plan, x, noise)


def keep(train, x, L, alpha):
    """Hand ``fit``'s factor (NumPy) to the ``train`` holder."""
    train.L = L


def training(train):
    """The fitted ``(x, L, alpha)`` of predict's ``train`` holder: its NumPy arrays."""
    return train.host


_OPS = Operations(sys.modules[__name__])  # la: this module, read at call time
exact_gp_solve, log_marginal_likelihood = _OPS.exact_gp_solve, _OPS.log_marginal_likelihood
fit, predict = _OPS.fit, _OPS.predict
_CG = CGOperations(sys.modules[__name__])  # solver="cg": the matrix-free operations
cg_log_marginal_likelihood, cg_fit, cg_predict = _CG.log_marginal_likelihood, _CG.fit, \
    _CG.predict
