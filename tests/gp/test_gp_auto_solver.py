"""``solver="auto"`` (the default): the Cholesky path where its factor fits (float64, then
mixed), else the matrix-free solver, as the lightest rung of the same dispatch (``Op.lighter``)
for ``fit``'s final step and for the likelihood evaluations; ``solver="cholesky"`` and kernels
the matrix-free solver cannot evaluate keep the clear ``OutOfMemoryError``.

At test sizes the matrix-free estimate is made small by small kernel tiles (the estimate's and
the engine's), so that a memory between it and the Cholesky path's estimates exists."""

import functools

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import ExpSineSquared, WhiteKernel

import gpulinalg
from gpulinalg.gp import GaussianProcessRegressor, _cg_api, _engine_cuda, _engine_host
from gpulinalg.gp import _regressor_api
from gpulinalg.gp._cg_options import CGOptions
from gpulinalg.gp._kernels_xp import compile_kernel
from gpulinalg.gp._regressor_api import _fit_cost, _lml_cost
from tests.gp.test_gp_formulas import D, problem, rel
from tests.support.fake_gpu import fake_gpu

N, M = 500, 40
#: Kernel-tile elements of the matrix-free runs here (the default tiles hold ``n^2`` at this n).
TILE = 20 * N


@pytest.fixture(scope="module")
def reference():
    """The float64 Cholesky fit and its predictions, on the CPU."""
    x, y, xq, kernel = problem(N, M, seed=31)
    with gpulinalg.config(backend="cpu"):
        gp = GaussianProcessRegressor(kernel, optimizer=None, solver="cholesky").fit(x, y)
        mean, std = gp.predict(xq, return_std=True)
    return x, y, xq, kernel, gp, mean, std


@pytest.fixture
def small_tiles(monkeypatch):
    monkeypatch.setattr(_cg_api, "BLOCK_ELEMENTS", TILE)
    monkeypatch.setattr(_regressor_api, "compile_kernel",
                        functools.partial(compile_kernel, block_elements=TILE))


def budgets(eval_gradient=None):
    """``(cholesky float64, cholesky mixed, matrix-free)`` estimates of ``fit``'s final step,
    or with ``eval_gradient`` given, ``(cholesky, matrix-free)`` of a likelihood evaluation."""
    options = CGOptions()
    if eval_gradient is None:
        return (_fit_cost(N, 1, D, None)[0], _fit_cost(N, 1, D, None, item=4)[0],
                _cg_api.cg_cost(N, 1, D, options, False)[0])
    return (_lml_cost(N, 1, D + 2, eval_gradient, False)[0],
            _cg_api.cg_cost(N, 1, D, options, eval_gradient)[0])


def _close_to(gp, reference):
    *_, xq, _, ref, mean_r, std_r = reference
    with gpulinalg.config(backend="cpu"):
        mean, std = gp.predict(xq, return_std=True)
    assert rel(gp.alpha_, ref.alpha_) < 1e-4
    assert rel(mean, mean_r) < 1e-5 and np.abs(std - std_r).max() < 1e-4


def test_host_without_room_for_a_factor_takes_the_matrix_free_solver(
        reference, small_tiles, host_bytes):
    x, y, _, kernel, *_ = reference
    f64, mixed, cg = budgets()
    assert cg < mixed < f64
    host_bytes(mixed - 1)
    with gpulinalg.config(backend="cpu", host_memory_share=1.0):
        gp = GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
    rec = gpulinalg.last_run()
    assert gp.solver_ == "cg" and gp.precision_ == "float64"
    assert rec.op == "gp.fit" and rec.backend == "cpu" and rec.details["solver"] == "cg"
    assert f"precision='mixed': host estimate {mixed} B over" in rec.reason
    assert f"solver='cg': host estimate {cg} B within" in rec.reason
    assert rec.details["cg_converged"]
    with pytest.raises(AttributeError, match="solver='cg' has no"):
        _ = gp.L_
    _close_to(gp, reference)


def test_a_matrix_free_run_too_long_for_the_cpu_is_not_started(
        reference, small_tiles, host_bytes, monkeypatch):
    """The automatic rung is refused where its modelled CPU time is over the limit (as a run
    that does not fit: nothing started); asked for by name, it runs."""
    from gpulinalg._runtime import budget, host_check
    x, y, _, kernel, *_ = reference
    f64, mixed, cg = budgets()
    host_bytes(mixed - 1)
    flops = _cg_api.cg_cost(N, 1, D, CGOptions(), False)[1]
    seconds = budget.model_seconds(flops, 0)[0]
    monkeypatch.setattr(host_check, "LIGHTER_CPU_SECONDS", seconds / 2)
    with gpulinalg.config(backend="cpu", host_memory_share=1.0):
        with pytest.raises(MemoryError, match="solver='cg' fits in host memory") as err:
            GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
        rec = gpulinalg.last_run()
        assert "pass solver='cg' to run it anyway" in str(err.value)
        assert err.value.needed > mixed - 1
        assert rec.op == "gp.fit" and "modelled CPU time" in rec.reason
        gp = GaussianProcessRegressor(kernel, optimizer=None, solver="cg").fit(x, y)
    assert gp.solver_ == "cg"
    monkeypatch.setattr(host_check, "LIGHTER_CPU_SECONDS", seconds * 2)
    with gpulinalg.config(backend="cpu", host_memory_share=1.0):
        assert GaussianProcessRegressor(kernel, optimizer=None).fit(x, y).solver_ == "cg"


def test_a_mixed_factor_too_long_for_the_cpu_is_not_started(reference, host_bytes,
                                                             monkeypatch):
    """The mixed rung is an automatic substitute too: refused where modelled over the limit,
    run when asked for."""
    from gpulinalg._runtime import host_check
    x, y, _, kernel, *_ = reference
    f64, mixed, _ = budgets()
    host_bytes(f64 - 1)
    monkeypatch.setattr(host_check, "LIGHTER_CPU_SECONDS", 1e-9)
    with gpulinalg.config(backend="cpu", host_memory_share=1.0):
        with pytest.raises(MemoryError, match="pass precision='mixed' to run it anyway"):
            GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
        gp = GaussianProcessRegressor(kernel, optimizer=None, precision="mixed").fit(x, y)
    assert gp.precision_ == "mixed" and gp.solver_ == "cholesky"


def test_pretend_gpu_without_room_for_a_factor_takes_the_matrix_free_solver(
        reference, small_tiles, monkeypatch):
    x, y, _, kernel, *_ = reference
    for name in ("fit", "predict", "cg_fit", "cg_predict"):  # the GPU functions get NumPy
        monkeypatch.setattr(_engine_cuda, name, getattr(_engine_host, name))
    f64, mixed, cg = budgets()
    total = 1 << 40
    headroom = int(gpulinalg.get_config().vram_headroom * total)
    with fake_gpu(free=mixed - 1 + headroom, total=total), gpulinalg.config(backend="gpu"):
        gp = GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
        rec = gpulinalg.last_run()
    gpulinalg.testing.reset_gpu_state()
    assert gp.solver_ == "cg" and rec.backend == "gpu" and not rec.fell_back
    assert f"precision='mixed': estimate {mixed} B >" in rec.reason
    assert f"solver='cg': estimate {cg} B fits" in rec.reason
    _close_to(gp, reference)


def test_likelihood_takes_the_matrix_free_solver_where_the_factor_does_not_fit(
        reference, small_tiles, host_bytes):
    x, y, _, kernel, ref, *_ = reference
    theta = ref.kernel_.theta + 0.1
    exact, grad_exact = ref.log_marginal_likelihood(theta, eval_gradient=True)
    chol, cg = budgets(eval_gradient=True)
    assert cg < chol
    with gpulinalg.config(backend="cpu"):
        gp = GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
    host_bytes(chol - 1)
    with gpulinalg.config(backend="cpu", host_memory_share=1.0):
        lml, grad = gp.log_marginal_likelihood(theta, eval_gradient=True)
    rec = gpulinalg.last_run()
    assert rec.op == "gp.log_marginal_likelihood" and rec.details["solver"] == "cg"
    assert abs(lml - exact) < 1e-3 * abs(exact)
    assert np.abs(grad - grad_exact).max() < 0.05 * np.abs(grad_exact).max()


def test_the_factor_is_kept_where_it_fits(reference, small_tiles):
    x, y, _, kernel, *_ = reference
    with gpulinalg.config(backend="cpu"):
        gp = GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
    assert gp.solver_ == "cholesky" and gp.L_.shape == (N, N)
    assert "solver" not in gpulinalg.last_run().details


@pytest.mark.parametrize("case", ["explicit cholesky", "kernel without a plan"])
def test_no_matrix_free_rung(reference, small_tiles, host_bytes, case):
    x, y, _, kernel, *_ = reference
    f64, mixed, _ = budgets()
    if case == "explicit cholesky":
        est = GaussianProcessRegressor(kernel, optimizer=None, solver="cholesky")
    else:  # scikit-learn evaluates this kernel: no tiles for the matrix-free solver
        x = x[:, :1]
        est = GaussianProcessRegressor(ExpSineSquared() + WhiteKernel(), optimizer=None)
    host_bytes(mixed - 1 if case == "explicit cholesky" else f64 // 4)
    with gpulinalg.config(backend="cpu", host_memory_share=1.0), \
            pytest.raises(gpulinalg.OutOfMemoryError):
        est.fit(x, y)
    assert "solver='cg'" not in gpulinalg.last_run().reason
