"""The dispatches of :class:`~gpulinalg.gp.GaussianProcessRegressor` on the matrix-free solver
(``solver="cg"``): the log marginal likelihood, ``fit``'s final solve and ``predict``, each one
dispatch to :mod:`._engine_cuda` / :mod:`._engine_host` (:class:`._cg_fit_xp.CGOperations`).
Validation of the estimator's parameters stays in :mod:`._regressor_api`."""

import numpy as np

from .._runtime.dispatch import Op, dispatch
from . import _engine_cuda, _engine_host
from ._kernels_xp import BLOCK_ELEMENTS, PREDICT_BLOCK_ELEMENTS

__all__ = ["cg_cost", "log_marginal_likelihood", "fit", "predict", "needs_plan", "lml_op",
           "fit_op", "lightest", "DETAILS"]

#: Iterations the cost estimate assumes (the preconditioned runs measured take 10 to 60).
ESTIMATED_ITERATIONS = 50


def needs_plan(kernel):
    """The ``ValueError`` for a kernel the matrix-free solver cannot evaluate tile by tile."""
    return ValueError(f"solver='cg' needs a kernel that gpulinalg evaluates itself (RBF, Matern "
                      f"with nu in 0.5, 1.5, 2.5, inf, RationalQuadratic, WhiteKernel, "
                      f"ConstantKernel, DotProduct, their sums and products, on numeric X); "
                      f"got {kernel}")


def cg_cost(n, t, d, options, gradient=True):
    """``(nbytes, flops)`` of one matrix-free run on ``n`` points, ``t`` targets: the Krylov
    block (solution, residual, direction, preconditioned residual, product: ``n x (t + s)``
    each), the preconditioner (``L``, ``G``: ``n x r`` each), the kernel tiles and, with the
    gradient, its weight rows and factors. Never ``n^2``."""
    s, r = options.n_probes, options.precond_rank
    block = min(n * n, BLOCK_ELEMENTS)
    nbytes = 8 * (7 * n * (t + s) + 3 * n * r + n * (d + 4) + 4 * block
                  + ((2 * block + 2 * n * (t + s + r)) if gradient else 0))
    per_iteration = 2.0 * n * n * (t + s + d)
    return nbytes, per_iteration * ESTIMATED_ITERATIONS + 2.0 * n * r * r


#: The record's details of a matrix-free run chosen as the lightest rung of ``solver="auto"``.
DETAILS = {"solver": "cg"}


def lml_op(x, y, noise, plan, eval_gradient, options):
    """The :class:`~gpulinalg._runtime.dispatch.Op` of ``gp.log_marginal_likelihood`` on the
    matrix-free solver (dispatched alone, or the last ``lighter`` rung of the Cholesky one)."""
    n, t = y.shape[0], (y.shape[1] if y.ndim == 2 else 1)
    nbytes, flops = cg_cost(n, t, x.shape[1], options, eval_gradient)
    return Op("gp.log_marginal_likelihood", _engine_cuda.cg_log_marginal_likelihood,
              _engine_host.cg_log_marginal_likelihood, (x, y, noise),
              {"plan": plan, "eval_gradient": eval_gradient, "options": options},
              nbytes=nbytes, flops=flops, like=y, details=DETAILS)


def log_marginal_likelihood(x, y, noise, plan, eval_gradient, options):
    """One dispatch of ``gp.log_marginal_likelihood`` on the matrix-free solver."""
    return dispatch(lml_op(x, y, noise, plan, eval_gradient, options))


def fit_op(x, y, noise, plan, options):
    """The :class:`~gpulinalg._runtime.dispatch.Op` of ``gp.fit``'s final solve on the
    matrix-free solver (dispatched alone, or the last ``lighter`` rung of the Cholesky one)."""
    n, t = y.shape[0], (y.shape[1] if y.ndim == 2 else 1)
    nbytes, flops = cg_cost(n, t, x.shape[1], options, False)
    return Op("gp.fit", _engine_cuda.cg_fit, _engine_host.cg_fit, (x, y, noise),
              {"plan": plan, "options": options}, nbytes=nbytes, flops=flops, like=y,
              details=DETAILS)


def fit(x, y, noise, plan, options):
    """One dispatch of ``gp.fit``'s final solve on the matrix-free solver."""
    return dispatch(fit_op(x, y, noise, plan, options))


def lightest(op, last):
    """``op`` with ``last`` appended as the lightest of its ``lighter`` variants."""
    return op._replace(lighter=last if op.lighter is None else lightest(op.lighter, last))


def predict(xq, train, scale, shift, plan, mode, noise, options, like):
    """One dispatch of ``gp.predict`` for a model fitted on the matrix-free solver."""
    n, m, d = train.x.shape[0], xq.shape[0], xq.shape[1]
    t = train.alpha.shape[1] if train.alpha.ndim == 2 else 1
    rows = min(m, max(1, PREDICT_BLOCK_ELEMENTS // max(n, 1))) if mode != "cov" else m
    nbytes, _ = cg_cost(n, 0, d, options, False)
    flops = 2.0 * m * n * (t + d)
    if mode != "mean":  # per query block: the cross-kernel and the Krylov block of its columns
        nbytes += 8 * (8 * rows * n + (m * m if mode == "cov" else 0))
        flops += 2.0 * n * n * (m + d) * ESTIMATED_ITERATIONS
    if mode == "std" and options.variance != "exact":  # the LOVE factor that may be built
        nbytes += 8 * n * min(options.lanczos_rank, n)
    return dispatch(Op("gp.predict", _engine_cuda.cg_predict, _engine_host.cg_predict,
                       (xq, train, np.atleast_1d(scale), np.atleast_1d(shift)),
                       {"plan": plan, "mode": mode, "noise": noise, "options": options},
                       nbytes=nbytes, flops=flops, like=like))
