"""gpulinalg.gp against scikit-learn: kernels, likelihood, gradient, fit, predictions."""

import os
import pickle

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor as SKGPR
from sklearn.gaussian_process.kernels import (RBF, ConstantKernel, DotProduct, ExpSineSquared,
                                              Matern, RationalQuadratic, WhiteKernel)

import gpulinalg
from tests.support import fake_gpu as fakes
from gpulinalg.gp import GaussianProcessRegressor, _kernels_xp
from gpulinalg.gp._kernels_xp import compile_kernel

# Documented tolerances (see GaussianProcessRegressor's Notes).
LML_RTOL, GRAD_RTOL, PRED_RTOL, THETA_ATOL = 1e-9, 1e-6, 1e-7, 1e-4

KERNELS = {
    "rbf": lambda d: ConstantKernel() * RBF() + WhiteKernel(),
    "rbf-ard": lambda d: ConstantKernel() * RBF([1.0] * d) + WhiteKernel(),
    "matern05": lambda d: Matern(nu=0.5) + WhiteKernel(),
    "matern15": lambda d: ConstantKernel() * Matern(nu=1.5) + WhiteKernel(),
    "matern25-ard": lambda d: Matern([1.0] * d, nu=2.5) + WhiteKernel(),
    "matern-inf": lambda d: Matern(nu=np.inf) + WhiteKernel(0.5),
    "rq": lambda d: RationalQuadratic(alpha_bounds=(1e-2, 1e2)) + WhiteKernel(),
    "dot": lambda d: DotProduct() + WhiteKernel(),
    "product": lambda d: ConstantKernel() * RBF() * DotProduct(sigma_0=1.0) + WhiteKernel(),
    "fixed-parts": lambda d: ConstantKernel(2.0, "fixed") * RBF(1.0) + WhiteKernel(0.1, "fixed"),
}


def data(rng, n=40, d=2, t=None):
    x = rng.uniform(-2, 2, (n, d))
    f = np.sin(2 * x[:, 0]) + (0.5 * x[:, 1] if d > 1 else 0)
    y = f + 0.1 * rng.standard_normal(n)
    if t:
        y = np.stack([y * (i + 1) + i for i in range(t)], axis=1)
    return x, y


def rel(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


# -- the kernel evaluator --------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("block", [None, 50])
def test_kernel_plan_matches_sklearn(name, block, rng, monkeypatch):
    if block:
        monkeypatch.setattr(_kernels_xp, "BLOCK_ELEMENTS", block)  # many row blocks
    x = rng.standard_normal((23, 3)) + 10.0  # off-centre: the GEMM distances must cope
    z = rng.standard_normal((7, 3)) + 10.0
    k = KERNELS[name](3).clone_with_theta(rng.uniform(-1, 1, len(KERNELS[name](3).theta)))
    plan = compile_kernel(k, 3)
    K, G = k(x, eval_gradient=True)
    np.testing.assert_allclose(plan.matrix(x), K, rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(plan.matrix(z, x), k(z, x), rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(plan.diag(z), k.diag(z), rtol=1e-12)
    w = rng.standard_normal((23, 23))
    got = plan.contract(x, lambda i0, i1: w[i0:i1])
    assert rel(got, np.einsum("ij,ijk->k", w, G)) < 1e-11


@pytest.mark.parametrize("kernel", [Matern(nu=0.7), ExpSineSquared(), RBF() ** 2,
                                    RationalQuadratic(length_scale=[1.0, 2.0])])
def test_kernel_plan_declines(kernel):
    assert compile_kernel(kernel, 2) is None


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_plan_on_cupy(name, rng, xp_gpu):
    x = rng.standard_normal((300, 4)) + 3.0
    k = KERNELS[name](4)
    plan = compile_kernel(k, 4)
    K, G = k(x, eval_gradient=True)
    xd = xp_gpu.asarray(x)
    np.testing.assert_allclose(plan.matrix(xd).get(), K, rtol=1e-11, atol=1e-11)
    w = rng.standard_normal((300, 300))
    wd = xp_gpu.asarray(w)
    got = plan.contract(xd, lambda i0, i1: wd[i0:i1]).get()
    assert rel(got, np.einsum("ij,ijk->k", w, G)) < 1e-10


# -- the estimator against scikit-learn -------------------------------------------------------

def _pair(kernel, **kw):
    return SKGPR(kernel, random_state=0, **kw), GaussianProcessRegressor(kernel, random_state=0,
                                                                          **kw)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_matches_sklearn(name, backend, rng):
    x, y = data(rng)
    ref, gp = _pair(KERNELS[name](2))
    ref.fit(x, y)
    gp.fit(x, y)
    theta = ref.kernel_.theta
    lml_r, grad_r = ref.log_marginal_likelihood(theta, eval_gradient=True)
    lml, grad = gp.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(lml - lml_r) <= LML_RTOL * abs(lml_r)
    assert np.abs(grad - grad_r).max() <= GRAD_RTOL * max(np.linalg.norm(grad_r), 1.0)
    np.testing.assert_allclose(gp.kernel_.theta, ref.kernel_.theta, atol=THETA_ATOL)
    assert abs(gp.log_marginal_likelihood_value_ - ref.log_marginal_likelihood_value_) <= \
        1e-6 * abs(ref.log_marginal_likelihood_value_)
    xq = rng.uniform(-2.5, 2.5, (15, 2))
    _check_predictions(ref, _refit_at(gp, ref, x, y), xq)
    assert gp.jitter_ == 0.0


def _refit_at(gp, ref, x, y):
    """Our estimator refitted at scikit-learn's optimum, so predictions compare exactly."""
    fixed = GaussianProcessRegressor(ref.kernel_, optimizer=None, alpha=gp.alpha,
                                     normalize_y=gp.normalize_y)
    return fixed.fit(x, y)


def _check_predictions(ref, gp, xq):
    mr, sr = ref.predict(xq, return_std=True)
    m, s = gp.predict(xq, return_std=True)
    assert rel(m, mr) < PRED_RTOL and rel(s, sr) < PRED_RTOL
    _, cr = ref.predict(xq, return_cov=True)
    m2, c = gp.predict(xq, return_cov=True)
    assert rel(c, cr) < PRED_RTOL and rel(m2, mr) < PRED_RTOL
    assert m.shape == mr.shape and s.shape == sr.shape and c.shape == cr.shape


def test_fallback_kernel_matches_sklearn(backend, rng):
    """A kernel without a GPU evaluator is evaluated by scikit-learn; results still agree."""
    x, y = data(rng, d=1)
    k = ExpSineSquared(periodicity_bounds=(1e-1, 1e1)) * RBF() + WhiteKernel(0.1)
    ref, gp = _pair(k, alpha=1e-6)
    ref.fit(x, y)
    gp.fit(x, y)
    lml_r, grad_r = ref.log_marginal_likelihood(ref.kernel_.theta, eval_gradient=True)
    lml, grad = gp.log_marginal_likelihood(ref.kernel_.theta, eval_gradient=True)
    assert abs(lml - lml_r) <= LML_RTOL * abs(lml_r)
    assert np.abs(grad - grad_r).max() <= GRAD_RTOL * max(np.linalg.norm(grad_r), 1.0)
    _check_predictions(ref, _refit_at(gp, ref, x, y), rng.uniform(-2, 2, (9, 1)))


@pytest.mark.parametrize("t", [None, 1, 3])
@pytest.mark.parametrize("normalize_y", [False, True])
def test_multi_output_and_normalize_y(t, normalize_y, backend, rng):
    x, y = data(rng, n=30, t=t)
    ref, gp = _pair(ConstantKernel() * RBF() + WhiteKernel(), normalize_y=normalize_y)
    ref.fit(x, y)
    gp.fit(x, y)
    assert abs(gp.log_marginal_likelihood_value_ - ref.log_marginal_likelihood_value_) <= \
        1e-6 * abs(ref.log_marginal_likelihood_value_)
    np.testing.assert_allclose(gp.kernel_.theta, ref.kernel_.theta, atol=THETA_ATOL)
    assert gp.alpha_.shape == ref.alpha_.shape
    _check_predictions(ref, _refit_at(gp, ref, x, y), rng.uniform(-2, 2, (8, 2)))
    s = gp.sample_y(x[:5], n_samples=4)
    assert s.shape == ref.sample_y(x[:5], n_samples=4).shape


def test_restarts_and_callable_optimizer(rng):
    x, y = data(rng, n=25)
    k = ConstantKernel() * RBF() + WhiteKernel()
    ref, gp = _pair(k, n_restarts_optimizer=2)
    ref.fit(x, y)
    gp.fit(x, y)
    assert abs(gp.log_marginal_likelihood_value_ - ref.log_marginal_likelihood_value_) <= \
        1e-6 * abs(ref.log_marginal_likelihood_value_)
    calls = []

    def optimizer(obj_func, theta0, bounds):
        calls.append(obj_func(theta0))
        return theta0, obj_func(theta0, eval_gradient=False)
    gp2 = GaussianProcessRegressor(k, optimizer=optimizer).fit(x, y)
    assert len(calls) == 1 and np.allclose(gp2.kernel_.theta, k.theta)
    with pytest.raises(ValueError, match="finite"):
        GaussianProcessRegressor(RBF(length_scale_bounds=(1e-3, np.inf)),
                                 n_restarts_optimizer=1).fit(x, y)


def test_default_kernel_and_prior(rng):
    x, y = data(rng, n=20)
    ref, gp = _pair(None)
    xq = rng.uniform(-2, 2, (6, 2))
    for kw in ({}, {"return_std": True}, {"return_cov": True}):
        a, b = ref.predict(xq, **kw), gp.predict(xq, **kw)
        for u, v in zip(np.atleast_1d(a) if not kw else a, np.atleast_1d(b) if not kw else b):
            np.testing.assert_allclose(u, v)
    ref.fit(x, y)
    gp.fit(x, y)
    np.testing.assert_allclose(gp.predict(xq), ref.predict(xq), rtol=1e-7, atol=1e-10)
    assert gp.sample_y(xq, 3).shape == (6, 3)


def test_alpha_array_and_errors(rng):
    x, y = data(rng, n=20)
    noise = np.full(20, 1e-2)
    ref, gp = _pair(RBF(), alpha=noise)
    ref.fit(x, y)
    gp.fit(x, y)
    np.testing.assert_allclose(gp.predict(x), ref.predict(x), rtol=1e-7, atol=1e-10)
    with pytest.raises(ValueError, match="alpha must be"):
        GaussianProcessRegressor(alpha=np.ones(3)).fit(x, y)
    with pytest.raises(ValueError, match="optimizer"):
        GaussianProcessRegressor(optimizer="adam").fit(x, y)
    with pytest.raises(ValueError, match="n_restarts"):
        GaussianProcessRegressor(n_restarts_optimizer=-1).fit(x, y)
    with pytest.raises(RuntimeError, match="At most one"):
        gp.predict(x, return_std=True, return_cov=True)
    with pytest.raises(ValueError, match="theta"):
        gp.log_marginal_likelihood(eval_gradient=True)
    with pytest.raises(ValueError):
        gp.predict(x[:, :1])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_inf_inputs(bad, rng):
    x, y = data(rng, n=10)
    xb = x.copy()
    xb[3, 1] = bad
    with pytest.raises(ValueError):
        GaussianProcessRegressor().fit(xb, y)
    yb = y.copy()
    yb[0] = bad
    with pytest.raises(ValueError):
        GaussianProcessRegressor().fit(x, yb)


def test_nan_in_kernel_raises(backend, rng):
    x, y = data(rng, n=10)
    gp = GaussianProcessRegressor(RBF(length_scale=np.nan), optimizer=None)
    with pytest.raises(ValueError, match="NaN"):
        gp.fit(x, y)
    gp = GaussianProcessRegressor(RBF() + WhiteKernel(), optimizer=None).fit(x, y)
    for grad in (False, True):
        with pytest.raises(ValueError, match="NaN"):
            gp.log_marginal_likelihood(np.array([np.nan, 0.0]), eval_gradient=grad)


def test_jitter_path(backend, rng):
    """Duplicated points: singular, pushed indefinite by 1e-12 so that every backend's Cholesky
    fails the same way; fitted with jitter."""
    x, y = data(rng, n=12)
    x, y = np.vstack([x, x]), np.concatenate([y, y])
    gp = GaussianProcessRegressor(RBF(0.5), alpha=np.full(24, -1e-12), optimizer=None,
                                  jitter="auto")
    with pytest.warns(gpulinalg.IllConditionedWarning, match="jitter") as rec:
        gp.fit(x, y)
    run = gpulinalg.last_run()
    seen = [(w.category.__name__, f"{os.path.basename(w.filename)}:{w.lineno}",
             str(w.message)[:120]) for w in rec]
    why = f"warnings {seen}; last run {run.op} on {run.backend}: {run.reason}, {run.details}"
    ours = [w for w in rec if issubclass(w.category, gpulinalg.IllConditionedWarning)]
    # ours point at the fit line (a third-party warning, e.g. CuPy's on first use, may not)
    assert all(w.filename == __file__ for w in ours), why
    retries = [w for w in ours if "retrying" in str(w.message)]
    start = gpulinalg.gp._solve_xp.JITTER_START * np.finfo(np.float64).eps
    assert len(retries) >= 2, why
    assert np.isclose(gp.jitter_, start * 10 ** (len(retries) - 1)), (gp.jitter_, why)
    assert np.isfinite(gp.log_marginal_likelihood_value_)
    mean = gp.predict(x)
    assert np.isfinite(mean).all() and np.abs(mean - y).max() < 1e-3
    with pytest.raises(np.linalg.LinAlgError):  # scikit-learn cannot fit it at all
        SKGPR(RBF(0.5), alpha=np.full(24, -1e-12), optimizer=None).fit(x, y)
    # nor can the default (jitter=None), with scikit-learn's message first
    with pytest.raises(np.linalg.LinAlgError, match="not returning a positive definite"):
        GaussianProcessRegressor(RBF(0.5), alpha=np.full(24, -1e-12), optimizer=None).fit(x, y)


def test_inputs_not_modified_and_orders(rng):
    x, y = data(rng, n=20)
    xf, yc = np.asfortranarray(x), y.copy()
    x0, y0 = x.copy(), y.copy()
    a = GaussianProcessRegressor(RBF() + WhiteKernel()).fit(xf, yc).predict(x[::2])
    b = GaussianProcessRegressor(RBF() + WhiteKernel()).fit(x, y).predict(
        np.asfortranarray(x)[::2])
    np.testing.assert_allclose(a, b, rtol=1e-10)
    assert np.array_equal(x, x0) and np.array_equal(y, y0) and np.array_equal(xf, x0)


def test_one_sample_and_float32(rng):
    gp = GaussianProcessRegressor().fit(np.ones((1, 2)), np.array([3.0]))
    assert gp.predict(np.ones((1, 2))).shape == (1,)
    x, y = data(rng, n=15)
    gp32 = GaussianProcessRegressor(RBF()).fit(x.astype(np.float32), y.astype(np.float32))
    gp64 = GaussianProcessRegressor(RBF()).fit(x, y)
    assert gp32.L_.dtype == np.float64  # float64 by default, as in scikit-learn
    np.testing.assert_allclose(gp32.predict(x), gp64.predict(x), rtol=1e-5, atol=1e-5)


def test_pickle_and_clone(rng):
    x, y = data(rng, n=15)
    gp = GaussianProcessRegressor(RBF() + WhiteKernel()).fit(x, y)
    gp._fitted.device = ("anything",)  # GPU copies are never pickled
    back = pickle.loads(pickle.dumps(gp))
    assert back._fitted.device is None
    np.testing.assert_array_equal(back.L_, gp.L_)
    np.testing.assert_allclose(back.predict(x), gp.predict(x))


def test_last_run_records_gp_ops(rng):
    x, y = data(rng, n=15)
    with gpulinalg.config(backend="cpu"):
        gp = GaussianProcessRegressor(RBF(), optimizer=None).fit(x, y)
        gp.predict(x)
        assert gpulinalg.last_run().op == "gp.predict"
        assert gpulinalg.last_run().backend == "cpu"


# -- fallback to the CPU ---------------------------------------------------------------------

def test_forced_oom_falls_back(fake_gpu, rng):
    x, y = data(rng, n=20)
    ref = GaussianProcessRegressor(RBF() + WhiteKernel(0.1), optimizer=None).fit(x, y)
    from gpulinalg import testing
    with testing.inject_fault("oom", times=100), gpulinalg.config(backend="gpu"):
        gp = GaussianProcessRegressor(RBF() + WhiteKernel(0.1), optimizer=None)
        with pytest.warns(gpulinalg.FallbackWarning):
            gp.fit(x, y)
        assert gpulinalg.last_run().fell_back
        with pytest.warns(gpulinalg.FallbackWarning):
            m = gp.predict(x, return_std=True)
    np.testing.assert_allclose(gp.L_, ref.L_)
    np.testing.assert_allclose(m, ref.predict(x, return_std=True))


def test_too_big_for_vram_runs_on_cpu(rng):
    from gpulinalg import testing
    x, y = data(rng, n=30)
    ref = GaussianProcessRegressor(RBF() + WhiteKernel(0.1)).fit(x, y)
    with fakes.fake_gpu(free=1 << 10), gpulinalg.config(backend="gpu"):
        gp = GaussianProcessRegressor(RBF() + WhiteKernel(0.1))
        with pytest.warns(gpulinalg.FallbackWarning, match="available"):
            gp.fit(x, y)
    testing.reset_gpu_state()
    np.testing.assert_allclose(gp.kernel_.theta, ref.kernel_.theta)
    np.testing.assert_allclose(gp.alpha_, ref.alpha_)


# -- GPU only ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_runs_and_cupy_round_trip(rng, xp_gpu):
    x, y = data(rng, n=3000, d=4)
    with gpulinalg.config(backend="gpu"):
        gp = GaussianProcessRegressor(ConstantKernel() * RBF([1.0] * 4) + WhiteKernel())
        gp.fit(x, y)
        assert gpulinalg.last_run().backend == "gpu"
        xq = xp_gpu.asarray(x[:100])
        m, s = gp.predict(xq, return_std=True)
        assert isinstance(m, xp_gpu.ndarray) and isinstance(s, xp_gpu.ndarray)
        assert gpulinalg.last_run().backend == "gpu"
    with gpulinalg.config(backend="cpu"):
        cpu = GaussianProcessRegressor(gp.kernel_, optimizer=None).fit(x, y)
        lml_c, grad_c = cpu.log_marginal_likelihood(gp.kernel_.theta, eval_gradient=True)
        mc, sc = cpu.predict(x[:100], return_std=True)
    lml_g, grad_g = gp.log_marginal_likelihood(gp.kernel_.theta, eval_gradient=True)
    assert abs(lml_g - lml_c) <= 1e-8 * abs(lml_c)
    assert np.abs(grad_g - grad_c).max() <= 1e-5 * max(np.linalg.norm(grad_c), 1.0)
    assert rel(m.get(), mc) < 1e-6 and rel(s.get(), sc) < 1e-6


@pytest.mark.gpu
def test_gpu_pool_limit_routes_to_cpu(rng, xp_gpu):
    x, y = data(rng, n=2500, d=3)
    pool = xp_gpu.get_default_memory_pool()
    old = pool.get_limit()
    pool.free_all_blocks()
    pool.set_limit(size=pool.used_bytes() + (16 << 20))  # far below 2 x 2500^2 x 8 bytes
    try:
        with gpulinalg.config(backend="gpu"):
            with pytest.warns(gpulinalg.FallbackWarning):
                lml = GaussianProcessRegressor(RBF() + WhiteKernel(), optimizer=None).fit(
                    x, y).log_marginal_likelihood_value_
    finally:
        pool.set_limit(size=old)
    with gpulinalg.config(backend="cpu"):
        ref = GaussianProcessRegressor(RBF() + WhiteKernel(), optimizer=None).fit(x, y)
    assert abs(lml - ref.log_marginal_likelihood_value_) <= 1e-9 * abs(lml)


# -- K^-1 in place of the factor (potri), the gradient's W in row blocks ------------------------

def _spd(rng, n, rank=None):
    a = rng.standard_normal((n, rank or n))
    return a @ a.T / a.shape[1] + np.eye(n)


@pytest.mark.parametrize("n, tile", [(100, None), (257, 7), (33, 40), (1, None)])
def test_cho_inverse_in_place(n, tile, rng, monkeypatch):
    from gpulinalg.gp import _engine_host, _fit_xp, _solve_xp
    if tile:
        monkeypatch.setattr(_fit_xp, "BLOCK_ELEMENTS", tile * tile)  # mirror_lower's tiles
    K = _spd(rng, n)
    work = K.copy()
    L = _engine_host.cholesky(_solve_xp.symmetric_view(work), True, True, False, K.dtype)
    inv = _engine_host.cho_inverse(L)
    assert np.shares_memory(inv, work) and inv.flags.c_contiguous  # no second n x n buffer
    np.testing.assert_allclose(inv, np.linalg.inv(K), atol=1e-12)
    assert np.array_equal(inv, inv.T)


@pytest.mark.gpu
def test_cho_inverse_on_gpu(rng, xp_gpu):
    from gpulinalg.gp import _engine_cuda, _solve_xp
    from gpulinalg._runtime.streams import op_stream
    n = 4196
    K = _spd(rng, n, 64)
    work = xp_gpu.asarray(K)
    with op_stream():  # engine functions run where the dispatcher runs them: its stream
        L = _engine_cuda.cholesky(_solve_xp.symmetric_view(work), True, True, False, K.dtype)
        inv = _engine_cuda.cho_inverse(L)
    assert inv.data.ptr == work.data.ptr and inv.flags.c_contiguous
    eps = np.finfo(np.float64).eps
    residual = float(xp_gpu.abs(xp_gpu.asarray(K) @ inv - xp_gpu.eye(n)).max())
    # the Frobenius norm bounds the 2-norm (a CPU SVD at n=4196 took most of the test's time)
    bound = 30 * n * eps * np.linalg.norm(K)
    assert residual < bound, (residual, bound)
    asym = float(xp_gpu.abs(inv - inv.T).max())  # V^T V by gemm: symmetric up to rounding
    assert asym <= 1e-12 * float(xp_gpu.abs(inv).max()), asym
    with op_stream():  # the memory-lean route (potri in place, mirrored) agrees
        work = xp_gpu.asarray(K)
        L = _engine_cuda.cholesky(_solve_xp.symmetric_view(work), True, True, False, K.dtype)
        lean = _engine_cuda._potri(L)
    assert lean.data.ptr == work.data.ptr
    diff = float(xp_gpu.abs(lean - inv).max())
    assert diff <= 1e-8 * float(xp_gpu.abs(inv).max()), diff


@pytest.mark.gpu
def test_gpu_likelihood_matches_cpu(rng, xp_gpu):
    x, y = data(rng, n=4296, d=3)
    k = ConstantKernel() * RBF([1.0, 2.0, 0.5]) + WhiteKernel(0.1)
    gp = GaussianProcessRegressor(k, optimizer=None)
    with gpulinalg.config(backend="cpu"):
        gp.fit(x, y)
        lml_c, grad_c = gp.log_marginal_likelihood(k.theta, eval_gradient=True)
    with gpulinalg.config(backend="gpu"):
        lml_g, grad_g = gp.log_marginal_likelihood(k.theta, eval_gradient=True)
        assert gpulinalg.last_run().backend == "gpu"
    assert abs(lml_g - lml_c) <= 1e-9 * abs(lml_c)
    assert np.abs(grad_g - grad_c).max() <= 1e-7 * max(np.linalg.norm(grad_c), 1.0)


@pytest.mark.gpu
def test_gpu_engine_called_directly_matches_cpu(rng, xp_gpu):
    """The call ``benchmarks.gp_phases`` makes: the engine function outside the dispatcher (on
    CuPy's default stream); its Cholesky must not start before the kernel matrix is built."""
    from gpulinalg.gp import _engine_cuda, _engine_host
    x, y = data(rng, n=3000, d=8)
    plan = compile_kernel(ConstantKernel() * RBF(np.ones(8)) + WhiteKernel(1.0), 8)
    ref = _engine_host.log_marginal_likelihood(x, y, 0.0, None, None, plan=plan,
                                               eval_gradient=True)
    xd, yd = xp_gpu.asarray(x), xp_gpu.asarray(y)
    for _ in range(3):
        lml, grad = _engine_cuda.log_marginal_likelihood(xd, yd, 0.0, None, None, plan=plan,
                                                         eval_gradient=True)
        assert abs(float(lml) - ref[0]) <= 1e-9 * abs(ref[0])
        assert rel(xp_gpu.asnumpy(grad), ref[1]) <= 1e-7


@pytest.mark.parametrize("block", [None, 45 * 7])  # W and its contraction in row blocks
@pytest.mark.parametrize("name", ["rbf-ard", "product", "matern05", "rq", "dot"])
def test_gradient_in_row_blocks_matches_sklearn(name, block, rng, monkeypatch):
    from gpulinalg.gp import _engine_host, _fit_xp
    monkeypatch.setattr(_fit_xp, "BLOCK_ELEMENTS", 7 * 7)  # mirror_lower in 7 x 7 tiles
    x, y = data(rng, n=45, t=2)
    k = KERNELS[name](2)
    theta = k.theta + 0.1
    ref = SKGPR(k, optimizer=None).fit(x, y)
    lml_r, grad_r = ref.log_marginal_likelihood(theta, eval_gradient=True)
    kt = k.clone_with_theta(theta)
    plan = compile_kernel(kt, 2, block_elements=block or _kernels_xp.BLOCK_ELEMENTS)
    for _ in range(2):  # the in-place factor and inverse are not seen by the next evaluation
        lml, grad = _engine_host.log_marginal_likelihood(x, y, 1e-10, None, None, plan=plan,
                                                         eval_gradient=True)
        assert abs(lml - lml_r) <= LML_RTOL * abs(lml_r)
        assert np.abs(grad - grad_r).max() <= GRAD_RTOL * max(np.linalg.norm(grad_r), 1.0)
    gp = GaussianProcessRegressor(k, optimizer=None).fit(x, y)
    lml2, grad2 = gp.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(lml2 - lml_r) <= LML_RTOL * abs(lml_r)
    assert np.abs(grad2 - grad_r).max() <= GRAD_RTOL * max(np.linalg.norm(grad_r), 1.0)


@pytest.mark.gpu
def test_gpu_resident_predict_with_a_cpu_kernel(rng, xp_gpu):
    """A kernel evaluated by scikit-learn, on a training set large enough to stay on the GPU."""
    from gpulinalg.gp._regressor_api import RESIDENT_MIN_N
    x, y = data(rng, n=RESIDENT_MIN_N + 100, d=1)
    k = ExpSineSquared(1.0, 3.0) + WhiteKernel(0.1)
    with gpulinalg.config(backend="gpu"):
        gp = GaussianProcessRegressor(k, optimizer=None).fit(x, y)
        m, s = gp.predict(x[:50], return_std=True)
        assert gp._fitted.device is not None
    with gpulinalg.config(backend="cpu"):
        mc, sc = GaussianProcessRegressor(k, optimizer=None).fit(x, y).predict(
            x[:50], return_std=True)
    assert rel(m, mc) < 1e-6 and rel(s, sc) < 1e-6
