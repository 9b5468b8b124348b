"""The CPU engine of gp: the dispatcher's CPU functions of its four operations, and ``la``.

The twins of :mod:`._engine_cuda`, with the same signatures, on NumPy arrays: the same bodies
of :mod:`._solve_xp` and :mod:`._fit_xp` with ``la`` = this module, decomp's internal SciPy
layer (:mod:`gpulinalg.decomp._factor_host`) and :data:`FULL_SOLVE_MAX_N`.
"""

import sys

from ..decomp._factor_host import cho_solve, cholesky, logdet, solve_triangular
from ._fit_xp import fit_body, lml_body, predict_body
from ._solve_xp import solve_body

__all__ = ["exact_gp_solve", "log_marginal_likelihood", "fit", "predict", "cholesky",
           "cho_solve", "solve_triangular", "logdet", "FULL_SOLVE_MAX_N"]

#: ``L^-1`` by one triangular solve against the identity up to this order, else by strips
#: (:func:`._fit_xp.inverse_strips`). 0: always strips, whose third of the flops wins on the
#: CPU (2.8 against 3.2 s at n = 4000).
FULL_SOLVE_MAX_N = 0

_LA = sys.modules[__name__]  # the bodies' ``la``: read at call time, so settings may change


def exact_gp_solve(k, y, *, jitter):
    return solve_body(_LA, k, y, jitter=jitter)


def log_marginal_likelihood(x, y, noise, k, k_grad, *, plan, eval_gradient):
    return lml_body(_LA, x, y, noise, k, k_grad, plan=plan, eval_gradient=eval_gradient)


def fit(x, y, noise, k, *, plan, jitter):
    return fit_body(_LA, x, y, noise, k, plan=plan, jitter=jitter)


def predict(xq, train, scale, shift, kq, kdiag, kqq, *, plan, mode):
    """``train.host`` holds the fitted ``(x, L, alpha)`` (NumPy)."""
    x, L, a = train.host
    return predict_body(_LA, xq, x, L, a, scale, shift, kq, kdiag, kqq, plan=plan, mode=mode)
