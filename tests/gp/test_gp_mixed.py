"""``GaussianProcessRegressor(precision="mixed")``: the kernel matrix and its factor in float32,
``alpha_`` and predict's solves refined in float64 (``gp._mixed_xp``). Against scikit-learn's
formulas in float64 (``test_gp_formulas.reference``), on the CPU at small ``n`` through the
estimator and through the tiled code path, and on the GPU (``gpu`` mark)."""

import pickle

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import (RBF, ConstantKernel, DotProduct, ExpSineSquared,
                                              WhiteKernel)

import gpulinalg
from gpulinalg import IllConditionedWarning
from gpulinalg.gp import GaussianProcessRegressor, _engine_host, _fit_xp, _mixed_xp
from gpulinalg.gp._kernels_xp import compile_kernel
from gpulinalg.gp._regressor_api import _Training

from tests.gp.test_gp_formulas import D, kernel_matrix, problem, reference, rel


def fitted(kernel, x, y, **kw):
    return GaussianProcessRegressor(kernel, optimizer=None, **kw).fit(x, y)


def test_mixed_matches_the_formulas_where_float32_alone_does_not():
    x, y, xq, kernel = problem(900, 120, seed=5)
    mean_r, std_r = reference(x, y, xq, kernel)
    with gpulinalg.config(backend="cpu"):
        gp = fitted(kernel, x, y, precision="mixed")
        mean, std = gp.predict(xq, return_std=True)
    assert gp.L_.dtype == np.float32 and gp.jitter_ == 0.0
    assert rel(mean, mean_r) < 1e-10 and rel(std, std_r) < 1e-10
    # the float32 factor alone (no refinement) is what the refinement removes
    plain = _fit_xp.predict_body(_engine_host, xq, x, gp.L_, gp.alpha_, np.ones(1),
                                 np.zeros(1), None, None, None,
                                 plan=compile_kernel(kernel, D), mode="std")
    assert rel(plain[1], std_r) > 1e-7


def test_alpha_and_likelihood_against_float64():
    x, y, _, kernel = problem(700, 1, seed=6)
    with gpulinalg.config(backend="cpu"):
        ref = fitted(kernel, x, y)
        gp = fitted(kernel, x, y, precision="mixed")
    assert rel(gp.alpha_, ref.alpha_) < 1e-10
    # log |K| from the float32 factor (documented: about 1e-5 relative)
    lml, lml_ref = gp.log_marginal_likelihood_value_, ref.log_marginal_likelihood_value_
    assert abs(lml - lml_ref) <= 1e-4 * abs(lml_ref) and lml != lml_ref
    np.testing.assert_allclose(gp.L_, ref.L_, rtol=0, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 13])
def test_tiled_path_in_float32_tiles(rows):
    """The n = 100 000 road at n = 260: the float32 matrix built in tiles of ``rows`` rows,
    the operator's products in the same tiles, predict in query blocks of 9 points."""
    x, y, xq, kernel = problem(260, 40, seed=7)
    mean_r, std_r = reference(x, y, xq, kernel)
    plan = compile_kernel(kernel, D, block_elements=rows * 260, predict_elements=9 * 260)
    train = _Training(x, None, None, keep=True)
    res = _fit_xp.fit_body(_engine_host, x, y, 1e-10, None, train, plan=plan, jitter=None,
                           precision="mixed")
    assert train.L.dtype == np.float32 and np.allclose(np.triu(train.L, 1), 0)
    out = _fit_xp.predict_body(_engine_host, xq, x, train.L, res.alpha, np.ones(1),
                               np.zeros(1), None, None, None, plan=plan, mode="std",
                               refine=1e-10)
    assert rel(out[0], mean_r) < 1e-10 and rel(out[1], std_r) < 1e-10


def test_tiled_matrix_in_float32_and_product():
    x, _, _, kernel = problem(90, 1)
    one = compile_kernel(kernel, D).matrix(x)
    tiles = compile_kernel(kernel, D, block_elements=90 * 4)
    low = tiles.matrix(x, dtype=np.float32)
    assert low.dtype == np.float32
    np.testing.assert_array_equal(low, one.astype(np.float32))
    v = np.random.default_rng(0).standard_normal((90, 3))
    np.testing.assert_allclose(tiles.product(x, v), one @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tiles.product(x, v[:, 0]), one @ v[:, 0], rtol=1e-12,
                               atol=1e-12)


def test_cov_targets_normalize_and_noise_per_point(rng):
    x, y, xq, kernel = problem(300, 25, seed=8)
    y2 = np.column_stack([y, 3 * y + 1])
    noise = rng.uniform(1e-3, 1e-2, 300)
    with gpulinalg.config(backend="cpu"):
        ref = fitted(kernel, x, y2, alpha=noise, normalize_y=True)
        gp = fitted(kernel, x, y2, alpha=noise, normalize_y=True, precision="mixed")
        for kw in ({}, {"return_std": True}, {"return_cov": True}):
            got, want = gp.predict(xq, **kw), ref.predict(xq, **kw)
            for g, w in zip(*((got, want) if kw else ((got,), (want,)))):
                assert g.shape == w.shape and rel(g, w) < 1e-9
        _, cov = gp.predict(xq, return_cov=True)
    assert np.abs(cov - cov.transpose(1, 0, 2)).max() <= 1e-15 * np.abs(cov).max()


def test_jitter_is_part_of_the_refined_operator():
    """A jitter the float32 factorization adds is in the operator the solves are refined
    against: the result is float64's ``(K + j I)^-1 y`` for the same ``j``."""
    x, y, xq, kernel = problem(200, 10, seed=9)
    with gpulinalg.config(backend="cpu"):
        gp = fitted(kernel, x, y, precision="mixed", jitter=1e-3)
        assert gp.jitter_ == 1e-3 and gp._fitted.refine == pytest.approx(1e-10 + 1e-3)
        K = kernel_matrix(x, kernel) + (1e-10 + 1e-3) * np.eye(200)
    assert rel(gp.alpha_, np.linalg.solve(K, y)) < 1e-10


def test_pickle_keeps_the_refinement():
    x, y, xq, kernel = problem(150, 20, seed=10)
    with gpulinalg.config(backend="cpu"):
        gp = fitted(kernel, x, y, precision="mixed")
        again = pickle.loads(pickle.dumps(gp))
        assert again._fitted.refine == gp._fitted.refine
        np.testing.assert_array_equal(again.predict(xq, return_std=True)[1],
                                      gp.predict(xq, return_std=True)[1])
    assert again.get_params()["precision"] == "mixed"


def test_stalled_refinement_warns(monkeypatch):
    """One step allowed and nothing accepted: the warning says how far it got."""
    x, y, _, kernel = problem(120, 1, seed=11)
    monkeypatch.setattr(_mixed_xp, "MAX_STEPS", 1)
    monkeypatch.setattr(_mixed_xp, "TOL", 0.0)
    monkeypatch.setattr(_mixed_xp, "ACCEPT", 0.0)
    with gpulinalg.config(backend="cpu"), pytest.warns(IllConditionedWarning,
                                                        match="after 1 refinement steps"):
        fitted(kernel, x, y, precision="mixed")


def test_refinement_counts_its_steps():
    x, y, _, kernel = problem(400, 1, seed=12)
    plan = compile_kernel(kernel, D)
    K = plan.matrix(x)
    K[np.diag_indices_from(K)] += 1e-10
    L = np.linalg.cholesky(K.astype(np.float32))
    got, steps = _mixed_xp.refined_solve(_engine_host, L, _mixed_xp.Operator(plan, x, 1e-10), y)
    assert 1 <= steps < _mixed_xp.MAX_STEPS
    assert rel(got, np.linalg.solve(K, y)) < 1e-11
    zero, _ = _mixed_xp.refined_solve(_engine_host, L, _mixed_xp.Operator(plan, x, 1e-10),
                                      np.zeros(400))
    assert not zero.any()


class _Counted:
    def __init__(self, op):
        self.op, self.calls = op, 0

    def __call__(self, v):
        self.calls += 1
        return self.op(v)


def _spread_problem(n=600):
    x, _, xq, kernel = problem(n, 40, seed=16)
    plan = compile_kernel(kernel, D)
    K = plan.matrix(x)
    K[np.diag_indices_from(K)] += 1e-10
    L = np.linalg.cholesky(K.astype(np.float32))
    k = plan.matrix(xq, x).T
    return K, L, k, plan.diag(xq), plan.matrix(xq), _Counted(_mixed_xp.Operator(plan, x, 1e-10))


def test_spread_takes_one_product_and_three_terms():
    """predict's spread from one float32 solve, one product and one float32 triangular solve;
    the third term (second order in the float32 solve's error) is what brings it to float64."""
    K, L, k, prior, kxx, op = _spread_problem()
    exact = (k * np.linalg.solve(K, k)).sum(axis=0)
    w = _mixed_xp._solve_low(_engine_host, L, k)
    q, t, _, _ = _mixed_xp.quadratic(_engine_host, L, op, k, w)
    assert op.calls == 1 and (t > 0).all()
    assert rel(q, exact) < 1e-13 and rel(q - t, exact) > 1e3 * rel(q, exact)
    var = _mixed_xp.spread(_engine_host, L, op, k, prior)
    assert op.calls == 2 and rel(var, prior - exact) < 1e-12
    cov = _mixed_xp.spread(_engine_host, L, op, k, kxx, full=True)
    assert op.calls == 3 and np.abs(cov - cov.T).max() <= 1e-15 * np.abs(cov).max()
    assert rel(cov, kxx - k.T @ np.linalg.solve(K, k)) < 1e-12


@pytest.mark.parametrize("full", [False, True])
def test_spread_refines_while_its_estimate_is_above_the_bar(monkeypatch, full):
    """A bar of 0 is never met: each round refines ``w`` one step (the estimate falls by about
    ``(kappa eps32)^2`` a round) until the rounds run out or stall, and a warning says so; the
    result is as good as float64's all the same."""
    K, L, k, prior, kxx, op = _spread_problem(300)
    monkeypatch.setattr(_mixed_xp, "ACCEPT", 0.0)
    monkeypatch.setattr(_mixed_xp, "TOL", 0.0)
    monkeypatch.setattr(_mixed_xp, "MAX_STEPS", 3)
    with pytest.warns(IllConditionedWarning, match="variances stopped after [23] refinement"):
        got = _mixed_xp.spread(_engine_host, L, op, k, kxx if full else prior, full=full)
    assert op.calls in (2, 3)
    quad = k.T @ np.linalg.solve(K, k)
    assert rel(got, kxx - quad if full else prior - np.diagonal(quad)) < 1e-12


def test_spread_refines_an_ill_conditioned_block_to_float64():
    """A white noise of 1e-4 (kappa(K) 2.5e6, where the float32 solve alone is 2e-3 off): one
    round's estimate is above the bar, ``w`` is refined once, and the variances match
    float64's."""
    x, _, xq, _ = problem(400, 30, seed=17)
    plan = compile_kernel(ConstantKernel(1.0) * RBF(np.ones(D)) + WhiteKernel(1e-4), D)
    K = plan.matrix(x)
    K[np.diag_indices_from(K)] += 1e-10
    L = np.linalg.cholesky(K.astype(np.float32))
    k, prior = plan.matrix(xq, x).T, plan.diag(xq)
    op = _Counted(_mixed_xp.Operator(plan, x, 1e-10))
    var = _mixed_xp.spread(_engine_host, L, op, k, prior)
    exact = prior - (k * np.linalg.solve(K, k)).sum(axis=0)
    plain = prior - (k * _mixed_xp._solve_low(_engine_host, L, k)).sum(axis=0)
    assert rel(plain, exact) > 1e-4
    assert op.calls == 2 and rel(var, exact) < 1e-10


def test_bad_precision_and_kernels_without_a_plan():
    x, y, _, kernel = problem(30, 1)
    with pytest.raises(ValueError, match="precision must be"):
        fitted(kernel, x, y, precision="float32")
    with pytest.raises(ValueError, match="needs a kernel that gpulinalg evaluates"):
        fitted(ExpSineSquared() + WhiteKernel(), x, y, precision="mixed")
    # a kernel with a plan of another kind is accepted
    gp = fitted(DotProduct() + WhiteKernel(0.5), x, y, precision="mixed")
    assert gp.L_.dtype == np.float32


def test_dask_input_is_refused():
    da = pytest.importorskip("dask.array")
    x, y, _, kernel = problem(40, 1)
    with pytest.raises(ValueError, match="not available for Dask"):
        GaussianProcessRegressor(kernel, optimizer=None, precision="mixed").fit(
            da.from_array(x, chunks=20), da.from_array(y, chunks=20))


def test_optimizer_runs_in_float64_then_factors_in_mixed():
    x, y, xq, _ = problem(120, 15, seed=13)
    kernel = 1.0 * RBF(np.ones(D)) + WhiteKernel(0.1)
    with gpulinalg.config(backend="cpu"):
        ref = GaussianProcessRegressor(kernel, random_state=0).fit(x, y)
        gp = GaussianProcessRegressor(kernel, random_state=0, precision="mixed").fit(x, y)
        assert gp.log_marginal_likelihood_value_ == ref.log_marginal_likelihood_value_
        np.testing.assert_array_equal(gp.kernel_.theta, ref.kernel_.theta)
        assert rel(gp.predict(xq), ref.predict(xq)) < 1e-9


@pytest.mark.gpu
def test_mixed_on_gpu_matches_the_formulas(xp_gpu):
    """n = 6000 on the GPU: float32 factor kept on the device, predictions within 1e-9 of the
    float64 formulas on the CPU; the pool's high-water mark under half a float64 matrix plus
    the row tiles."""
    from gpulinalg.gp._kernels_xp import BLOCK_ELEMENTS
    n = 6000
    x, y, xq, kernel = problem(n, 300, seed=14)
    mean_r, std_r = reference(x, y, xq, kernel)
    pool = xp_gpu.get_default_memory_pool()
    pool.free_all_blocks()
    base = pool.total_bytes()
    with gpulinalg.config(backend="gpu"):
        gp = fitted(kernel, x, y, precision="mixed")
        peak = pool.total_bytes() - base
        assert gp._fitted.device is not None and gp._fitted.device[1].dtype == np.float32
        mean, std = gp.predict(xq, return_std=True)
        _, cov = gp.predict(xq[:50], return_cov=True)
    assert peak < 4 * n * n + 7 * 8 * BLOCK_ELEMENTS, peak
    assert rel(mean, mean_r) < 1e-9 and rel(std, std_r) < 1e-9
    assert rel(np.sqrt(np.diag(cov)), std_r[:50]) < 1e-9


def test_sample_y_and_switching_precision():
    x, y, xq, kernel = problem(200, 12, seed=15)
    with gpulinalg.config(backend="cpu"):
        ref = fitted(kernel, x, y)
        gp = fitted(kernel, x, y, precision="mixed")
        np.testing.assert_allclose(gp.sample_y(xq, 3, random_state=1),
                                   ref.sample_y(xq, 3, random_state=1), rtol=1e-7, atol=1e-9)
        gp.set_params(precision="float64").fit(x, y)  # a refit in float64 drops the refinement
        assert gp.L_.dtype == np.float64 and gp._fitted.refine is None
        np.testing.assert_array_equal(gp.predict(xq), ref.predict(xq))
