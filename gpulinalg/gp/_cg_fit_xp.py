"""The regressor's operations on the matrix-free solver (``solver="cg"``), written once for any
array module: the log marginal likelihood and its gradient, ``fit``'s ``alpha_`` and
``predict``.

Every product ``K v`` (``K = k(X) + diag(noise)``) is made by the engine's operator
(``la.cg_operator``): on the GPU from the kernel matrix stored for the solve where the device
holds it (:class:`._cg_stored_xp.StoredOperator`, ``cg_options["products"]``), else matrix-free
(nothing ``n x n`` stored) by the fused kernels of :mod:`._cg_fused_cuda` for the kernels of
their form, else the kernel plan row tile by row tile (:class:`._mixed_xp.Operator`); one run of
:func:`._cg_xp.mbcg` with the pivoted-Cholesky preconditioner ``P`` (:mod:`._precond_xp`)
solves for the targets ``y`` and ``s`` probes ``z_j ~ N(0, P)`` at once, and gives

* ``alpha = K^-1 y`` and ``y^T alpha``;
* ``log|K| = log|P| + log|P^-1 K|``, the second term by stochastic Lanczos quadrature from the
  same run's coefficients (:func:`._cg_xp.logdet_quadrature`);
* the gradient ``g_k = 1/2 alpha^T dK_k alpha - t/2 tr(K^-1 dK_k)``, with the trace as
  ``tr(P^-1 dK_k) + 1/s sum_j (K^-1 z_j - P^-1 z_j)^T dK_k P^-1 z_j``: the exact trace of the
  preconditioner plus an unbiased estimate of what it misses (a control variate, small where
  ``P`` is close to ``K``). All of it is one weight matrix ``W`` contracted against the
  kernel's derivatives by the operator (``lml_gradient``): from ``W``'s ``n x (t + s + r)``
  factors in one fused kernel, or row block by row block
  (:meth:`~._kernels_xp.KernelPlan.contract`), its rows made on the fly.

``predict``'s mean comes from the cached ``alpha``; its covariance from solves
``K^-1 k(X, X*)`` by the same conjugate gradients, one column per query point; its standard
deviation from those solves or from a LOVE factor ``K^-1 ~ R R^T`` cached on the model
(:mod:`._love_xp`), as ``CGOptions.variance`` says.
"""

import math

import numpy as np

from .._runtime.arrays import to_host
from .._runtime.dispatch import note
from .._runtime.errors import IllConditionedWarning, ResidualWarning, warn
from .._runtime.validation import namespace
from ._cg_xp import logdet_quadrature, mbcg
from ._fit_xp import predict_body
from ._love_xp import CHECKS, lanczos_factor, variance_method
from ._precond_xp import Preconditioner
from ._results import GPSolveResult

__all__ = ["CGOperations", "cg_lml_body", "cg_fit_body", "cg_predict_body"]

_LOG_2PI = math.log(2.0 * math.pi)


def _probes(xp, n, options, like):
    """``(g, h)``: the standard-normal draws behind the probes (``precond_rank x s`` and
    ``n x s``), the same for every evaluation of one problem (``options.seed``)."""
    rng = np.random.default_rng(options.seed)
    g = rng.standard_normal((max(options.precond_rank, 1), options.n_probes))
    h = rng.standard_normal((n, options.n_probes))
    return xp.asarray(g, dtype=like.dtype), xp.asarray(h, dtype=like.dtype)


def _solve(op, rhs, pre, options, what, tol=None):
    """:func:`._cg_xp.mbcg` on ``rhs`` to ``tol`` (default ``options.tol``), warning when it
    stopped at ``max_iter``."""
    tol = options.tol if tol is None else tol
    res = mbcg(op, rhs, pre.solve, tol=tol, max_iter=options.max_iter)
    if not res.converged:
        warn(f"conjugate gradients ({what}) stopped after {res.iterations} iterations with a "
             f"relative residual of {float(res.residual.max()):.3g} > tol = {tol:g}; "
             "raise cg_options['max_iter'] or 'precond_rank', or use solver='cholesky'",
             IllConditionedWarning)
    return res


def _noted(res, pre, options, t, op, tol=None, **extra):
    note(solver="cg", cg_iterations=res.iterations, cg_converged=res.converged,
         cg_residual=float(res.residual[:t].max()) if t else 0.0,
         cg_probe_residual=float(res.residual[t:].max()) if res.residual.size > t else 0.0,
         n_probes=options.n_probes, precond_rank=pre.rank,
         tol=options.tol if tol is None else tol, max_iter=options.max_iter,
         cg_products=op.route, **extra)


def _on(xp, noise):
    """``noise`` (a number, or one per point) as ``xp`` needs it."""
    return xp.asarray(noise) if getattr(noise, "ndim", 0) else noise


def _likelihood(la, x, y, noise, plan, options, tol):
    """One mBCG run over ``[y, probes]`` to the relative residual ``tol``:
    ``(lml, logdet, alpha, u, z, pre, res, op)``."""
    xp = namespace(x)
    noise = _on(xp, noise)
    y2 = y.reshape(y.shape[0], -1)
    n, t = y2.shape
    shift = x.mean(axis=0)
    pre = Preconditioner(la, plan, x, noise, options.precond_rank, shift=shift)
    g, h = _probes(xp, n, options, x)
    z = pre.sample(g, h)
    op = la.cg_operator(plan, x, noise, tol, options.products)
    res = _solve(op, xp.concatenate([y2, z], axis=1), pre, options, "log marginal likelihood",
                 tol)
    alpha, u = res.x[:, :t], res.x[:, t:]
    logdet = pre.logdet + logdet_quadrature(res, range(t, t + z.shape[1]), n)
    lml = -0.5 * float((y2 * alpha).sum()) - 0.5 * t * logdet - 0.5 * t * n * _LOG_2PI
    return lml, logdet, alpha, u, z, pre, res, op


def cg_lml_body(la, x, y, noise, *, plan, eval_gradient, options):
    """The log marginal likelihood (a host float) and, with ``eval_gradient``, its gradient in
    the log-hyperparameters (``(n_theta,)`` array), by the matrix-free solver. See the module
    notes for the estimators; ``last_run().details`` gets the iterations, the final
    residuals, the probes and the preconditioner's rank.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    >>> from gpulinalg.gp import CGOptions, _engine_host, _fit_xp
    >>> from gpulinalg.gp._kernels_xp import compile_kernel
    >>> rng = np.random.default_rng(0)
    >>> x = rng.uniform(0, 1, (300, 2))
    >>> y = np.sin(6 * x[:, 0]) + 0.1 * rng.standard_normal(300)
    >>> plan = compile_kernel(RBF(0.3) + WhiteKernel(0.01), 2)
    >>> lml, grad = cg_lml_body(_engine_host, x, y, 0.0, plan=plan, eval_gradient=True,
    ...                         options=CGOptions(precond_rank=100))
    >>> ref, gref = _fit_xp.lml_body(_engine_host, x, y, 0.0, None, None, plan=plan,
    ...                              eval_gradient=True)
    >>> bool(abs(lml - ref) < 1e-3 * abs(ref))
    True
    >>> bool(np.abs(grad - gref).max() < 0.05 * np.abs(gref).max())
    True
    """
    lml, logdet, alpha, u, z, pre, res, op = _likelihood(la, x, y, noise, plan, options,
                                                         options.lml_tol)
    t = alpha.shape[1]
    _noted(res, pre, options, t, op, options.lml_tol, logdet=logdet)
    if not eval_gradient:
        return lml, None
    xp = namespace(x)
    v = pre.solve(z)
    s = z.shape[1]
    # W = alpha alpha^T - t (P^-1 + 1/s (U - V) V^T)
    left = xp.concatenate([alpha, (-t / s) * (u - v)], axis=1)
    right = xp.concatenate([alpha, v], axis=1)
    return lml, op.lml_gradient(left, right, pre, t)


def cg_fit_body(la, x, y, noise, *, plan, options):
    """``fit``'s final step: ``alpha_`` (shaped like ``y``), ``log|K|`` and the log marginal
    likelihood by one mBCG run; no factor (``L`` is ``None``)."""
    lml, logdet, alpha, _, _, pre, res, op = _likelihood(la, x, y, noise, plan, options,
                                                         options.tol)
    _noted(res, pre, options, alpha.shape[1], op, logdet=logdet)
    return GPSolveResult(alpha.reshape(y.shape), None, logdet, lml, 0.0)


def _solver(state, la, plan, x, noise, options):
    """``(op, pre)`` of a predict call, the preconditioner built on the first block that
    needs it."""
    if "pre" not in state:
        state["pre"] = Preconditioner(la, plan, x, noise, options.precond_rank)
        state["op"] = la.cg_operator(plan, x, noise, options.tol, options.products)
        state["iterations"] = 0
    return state["op"], state["pre"]


def _love(state, la, plan, x, noise, options, kT, prior):
    """A new :class:`._love_xp.LoveFactor` checked at ``CHECKS`` of this block's query points
    (seeded), their exact quadratic forms by one conjugate-gradient run."""
    xp = namespace(kT)
    op, pre = _solver(state, la, plan, x, noise, options)
    c = min(CHECKS, kT.shape[1])
    cols = np.sort(np.random.default_rng(options.seed).choice(kT.shape[1], c, replace=False))
    kc = xp.ascontiguousarray(kT[:, xp.asarray(cols)])
    res = _solve(op, kc, pre, options, "the Lanczos factor's check")
    exact = to_host((kc * res.x).sum(axis=0))
    factor = lanczos_factor(op, kc, exact, to_host(prior)[cols], rank=options.lanczos_rank,
                            tol=options.lanczos_tol, seed=options.seed)
    factor.check_iterations = res.iterations
    if not factor.passed and options.variance == "lanczos":
        warn(f"the Lanczos factor of predict's variances reached rank {factor.rank} with a "
             f"check error of {factor.check_error:.2g} in the standard deviation > "
             f"lanczos_tol = {options.lanczos_tol:g}; raise cg_options['lanczos_rank'] or use "
             "variance='exact'", ResidualWarning)
    elif not factor.passed:  # "auto" takes exact solves from now on: the factor is not kept
        factor.R = None
    return factor


def _note_love(love, options, cached, **extra):
    note(lanczos_rank=love.rank, lanczos_steps=love.steps, lanczos_check_error=love.check_error,
         lanczos_check_passed=love.passed, lanczos_max_rank=options.lanczos_rank,
         lanczos_tol=options.lanczos_tol, lanczos_cached=cached, **extra)


def cg_predict_body(la, xq, x, a, scale, shift, *, plan, mode, noise, options, cache=None):
    """``predict`` on a model fitted by the matrix-free solver: the mean ``K(X*, X) alpha``,
    and for ``mode`` "std" or "cov" the spread ``k(X*) - K(X*, X) K^-1 K(X, X*)``, in
    :func:`._fit_xp.predict_body`'s query blocks, with ``K^-1 K(X, X*)`` by conjugate
    gradients (one column per query point) or, for "std" where ``options.variance`` says so
    (:func:`._love_xp.variance_method`), from the LOVE factor kept in ``cache.love``
    (built here when there is none: :mod:`._love_xp`)."""
    state = {}
    noise = _on(namespace(a), noise)
    love = getattr(cache, "love", None)
    cached = love is not None
    method = "exact" if mode != "std" else variance_method(
        options.variance, xq.shape[0], love.passed if cached else None)

    def exact(kT, prior, full=False):
        op, pre = _solver(state, la, plan, x, noise, options)
        res = _solve(op, kT, pre, options, "predictive variances")
        state["iterations"] += res.iterations
        _noted(res, pre, options, kT.shape[1], op, cg_iterations_total=state["iterations"],
               variance="exact", variance_option=options.variance)
        if full:
            q = kT.T @ res.x
            return prior - 0.5 * (q + q.T)
        return prior - (kT * res.x).sum(axis=0)

    def spread(kT, prior, full=False):
        nonlocal love, method
        if method == "lanczos" and love is None:
            love = _love(state, la, plan, x, noise, options, kT, prior)
            if cache is not None:
                cache.love = love
            if not love.passed and options.variance == "auto":
                method = "exact"
            _note_love(love, options, False, lanczos_check_iterations=love.check_iterations,
                       lanczos_checks=min(CHECKS, kT.shape[1]))
        if method == "exact":
            return exact(kT, prior, full)
        note(solver="cg", variance="lanczos", variance_option=options.variance)
        return prior - love.quadratic(kT)

    if mode == "mean":
        note(solver="cg")
    elif method == "lanczos" and cached:
        _note_love(love, options, True)
    return predict_body(la, xq, x, None, a, scale, shift, None, None, None, plan=plan,
                        mode=mode, spread=spread)


class CGOperations:
    """The matrix-free operations on one engine ``la`` (:mod:`._engine_host` or
    :mod:`._engine_cuda`): the dispatcher's CPU or GPU functions for ``solver="cg"``."""

    def __init__(self, la):
        self.la = la

    def log_marginal_likelihood(self, x, y, noise, *, plan, eval_gradient, options):
        return cg_lml_body(self.la, x, y, noise, plan=plan, eval_gradient=eval_gradient,
                           options=options)

    def fit(self, x, y, noise, *, plan, options):
        return cg_fit_body(self.la, x, y, noise, plan=plan, options=options)

    def predict(self, xq, train, scale, shift, *, plan, mode, noise, options):
        x, _, a = self.la.training(train)
        return cg_predict_body(self.la, xq, x, a, scale, shift, plan=plan, mode=mode,
                               noise=noise, options=options, cache=train)
