"""``GaussianProcessRegressor`` fitted on a Dask ``X`` (issue 17) through
:mod:`gpulinalg.gp._regressor_dask` (the estimator's hook calls it): kernel tiles on the workers,
decomp's blocked Cholesky; fitted attributes and predictions against scikit-learn. And
``exact_gp_solve``'s lazy ``jitter="auto"`` on Dask. On the 2-worker CPU ``LocalCluster``."""

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")

import dask  # noqa: E402
from sklearn.gaussian_process import GaussianProcessRegressor as SkGPR  # noqa: E402
from sklearn.gaussian_process.kernels import (RBF, ConstantKernel as C, Exponentiation,  # noqa: E402
                                              ExpSineSquared, Matern, WhiteKernel)

from gpulinalg import NotPositiveDefiniteError  # noqa: E402
from gpulinalg.gp import GaussianProcessRegressor, exact_gp_solve  # noqa: E402
from gpulinalg.gp import _regressor_dask as rd  # noqa: E402

KERNELS = [2.0 * RBF([1.0, 2.0]) + WhiteKernel(1e-2),
           C(0.5) * Matern(0.7, nu=1.5) + WhiteKernel(0.05),
           Exponentiation(RBF(1.5), 2) + WhiteKernel(0.1)]  # no plan: scikit-learn per tile


def _data(rng, n=83, m=31, t=None):
    X = rng.uniform(0, 5, (n, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    if t:
        y = np.column_stack([y * (i + 1) for i in range(t)])
    return X, y, rng.uniform(0, 5, (m, 2))


@pytest.mark.parametrize("kernel", KERNELS, ids=["rbf_white", "matern", "no_plan"])
@pytest.mark.parametrize("chunk", [20, 83])
def test_fit_and_predict_match_scikit_learn(client, rng, kernel, chunk):
    X, y, Xq = _data(rng)
    ref = SkGPR(kernel, optimizer=None, normalize_y=True).fit(X, y)
    est = GaussianProcessRegressor(kernel, optimizer=None, normalize_y=True)
    assert rd.fit(est, da.from_array(X, chunks=(chunk, 2)), y) is est
    assert isinstance(est.L_, da.Array) and isinstance(est.alpha_, da.Array)
    np.testing.assert_allclose(est.L_.compute(), ref.L_, atol=1e-12)
    np.testing.assert_allclose(est.alpha_.compute(), ref.alpha_, rtol=1e-8, atol=1e-9)
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=1e-9)
    assert est.jitter_ == 0.0 and est.n_features_in_ == 2
    mean, std = rd.predict(est, da.from_array(Xq, chunks=(13, 2)), return_std=True)
    assert isinstance(mean, da.Array) and isinstance(std, da.Array)  # lazy
    mr, sr = ref.predict(Xq, return_std=True)
    np.testing.assert_allclose(mean.compute(), mr, atol=1e-9)
    np.testing.assert_allclose(std.compute(), sr, atol=1e-9)
    mean, cov = rd.predict(est, Xq, return_cov=True)  # not Dask: computed
    mr, cr = ref.predict(Xq, return_cov=True)
    assert isinstance(mean, np.ndarray)
    np.testing.assert_allclose(mean, mr, atol=1e-9)
    np.testing.assert_allclose(cov, cr, atol=1e-9)


def test_several_targets_per_sample_noise_and_dask_y(client, rng):
    X, Y, Xq = _data(rng, n=50, m=9, t=2)
    noise = rng.uniform(1e-3, 1e-2, 50)
    kernel = RBF(0.8)
    ref = SkGPR(kernel, alpha=noise, optimizer=None).fit(X, Y)
    est = GaussianProcessRegressor(kernel, alpha=noise, optimizer=None)
    rd.fit(est, da.from_array(X, chunks=(17, 1)), da.from_array(Y, chunks=(10, 2)))
    np.testing.assert_allclose(est.alpha_.compute(), ref.alpha_, rtol=1e-7, atol=1e-8)
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=1e-9)
    mean, std = rd.predict(est, da.from_array(Xq, chunks=4), return_std=True)
    mr, sr = ref.predict(Xq, return_std=True)
    assert mean.shape == (9, 2) and std.shape == (9, 2)
    np.testing.assert_allclose(mean.compute(), mr, atol=1e-8)
    np.testing.assert_allclose(std.compute(), sr, atol=1e-8)


def test_fit_refuses_what_it_cannot_do(client, rng):
    X, y, _ = _data(rng, n=20)
    x = da.from_array(X, chunks=10)
    with pytest.raises(ValueError, match="optimizer=None"):
        rd.fit(GaussianProcessRegressor(RBF()), x, y)
    with pytest.raises(ValueError, match="rows|n ="):
        rd.fit(GaussianProcessRegressor(RBF(), optimizer=None), x, y[:5])
    with pytest.raises(ValueError, match="n_targets"):
        rd.fit(GaussianProcessRegressor(RBF(), optimizer=None, n_targets=2), x, y)
    # fixed hyperparameters need no optimizer
    est = rd.fit(GaussianProcessRegressor(C(1.0, "fixed") * RBF(1.0, "fixed")), x, y)
    assert np.isfinite(est.log_marginal_likelihood_value_)


def test_fit_not_positive_definite_raises_linalgerror(client, rng):
    X = rng.uniform(0, 5, (30, 2))  # ExpSineSquared on 2-D input: not positive definite
    est = GaussianProcessRegressor(ExpSineSquared() + WhiteKernel(0.1), optimizer=None)
    with pytest.raises(np.linalg.LinAlgError, match="not returning a positive definite"):
        rd.fit(est, da.from_array(X, chunks=7), np.ones(30))


def _singular_kernel(n):
    x = np.linspace(0, 1, n)
    return np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.3 ** 2), np.sin(3 * x)


@pytest.mark.parametrize("chunk", [16, 60])
def test_auto_jitter_retries_inside_the_graph(client, chunk):
    K, y = _singular_kernel(60)  # numerically singular: a tile's POTRF fails without jitter
    with pytest.raises(NotPositiveDefiniteError):
        exact_gp_solve(da.from_array(K, chunks=chunk), y, jitter=None).alpha.compute()
    res = exact_gp_solve(da.from_array(K, chunks=chunk), y, jitter="auto")
    assert isinstance(res.jitter, da.Array) and res.jitter.shape == ()  # lazy
    L, alpha, used, logdet = dask.compute(res.L, res.alpha, res.jitter, res.logdet)
    assert 0 < float(used) < 1e-9
    D = L @ L.T - K  # the factor is of K + D, D diagonal, each entry 0 or at most `used`
    np.testing.assert_allclose(D - np.diag(np.diag(D)), 0, atol=1e-14)
    assert np.diag(D).max() <= float(used) + 1e-15
    Kd = K + np.diag(np.diag(D))
    np.testing.assert_allclose(Kd @ alpha, y, atol=1e-6)
    assert float(logdet) == pytest.approx(np.linalg.slogdet(Kd)[1], rel=1e-4)  # ill-conditioned


def test_auto_jitter_is_zero_when_not_needed_and_gives_up(client, rng):
    x = np.linspace(0, 1, 30)
    K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.2 ** 2) + 1e-2 * np.eye(30)
    res = exact_gp_solve(da.from_array(K, chunks=8), np.ones(30), jitter="auto")
    assert float(res.jitter) == 0.0
    ref = exact_gp_solve(K, np.ones(30))
    np.testing.assert_allclose(res.alpha.compute(), ref.alpha, rtol=1e-9)
    bad = exact_gp_solve(da.from_array(-np.eye(12), chunks=5), np.ones(12), jitter="auto")
    with pytest.raises(NotPositiveDefiniteError, match="even with jitter"):
        bad.alpha.compute()


def test_the_estimator_routes_dask_input_to_the_cluster(client, rng):
    """fit / predict of the public estimator with Dask input go the dispatcher's Dask route
    (backend "dask", lazy results); a model fitted in memory, or the prior, predicts a Dask X
    block by block, lazily."""
    import gpulinalg

    X, Y, Xq = _data(rng, n=40, m=11, t=2)
    kernel = RBF(0.9) + WhiteKernel(1e-2)
    est = GaussianProcessRegressor(kernel, optimizer=None)
    assert est.fit(da.from_array(X, chunks=(15, 2)), Y) is est
    assert gpulinalg.last_run().backend == "dask" and isinstance(est.L_, da.Array)
    mean = est.predict(Xq)
    assert gpulinalg.last_run().backend == "dask" and isinstance(mean, np.ndarray)
    lazy = est.predict(da.from_array(Xq, chunks=(4, 2)))
    assert isinstance(lazy, da.Array)
    ref = SkGPR(kernel, optimizer=None).fit(X, Y)
    np.testing.assert_allclose(mean, ref.predict(Xq), atol=1e-9)
    np.testing.assert_allclose(lazy.compute(), ref.predict(Xq), atol=1e-9)
    mem = GaussianProcessRegressor(kernel, optimizer=None).fit(X, Y)
    xq = da.from_array(Xq, chunks=(4, 2))
    for model, want in ((mem, ref), (GaussianProcessRegressor(kernel), SkGPR(kernel))):
        m, s = rd.predict(model, xq, return_std=True)
        assert isinstance(m, da.Array) and isinstance(s, da.Array)
        wm, ws = want.predict(Xq, return_std=True)
        np.testing.assert_allclose(m.compute(), wm, atol=1e-9)
        np.testing.assert_allclose(s.compute(), ws, atol=1e-9)
        np.testing.assert_allclose(rd.predict(model, xq).compute(), wm, atol=1e-9)
    _, cov = rd.predict(mem, xq, return_cov=True)
    np.testing.assert_allclose(cov, ref.predict(Xq, return_cov=True)[1], atol=1e-9)
