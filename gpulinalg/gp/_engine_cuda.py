"""The GPU engine of gp: the dispatcher's GPU functions of its four operations, and ``la``.

Each function here receives CuPy arrays (the dispatcher moved them) and runs a body of
:mod:`._solve_xp` or :mod:`._fit_xp` with ``la`` = this module: decomp's internal CuPy layer
(:func:`cholesky`, :func:`cho_solve`, :func:`logdet` of :mod:`gpulinalg.decomp._cholesky_cuda`,
:func:`solve_triangular` of :mod:`gpulinalg.decomp._triangular_cuda`: no second validation,
dispatch or budget question) and :data:`FULL_SOLVE_MAX_N`. The CPU twins, with the same
signatures, are in :mod:`._engine_host`.
"""

import sys

from .._runtime import arrays as _arrays
from ..decomp._cholesky_cuda import cho_solve, cholesky, logdet
from ..decomp._triangular_cuda import solve_triangular
from ._fit_xp import fit_body, lml_body, predict_body
from ._solve_xp import solve_body

__all__ = ["exact_gp_solve", "log_marginal_likelihood", "fit", "predict", "cholesky",
           "cho_solve", "solve_triangular", "logdet", "FULL_SOLVE_MAX_N"]

#: Up to this order the strips of ``L^-1`` are views of one triangular solve against the whole
#: identity (:func:`._fit_xp.inverse_strips`): n^3 flops in one large call ran faster on the
#: H200 than n^3/3 flops in strip solves (``python -m benchmarks.gp_phases``: 1.6 vs 3.2 ms at
#: n = 2000, 20 vs 37 ms at 8000, 108 vs 110 ms at 16000).
FULL_SOLVE_MAX_N = 16384

_LA = sys.modules[__name__]  # the bodies' ``la``: read at call time, so settings may change


def exact_gp_solve(k, y, *, jitter):
    return solve_body(_LA, k, y, jitter=jitter)


def log_marginal_likelihood(x, y, noise, k, k_grad, *, plan, eval_gradient):
    return lml_body(_LA, x, y, noise, k, k_grad, plan=plan, eval_gradient=eval_gradient)


def fit(x, y, noise, k, *, plan, jitter):
    return fit_body(_LA, x, y, noise, k, plan=plan, jitter=jitter)


def predict(xq, train, scale, shift, kq, kdiag, kqq, *, plan, mode):
    """``train`` holds the fitted ``(x, L, alpha)`` on the host (the dispatcher leaves it
    alone); they are uploaded here, on the operation's stream, and kept for the next call when
    ``train.keep`` (a model large enough to stay resident)."""
    x, L, a = train.device if train.device is not None else _upload(train)
    return predict_body(_LA, xq, x, L, a, scale, shift, kq, kdiag, kqq, plan=plan, mode=mode)


def _upload(train):
    arrays = tuple(None if v is None else _arrays.to_device(v) for v in train.host)
    if train.keep:
        train.device = arrays
    return arrays
