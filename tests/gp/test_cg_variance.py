"""``predict(return_std=True)`` on ``solver="cg"`` with LOVE variances
(``cg_options["variance"]``): the Lanczos factor against the Cholesky path, the ``"auto"``
rule, the cache on the fitted model (reused, dropped by a refit, not pickled), what
``last_run()`` reports, and the options' validation."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

import gpulinalg
from gpulinalg import ResidualWarning
from gpulinalg.gp import CGOptions, GaussianProcessRegressor
from gpulinalg.gp._love_xp import AUTO_MIN_QUERIES, lanczos_factor, variance_method

KERNELS = {
    "rbf-small-noise": (ConstantKernel(1.0) * RBF(0.2) + WhiteKernel(1e-4), 2),
    "matern": (ConstantKernel(1.0) * Matern([0.4, 0.6, 0.8], nu=2.5) + WhiteKernel(1e-2), 3),
}


def _data(n, m, d, seed=0):
    rng = np.random.default_rng(seed)
    x, xq = rng.uniform(0, 1, (n, d)), rng.uniform(0, 1, (m, d))
    y = np.sin(2 * np.pi * x @ np.linspace(0.2, 0.6, d)) + 0.1 * rng.standard_normal(n)
    return x, y, xq


def _cg(kernel, **options):
    return GaussianProcessRegressor(kernel, optimizer=None, solver="cg", cg_options=options)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_lanczos_std_against_cholesky(name, backend):
    """The factor's standard deviation within 1e-3 of the Cholesky path's, the mean that of
    the exact solves; the rank it reached, its check and its cost in ``last_run()``."""
    kernel, d = KERNELS[name]
    x, y, xq = _data(700, 300, d)
    exact = GaussianProcessRegressor(kernel, optimizer=None, normalize_y=True).fit(x, y)
    gp = _cg(kernel, variance="lanczos").set_params(normalize_y=True).fit(x, y)
    m_r, s_r = exact.predict(xq, return_std=True)
    m, s = gp.predict(xq, return_std=True)
    details = gpulinalg.last_run().details
    assert np.abs(s - s_r).max() <= 1e-3
    assert np.abs(m - m_r).max() <= 1e-4 * np.abs(y).max()
    np.testing.assert_array_equal(m, gp.predict(xq))
    assert details["variance"] == "lanczos" and details["variance_option"] == "lanczos"
    assert details["lanczos_check_passed"] and details["lanczos_check_error"] <= 1e-4
    assert 0 < details["lanczos_rank"] <= 700 and not details["lanczos_cached"]
    assert details["lanczos_steps"] >= 1 and details["lanczos_checks"] == 32
    assert details["lanczos_max_rank"] == 1024 and details["lanczos_tol"] == 1e-4


def test_factor_is_exact_on_the_whole_space_and_never_below():
    """Once the Krylov space is the whole space the factor is ``K^-1``; before, its quadratic
    forms are below the exact ones (variances above), and grow with the rank."""
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.standard_normal((120, 120)))
    K = (q * np.geomspace(1e-3, 10, 120)) @ q.T
    kc = K @ rng.standard_normal((120, 6))
    exact = (kc * np.linalg.solve(K, kc)).sum(axis=0)
    prior = exact + 1e-3
    full = lanczos_factor(lambda v: K @ v, kc, exact, prior, rank=500, tol=1e-9, seed=0)
    assert full.passed and full.rank <= 120
    np.testing.assert_allclose(full.R @ full.R.T, np.linalg.inv(K), atol=1e-6 * 1e3)
    low = [lanczos_factor(lambda v: K @ v, kc, exact, prior, rank=r, tol=1e-12, seed=0)
           for r in (32, 64)]
    q32, q64 = (f.quadratic(kc) for f in low)
    assert not low[0].passed and low[0].rank == 32
    assert (q32 <= q64 + 1e-12).all() and (q64 <= exact * (1 + 1e-12)).all()


def test_cache_is_reused_and_dropped_by_a_refit():
    kernel, d = KERNELS["rbf-small-noise"]
    x, y, xq = _data(500, 60, d, seed=2)
    gp = _cg(kernel, variance="lanczos").fit(x, y)
    assert gp._fitted.love is None  # built by the first predict that needs it
    gp.predict(xq[:5])
    assert gp._fitted.love is None
    _, s1 = gp.predict(xq, return_std=True)
    factor = gp._fitted.love
    assert factor is not None and not gpulinalg.last_run().details["lanczos_cached"]
    _, s2 = gp.predict(xq[::-1], return_std=True)
    details = gpulinalg.last_run().details
    assert gp._fitted.love is factor and details["lanczos_cached"]
    assert details["lanczos_rank"] == factor.rank and "lanczos_steps" in details
    np.testing.assert_allclose(s2[::-1], s1, rtol=0, atol=1e-13)
    gp.fit(x, 2 * y)
    assert gp._fitted.love is None
    gp.predict(xq, return_std=True)
    assert gp._fitted.love is not factor and not gpulinalg.last_run().details["lanczos_cached"]


def test_factor_is_not_pickled():
    kernel, d = KERNELS["rbf-small-noise"]
    x, y, xq = _data(400, 40, d, seed=3)
    gp = _cg(kernel, variance="lanczos").fit(x, y)
    _, s = gp.predict(xq, return_std=True)
    again = pickle.loads(pickle.dumps(gp))
    assert again._fitted.love is None
    _, s2 = again.predict(xq, return_std=True)
    np.testing.assert_allclose(s2, s, rtol=0, atol=1e-12)
    assert not gpulinalg.last_run().details["lanczos_cached"]


def test_auto_rule():
    assert variance_method("auto", AUTO_MIN_QUERIES - 1, None) == "exact"
    assert variance_method("auto", AUTO_MIN_QUERIES, None) == "lanczos"
    assert variance_method("auto", 1, True) == "lanczos"
    assert variance_method("auto", 10 ** 6, False) == "exact"
    assert variance_method("exact", 10 ** 6, True) == "exact"
    assert variance_method("lanczos", 1, None) == "lanczos"
    kernel, d = KERNELS["rbf-small-noise"]
    x, y, xq = _data(300, AUTO_MIN_QUERIES, d, seed=4)
    gp = _cg(kernel).fit(x, y)
    gp.predict(xq[:50], return_std=True)
    assert gpulinalg.last_run().details["variance"] == "exact" and gp._fitted.love is None
    _, s = gp.predict(xq, return_std=True)
    details = gpulinalg.last_run().details
    assert details["variance"] == "lanczos" and details["variance_option"] == "auto"
    _, small = gp.predict(xq[:50], return_std=True)  # cached: a small set takes it too
    assert gpulinalg.last_run().details["variance"] == "lanczos"
    np.testing.assert_allclose(small, s[:50], rtol=0, atol=1e-13)


def test_auto_takes_exact_solves_where_the_check_fails():
    """A rank too small for the tolerance: ``"auto"`` keeps no factor and solves exactly,
    now and in later calls, with no warning; ``"lanczos"`` keeps it and warns."""
    kernel, d = KERNELS["matern"]
    x, y, xq = _data(400, 80, d, seed=5)
    ref = GaussianProcessRegressor(kernel, optimizer=None).fit(x, y).predict(xq, return_std=True)
    gp = _cg(kernel, lanczos_rank=16, lanczos_tol=1e-6).fit(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, s = gp.predict(np.tile(xq, (AUTO_MIN_QUERIES // 80 + 1, 1)), return_std=True)
    details = gpulinalg.last_run().details
    assert details["variance"] == "exact" and not details["lanczos_check_passed"]
    assert details["lanczos_rank"] == 16 and gp._fitted.love.R is None
    assert np.abs(s[:80] - ref[1]).max() <= 1e-3
    gp.predict(np.tile(xq, (AUTO_MIN_QUERIES // 80 + 1, 1)), return_std=True)
    assert gpulinalg.last_run().details["variance"] == "exact"
    forced = _cg(kernel, variance="lanczos", lanczos_rank=16, lanczos_tol=1e-6).fit(x, y)
    with pytest.warns(ResidualWarning, match="lanczos_rank"):
        _, s16 = forced.predict(xq, return_std=True)
    assert gpulinalg.last_run().details["variance"] == "lanczos"
    assert (s16 >= ref[1] - 1e-6).all()  # a projection: variances from above


def test_return_cov_and_exact_take_solves():
    kernel, d = KERNELS["rbf-small-noise"]
    x, y, xq = _data(300, 20, d, seed=6)
    gp = _cg(kernel, variance="lanczos").fit(x, y)
    _, c = gp.predict(xq, return_cov=True)
    assert gpulinalg.last_run().details["variance"] == "exact" and gp._fitted.love is None
    _, s = gp.predict(xq, return_std=True)
    np.testing.assert_allclose(s, np.sqrt(np.maximum(np.diag(c), 0)), rtol=0, atol=1e-3)
    exact = _cg(kernel, variance="exact").fit(x, y)
    exact.predict(np.repeat(xq, AUTO_MIN_QUERIES // 20, axis=0), return_std=True)
    details = gpulinalg.last_run().details
    assert details["variance"] == "exact" and "lanczos_rank" not in details
    assert exact._fitted.love is None


@pytest.mark.parametrize("options, match", [
    ({"variance": "love"}, "variance"), ({"variance": None}, "variance"),
    ({"lanczos_rank": 0}, "lanczos_rank"), ({"lanczos_rank": 2.5}, "lanczos_rank"),
    ({"lanczos_rank": True}, "lanczos_rank"), ({"lanczos_tol": 0.0}, "lanczos_tol"),
    ({"lanczos_tol": 1.0}, "lanczos_tol"), ({"lanczos_tol": "1e-4"}, "lanczos_tol"),
])
def test_options_are_validated(options, match):
    with pytest.raises(ValueError, match=match):
        CGOptions(**options)
    kernel, d = KERNELS["rbf-small-noise"]
    x, y, _ = _data(30, 1, d)
    with pytest.raises(ValueError, match=match):
        GaussianProcessRegressor(kernel, solver="cg", cg_options=options).fit(x, y)
