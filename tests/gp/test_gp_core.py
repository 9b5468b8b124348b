"""gpulinalg.gp.exact_gp_solve and the jitter schedule."""

import warnings

import numpy as np
import pytest

import gpulinalg
from gpulinalg.gp import exact_gp_solve
from gpulinalg.gp._solve_xp import JITTER_START, JITTER_TRIES


def spd(rng, n, noise=1e-2):
    x = np.sort(rng.uniform(0, 1, n))
    return np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.2 ** 2) + noise * np.eye(n)


def check(res, K, y, strict=True):
    K = np.asarray(K, dtype=np.float64)
    n = K.shape[0]
    eps = np.finfo(np.float64).eps
    assert np.linalg.norm(res.L @ res.L.T - K) <= 30 * n * np.linalg.norm(K) * eps
    assert np.allclose(np.triu(res.L, 1), 0)
    y2 = y.reshape(n, -1)
    a2 = np.asarray(res.alpha).reshape(n, -1)
    assert np.linalg.norm(y2 - K @ a2) <= 30 * n * np.linalg.norm(K) * np.linalg.norm(a2) * eps
    if not strict:  # nearly singular: log-determinants of LU and Cholesky differ
        return
    logdet = np.linalg.slogdet(K)[1]
    assert np.isclose(res.logdet, logdet, rtol=1e-10)
    t = y2.shape[1]
    lml = -0.5 * (y2 * a2).sum() - 0.5 * t * logdet - 0.5 * t * n * np.log(2 * np.pi)
    assert np.isclose(res.log_marginal_likelihood, lml, rtol=1e-10)


@pytest.mark.parametrize("t", [None, 3])
def test_solve(t, backend, rng):
    K = spd(rng, 50)
    y = rng.standard_normal((50, t) if t else 50)
    K0, y0 = K.copy(), y.copy()
    res = exact_gp_solve(K, y)
    check(res, K, y)
    assert res.jitter == 0.0 and res.alpha.shape == y.shape
    assert np.array_equal(K, K0) and np.array_equal(y, y0)


def test_orders_and_views(rng):
    K = spd(rng, 40)
    y = rng.standard_normal(40)
    ref = exact_gp_solve(K, y)
    for Kv, yv in [(np.asfortranarray(K), y), (spd(rng, 80)[::2, ::2], y),
                   (K, np.repeat(y, 2)[::2])]:
        res = exact_gp_solve(Kv, yv)
        check(res, Kv, yv)
    np.testing.assert_allclose(exact_gp_solve(np.asfortranarray(K), y).alpha, ref.alpha)


def test_empty_and_one(rng):
    res = exact_gp_solve(np.zeros((0, 0)), np.zeros(0))
    assert res.alpha.shape == (0,) and res.L.shape == (0, 0) and res.log_marginal_likelihood == 0
    res = exact_gp_solve([[4.0]], [2.0])
    assert np.allclose(res.L, [[2.0]]) and np.allclose(res.alpha, [0.5])
    assert np.isclose(res.logdet, np.log(4.0))


def test_integer_input_is_float64():
    res = exact_gp_solve(np.array([[2, 1], [1, 2]]), np.array([1, 0]))
    assert res.alpha.dtype == np.float64


def test_float32_when_asked_warns(rng):
    K = spd(rng, 30, noise=1e-1).astype(np.float32)
    y = rng.standard_normal(30).astype(np.float32)
    with pytest.warns(gpulinalg.IllConditionedWarning, match="float32"):
        res = exact_gp_solve(K, y)
    assert res.alpha.dtype == np.float32 and res.L.dtype == np.float32
    np.testing.assert_allclose(res.alpha, exact_gp_solve(K.astype(float), y).alpha, rtol=1e-2,
                               atol=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert exact_gp_solve(K, y.astype(np.float64)).alpha.dtype == np.float64


def test_jitter_retries_then_succeeds(backend, rng):
    x = rng.standard_normal((10, 2))
    x = np.vstack([x, x])  # duplicated rows: exactly singular
    K = np.exp(-0.5 * ((x[:, None] - x[None]) ** 2).sum(-1)) - 1e-12 * np.eye(20)
    y = rng.standard_normal(20)  # K is indefinite by far more than rounding: every backend fails
    with pytest.warns(gpulinalg.IllConditionedWarning, match="jitter") as rec:
        res = exact_gp_solve(K, y)
    start = JITTER_START * np.finfo(np.float64).eps * np.mean(np.diag(K))
    tries = [w for w in rec if issubclass(w.category, gpulinalg.IllConditionedWarning)]
    assert len(tries) >= 2
    assert np.isclose(res.jitter, start * 10 ** (len(tries) - 1))
    check(res, K + res.jitter * np.eye(20), y, strict=False)
    assert np.isclose(res.logdet, 2 * np.log(np.diag(res.L)).sum())


def test_jitter_gives_up(rng):
    K = -np.eye(5)
    with pytest.warns(gpulinalg.IllConditionedWarning) as rec:
        with pytest.raises(gpulinalg.NotPositiveDefiniteError, match="jitter"):
            exact_gp_solve(K, np.ones(5))
    assert len([w for w in rec if "retrying" in str(w.message)]) == JITTER_TRIES


def test_jitter_fixed_and_none(rng):
    K = spd(rng, 20, noise=0.0)
    y = rng.standard_normal(20)
    res = exact_gp_solve(K, y, jitter=1e-3)
    assert res.jitter == 1e-3
    check(res, K + 1e-3 * np.eye(20), y)
    with pytest.raises(gpulinalg.NotPositiveDefiniteError):
        exact_gp_solve(-np.eye(3), np.ones(3), jitter=None)
    for bad in ("big", -1.0, np.nan):
        with pytest.raises(ValueError, match="jitter"):
            exact_gp_solve(K, y, jitter=bad)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_inf(bad, rng):
    K = spd(rng, 5)
    Kb = K.copy()
    Kb[1, 2] = bad
    with pytest.raises(ValueError, match="NaN"):
        exact_gp_solve(Kb, np.ones(5))
    with pytest.raises(ValueError, match="NaN"):
        exact_gp_solve(K, np.array([1, 2, bad, 4, 5.0]))


def test_bad_input():
    with pytest.raises(ValueError, match="square"):
        exact_gp_solve(np.ones((3, 2)), np.ones(3))
    with pytest.raises(ValueError, match="rows"):
        exact_gp_solve(np.eye(3), np.ones(4))
    with pytest.raises(ValueError):
        exact_gp_solve(np.eye(3), np.ones((3, 2, 2)))
    with pytest.raises(TypeError):
        exact_gp_solve(np.eye(2, dtype=complex), np.ones(2))
    with pytest.raises(TypeError):
        exact_gp_solve(np.array([["a"]]), np.ones(1))


def test_forced_oom_falls_back(fake_gpu, rng):
    from gpulinalg import testing
    K, y = spd(rng, 30), rng.standard_normal(30)
    ref = exact_gp_solve(K, y)
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(gpulinalg.FallbackWarning):
            res = exact_gp_solve(K, y)
        assert gpulinalg.last_run().fell_back
    np.testing.assert_allclose(res.alpha, ref.alpha)


def test_torch_round_trip(rng):
    torch = pytest.importorskip("torch")
    K, y = spd(rng, 10), rng.standard_normal(10)
    res = exact_gp_solve(torch.from_numpy(K), torch.from_numpy(y))
    assert isinstance(res.alpha, torch.Tensor) and isinstance(res.L, torch.Tensor)
    np.testing.assert_allclose(res.alpha.numpy(), exact_gp_solve(K, y).alpha)


@pytest.mark.gpu
def test_cupy_in_cupy_out(rng, xp_gpu):
    K, y = spd(rng, 600), rng.standard_normal(600)
    res = exact_gp_solve(xp_gpu.asarray(K), xp_gpu.asarray(y))
    assert isinstance(res.alpha, xp_gpu.ndarray) and isinstance(res.L, xp_gpu.ndarray)
    assert gpulinalg.last_run().backend == "gpu"
    check(type(res)(res.alpha.get(), res.L.get(), res.logdet, res.log_marginal_likelihood,
                    res.jitter), K, y)


@pytest.mark.parametrize("scale, y", [(1e-310, np.ones(3)), (1.0, np.full(3, 1e300))],
                         ids=["subnormal-K", "overflowing-lml"])
def test_non_finite_result_warns(backend, scale, y):
    """A K scaled to 1e-310 gives alpha = K^-1 y of inf/NaN; a y of 1e300 overflows y^T alpha:
    either is told by an IllConditionedWarning, never returned silently."""
    with pytest.warns(gpulinalg.IllConditionedWarning, match="is not finite") as rec:
        res = exact_gp_solve(np.eye(3) * scale, y, jitter=None)
    assert not np.isfinite(res.log_marginal_likelihood)
    assert rec[0].filename == __file__


def test_finite_result_does_not_warn(rng):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exact_gp_solve(spd(rng, 20), rng.standard_normal(20))


def test_dispatch_gets_the_callers_matrix_not_a_copy(monkeypatch):
    """Nothing K-sized is made before the dispatcher's memory check: the Op carries the
    caller's K as given (float32 here, computed in float64 with a float64 y), and the engine's
    working copy comes after."""
    from gpulinalg.gp import _solve_api
    real, seen = _solve_api.dispatch, []

    def spy(op, *args, **kwargs):
        seen.append(op.args[0])
        return real(op, *args, **kwargs)

    monkeypatch.setattr(_solve_api, "dispatch", spy)
    K = np.diag(np.full(500, 3.0, dtype=np.float32))
    y = np.ones(500)
    res = exact_gp_solve(K, y)
    assert seen[0] is K and res.alpha.dtype == np.float64
    np.testing.assert_allclose(res.alpha, y / 3.0, rtol=1e-12)
    np.testing.assert_array_equal(K, np.diag(np.full(500, 3.0, dtype=np.float32)))


@pytest.mark.parametrize("make", [
    lambda k: np.asfortranarray(k), lambda k: k.astype(np.float32),
    lambda k: np.round(k * 100).astype(np.int64), lambda k: np.broadcast_to(k, (2, *k.shape))[1],
], ids=["fortran", "float32-K", "int-K", "broadcast-view"])
def test_any_layout_and_dtype_of_K(rng, make):
    K = make(spd(rng, 30, noise=1.0))
    before = np.array(K, copy=True)
    y = rng.standard_normal(30)
    res = exact_gp_solve(K, y)
    Kd = np.asarray(K, dtype=res.alpha.dtype)
    assert np.linalg.norm(Kd @ res.alpha - y) <= 1e-8 * np.linalg.norm(y) * np.linalg.cond(Kd)
    np.testing.assert_array_equal(K, before)
