"""``GaussianProcessRegressor(solver="cg")``: the matrix-free solver (issue 43, first version)
against the Cholesky path on the same problem, on NumPy at small ``n`` (CPU), and the same
checks on CuPy (``gpu`` mark, through the ``backend`` fixture): kernel products, the log
marginal likelihood and its gradient, predictions, a fit with the optimizer, the
preconditioner, options and what ``last_run()`` reports."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import (RBF, ConstantKernel, DotProduct, ExpSineSquared,
                                              Matern, WhiteKernel)

import gpulinalg
from gpulinalg import IllConditionedWarning
from gpulinalg.gp import CGOptions, GaussianProcessRegressor, _engine_host
from gpulinalg.gp._cg_xp import logdet_quadrature, mbcg
from gpulinalg.gp._kernels_xp import compile_kernel
from gpulinalg.gp._mixed_xp import Operator
from gpulinalg.gp._precond_xp import Preconditioner

from tests.gp.test_gp_formulas import D, problem

#: Options the accuracy tests use: enough probes and rank for 1e-3 on the likelihood at
#: n = 1500 (the estimate's spread falls as the preconditioner's rank grows).
ACCURATE = {"precond_rank": 200, "n_probes": 64}


def _pair(kernel, **kw):
    exact = GaussianProcessRegressor(kernel, optimizer=None, **kw)
    cg = GaussianProcessRegressor(kernel, optimizer=None, solver="cg", cg_options=ACCURATE, **kw)
    return exact, cg


@pytest.mark.parametrize("rows", [7, 10_000])
def test_kernel_products_equal_the_dense_matrix(rows):
    """``K v`` made tile by tile (7 rows per tile, or one tile) equals the dense kernel
    matrix times ``v`` to 1e-12, noise one per point included."""
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (300, D))
    kernel = ConstantKernel(0.7) * Matern(np.linspace(0.3, 1.0, D), nu=2.5) + WhiteKernel(0.05)
    plan = compile_kernel(kernel, D, block_elements=rows * 300)
    noise = rng.uniform(1e-3, 1e-2, 300)
    v = rng.standard_normal((300, 5))
    dense = kernel(x) + np.diag(noise)
    got = Operator(plan, x, noise)(v)
    assert np.abs(got - dense @ v).max() <= 1e-12 * np.abs(dense @ v).max()


def test_preconditioner_is_its_dense_form():
    """``P = L L^T + D`` from the pivoted Cholesky factor: its solve, log-determinant and rows
    of ``P^-1`` against NumPy on the dense ``P``, and ``diag(P) = diag(K)``."""
    x, _, _, kernel = problem(200, 1, seed=2)
    plan = compile_kernel(kernel, D)
    pre = Preconditioner(_engine_host, plan, x, 1e-4, 30)
    P = pre.L @ pre.L.T + np.diag(pre.D)
    np.testing.assert_allclose(np.diag(P), np.diag(kernel(x)) + 1e-4, rtol=1e-12)
    v = np.random.default_rng(3).standard_normal((200, 3))
    np.testing.assert_allclose(pre.solve(v), np.linalg.solve(P, v), rtol=1e-8, atol=1e-10)
    assert abs(pre.logdet - np.linalg.slogdet(P)[1]) < 1e-9 * abs(pre.logdet)
    np.testing.assert_allclose(pre.dense_rows(50, 90), np.linalg.inv(P)[50:90], atol=1e-8)


def test_lanczos_quadrature_of_the_cg_coefficients():
    """The tridiagonal matrices of the CG run give ``log|A|``: exact once the Krylov space is
    the whole space (n = 40, 40 steps), and unbiased over random probes."""
    rng = np.random.default_rng(4)
    q, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    a = (q * np.linspace(0.5, 20, 40)) @ q.T
    z = rng.standard_normal((40, 400))
    res = mbcg(lambda v: a @ v, z, lambda r: r.copy(), tol=1e-14, max_iter=40)
    est = logdet_quadrature(res, range(400), 40)
    assert abs(est - np.linalg.slogdet(a)[1]) < 0.02 * abs(np.linalg.slogdet(a)[1])


def test_likelihood_and_gradient_against_cholesky(backend):
    """n = 1500: the log marginal likelihood within 1e-3 relative, its gradient within 2e-2
    of its norm, at the same (non-optimal) hyperparameters."""
    x, y, _, kernel = problem(1500, 1, seed=3)
    exact, cg = _pair(kernel)
    exact.fit(x, y)
    cg.fit(x, y)
    theta = kernel.theta + 0.3
    ref, gref = exact.log_marginal_likelihood(theta, eval_gradient=True)
    got, grad = cg.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(got - ref) <= 1e-3 * abs(ref)
    assert np.abs(grad - gref).max() <= 2e-2 * np.abs(gref).max()
    details = gpulinalg.last_run().details
    assert details["solver"] == "cg" and details["cg_converged"]
    assert details["n_probes"] == 64 and details["precond_rank"] == 200
    tol = details["tol"]  # the likelihood's own tolerance, lml_tol
    assert tol == CGOptions().lml_tol
    assert details["cg_residual"] <= tol and details["cg_probe_residual"] <= tol
    assert 0 < details["cg_iterations"] < 100
    lml_fit = cg.log_marginal_likelihood_value_
    assert abs(lml_fit - exact.log_marginal_likelihood_value_) <= 1e-3 * abs(lml_fit)


def test_predictions_against_cholesky(backend):
    """Mean within 1e-4 of the targets' scale, standard deviation within 1e-3, covariance too;
    two targets, ``normalize_y`` and one ``alpha`` per point."""
    x, y, xq, kernel = problem(1000, 40, seed=5)
    y2 = np.column_stack([y, 3 * y + 1])
    alpha = np.full(1000, 1e-6)
    exact, cg = _pair(kernel, normalize_y=True, alpha=alpha)
    exact.fit(x, y2)
    cg.fit(x, y2)
    assert cg.solver_ == "cg" and exact.solver_ == "cholesky"
    m_r, s_r = exact.predict(xq, return_std=True)
    m, s = cg.predict(xq, return_std=True)
    assert gpulinalg.last_run().details["cg_converged"]
    scale = np.abs(y2).max()
    assert np.abs(m - m_r).max() <= 1e-4 * scale and np.abs(s - s_r).max() <= 1e-3
    _, c_r = exact.predict(xq[:8], return_cov=True)
    _, c = cg.predict(xq[:8], return_cov=True)
    assert np.abs(c - c_r).max() <= 1e-3
    np.testing.assert_allclose(cg.predict(xq), m, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("lml_tol", [1e-4, None])
def test_fit_with_the_optimizer_agrees_with_cholesky(lml_tol):
    """L-BFGS-B from the same start on the cg objective (the same probes at every step) lands
    near the Cholesky fit's hyperparameters, at a point whose exact likelihood is as good.
    Its gradient estimates the exact gradient rather than differentiating the estimated
    likelihood, so the line search may stop early (a ConvergenceWarning). With the default
    ``lml_tol`` the steps' solves are looser: the point may drift along the likelihood's flat
    direction (here the white noise), never to a worse likelihood."""
    from sklearn.exceptions import ConvergenceWarning
    x, y, _, _ = problem(300, 1, seed=6)
    kernel = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.5)
    exact = GaussianProcessRegressor(kernel).fit(x, y)
    options = dict(ACCURATE, **({"lml_tol": lml_tol} if lml_tol else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        cg = GaussianProcessRegressor(kernel, solver="cg", cg_options=options).fit(x, y)
    if lml_tol:
        np.testing.assert_allclose(cg.kernel_.theta, exact.kernel_.theta, atol=0.05)
    else:
        np.testing.assert_allclose(cg.kernel_.theta[:2], exact.kernel_.theta[:2], atol=0.05)
    ref = exact.log_marginal_likelihood_value_
    assert exact.log_marginal_likelihood(cg.kernel_.theta) >= ref - 1e-3 * abs(ref)
    assert abs(cg.log_marginal_likelihood_value_ - ref) <= 2e-2 * abs(ref)


def test_preconditioner_reduces_iterations():
    x, y, _, kernel = problem(600, 1, seed=7)
    iterations = {}
    for rank in (0, 20, 100):
        GaussianProcessRegressor(kernel, optimizer=None, solver="cg",
                                 cg_options={"precond_rank": rank, "n_probes": 8}).fit(x, y)
        iterations[rank] = gpulinalg.last_run().details["cg_iterations"]
    assert iterations[0] > iterations[20] > iterations[100]
    assert iterations[0] >= 3 * iterations[100]


def test_auto_is_the_cholesky_path():
    x, y, xq, kernel = problem(200, 10, seed=8)
    auto = GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
    chol = GaussianProcessRegressor(kernel, optimizer=None, solver="cholesky").fit(x, y)
    assert auto.solver_ == chol.solver_ == "cholesky" and auto.L_.shape == (200, 200)
    np.testing.assert_array_equal(auto.predict(xq), chol.predict(xq))


def test_max_iter_warns_and_reports():
    x, y, _, kernel = problem(300, 1, seed=9)
    gp = GaussianProcessRegressor(kernel, optimizer=None, solver="cg",
                                  cg_options={"precond_rank": 0, "max_iter": 3, "n_probes": 4})
    with pytest.warns(IllConditionedWarning, match="max_iter"):
        gp.fit(x, y)
    details = gpulinalg.last_run().details
    assert details["cg_iterations"] == 3 and not details["cg_converged"]
    assert details["cg_residual"] > 1e-6


@pytest.mark.parametrize("options, match", [
    ({"tol": 0.0}, "tol"), ({"tol": 2}, "tol"), ({"max_iter": 0}, "max_iter"),
    ({"precond_rank": -1}, "precond_rank"), ({"n_probes": 1.5}, "n_probes"),
    ({"seed": True}, "seed"), ({"probes": 3}, "unknown cg_options key"),
])
def test_options_are_validated(options, match):
    x, y, _, kernel = problem(50, 1)
    with pytest.raises(ValueError, match=match):
        GaussianProcessRegressor(kernel, solver="cg", cg_options=options).fit(x, y)


def test_refusals_name_the_problem():
    x, y, _, kernel = problem(50, 1)
    with pytest.raises(ValueError, match="solver must be one of"):
        GaussianProcessRegressor(kernel, solver="lanczos").fit(x, y)
    with pytest.raises(TypeError, match="cg_options must be a dict"):
        GaussianProcessRegressor(kernel, solver="cg", cg_options=[1]).fit(x, y)
    with pytest.raises(ValueError, match="precision must be 'float64'"):
        GaussianProcessRegressor(kernel, solver="cg", precision="mixed").fit(x, y)
    with pytest.raises(ValueError, match="needs a kernel that gpulinalg evaluates"):
        GaussianProcessRegressor(ExpSineSquared(), optimizer=None, solver="cg").fit(x, y)
    gp = GaussianProcessRegressor(kernel, optimizer=None, solver="cg").fit(x, y)
    with pytest.raises(AttributeError, match="no Cholesky factor"):
        gp.L_  # noqa: B018
    assert CGOptions() == CGOptions(tol=1e-6, max_iter=1000, precond_rank=100, n_probes=32)


def test_pickled_model_predicts_the_same():
    x, y, xq, kernel = problem(150, 6, seed=10)
    gp = GaussianProcessRegressor(kernel, optimizer=None, solver="cg").fit(x, y)
    back = pickle.loads(pickle.dumps(gp))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for mode in ({}, {"return_std": True}):
            np.testing.assert_allclose(back.predict(xq, **mode), gp.predict(xq, **mode),
                                       rtol=1e-12)


@pytest.mark.gpu
def test_cupy_inputs_give_cupy_results():
    """The same algorithm on CuPy arrays: results stay on the device and agree with NumPy's."""
    import cupy
    x, y, xq, kernel = problem(800, 30, seed=11)
    gp = GaussianProcessRegressor(kernel, optimizer=None, solver="cg",
                                  cg_options=ACCURATE).fit(x, y)
    m, s = gp.predict(cupy.asarray(xq), return_std=True)
    assert isinstance(m, cupy.ndarray) and gpulinalg.last_run().backend == "gpu"
    with gpulinalg.config_context(backend="cpu"):
        m_h, s_h = gp.predict(xq, return_std=True)
    assert float(abs(m.get() - m_h).max()) <= 1e-8 and float(abs(s.get() - s_h).max()) <= 1e-8


@pytest.mark.parametrize("rank", [2, 3, 40, 70])
def test_pivoted_cholesky_stops_at_the_kernels_rank(rank, rng):
    """A rank-3 kernel (``DotProduct`` on 3-D points): the factor has at most 3 columns
    whatever the rank asked (past the read-back's period too), and its diagonal plus what it
    leaves is the kernel's."""
    from gpulinalg.gp._precond_xp import CHECK_EVERY, pivoted_cholesky
    assert 40 > CHECK_EVERY
    x = rng.standard_normal((120, 3))
    kernel = DotProduct(0.0, "fixed")
    L, d = pivoted_cholesky(compile_kernel(kernel, 3), x, rank, x.mean(axis=0))
    assert L.shape == (120, min(rank, 3)) and np.isfinite(L).all() and (d >= 0).all()
    np.testing.assert_allclose((L * L).sum(axis=1) + d, np.diag(kernel(x)), atol=1e-12)
    if rank >= 3:
        np.testing.assert_allclose(L @ L.T, kernel(x), atol=1e-10)
