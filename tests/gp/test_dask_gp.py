"""``gp.exact_gp_solve`` with a Dask kernel matrix (issue 17): routed by the dispatcher to
decomp's blocked Cholesky (``last_run().backend == "dask"``), lazy until computed, equal to the
NumPy path once computed; and ``gpulinalg info`` reporting the Dask cluster it sees. On a
2-worker CPU ``LocalCluster`` with NumPy chunks."""

import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")

import dask  # noqa: E402

import gpulinalg  # noqa: E402
from gpulinalg import NotPositiveDefiniteError, _info  # noqa: E402
from gpulinalg.gp import exact_gp_solve  # noqa: E402


def _kernel(rng, n):
    x = np.sort(rng.uniform(0, 1, n))
    return np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.2 ** 2) + 1e-2 * np.eye(n)


@pytest.mark.parametrize("n, chunk, t", [(37, 8, None), (37, 37, None), (50, 13, 3)])
def test_dask_K_matches_the_numpy_path(client, rng, n, chunk, t):
    K = _kernel(rng, n)
    y = rng.standard_normal(n if t is None else (n, t))
    ref = exact_gp_solve(K, y)
    res = exact_gp_solve(da.from_array(K, chunks=chunk), y)
    assert gpulinalg.last_run().backend == "dask"
    assert isinstance(res.alpha, da.Array) and isinstance(res.L, da.Array)
    assert isinstance(res.logdet, da.Array) and res.logdet.shape == ()
    assert isinstance(res.log_marginal_likelihood, da.Array) and res.jitter == 0.0
    alpha, L, logdet, lml = dask.compute(res.alpha, res.L, res.logdet,
                                         res.log_marginal_likelihood)
    np.testing.assert_allclose(alpha, ref.alpha, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(L, ref.L, rtol=1e-10, atol=1e-12)
    assert float(logdet) == pytest.approx(ref.logdet, rel=1e-10)
    assert float(lml) == pytest.approx(ref.log_marginal_likelihood, rel=1e-10)


def test_dask_y_and_a_fixed_jitter(client, rng):
    n = 29
    K = _kernel(rng, n)
    y = rng.standard_normal(n)
    ref = exact_gp_solve(K, y, jitter=1e-3)
    res = exact_gp_solve(da.from_array(K, chunks=10), da.from_array(y, chunks=7), jitter=1e-3)
    assert res.jitter == 1e-3 == ref.jitter
    np.testing.assert_allclose(res.alpha.compute(), ref.alpha, rtol=1e-8)
    assert float(res.log_marginal_likelihood) == pytest.approx(ref.log_marginal_likelihood,
                                                               rel=1e-10)


_calls = []


def _counted(block):
    _calls.append(1)
    return block


def test_nothing_is_computed_by_the_call(client, rng):
    n = 30
    K = da.from_array(_kernel(rng, n), chunks=11)
    K = K.map_blocks(_counted, dtype=K.dtype, meta=np.empty((0, 0)))
    _calls.clear()
    res = exact_gp_solve(K, rng.standard_normal(n))
    assert _calls == [] and gpulinalg.last_run().backend == "dask"
    res.alpha.compute()
    assert _calls


def test_not_positive_definite_raises_when_computed(client, rng):
    K = -np.eye(12)
    res = exact_gp_solve(da.from_array(K, chunks=5), np.ones(12))  # "auto": retries fail too
    with pytest.raises(NotPositiveDefiniteError):
        res.alpha.compute()


def test_lazy_checks(client, rng):
    with pytest.raises(ValueError, match="tiled alike"):
        exact_gp_solve(da.from_array(np.eye(10), chunks=(5, 10)), np.ones(10))
    with pytest.raises(ValueError, match="rows"):
        exact_gp_solve(da.from_array(np.eye(10), chunks=5), np.ones(9))
    with pytest.raises(ValueError, match="jitter"):
        exact_gp_solve(da.from_array(np.eye(10), chunks=5), np.ones(10), jitter=-1.0)


def test_info_reports_the_cluster(client):
    report = _info.collect()
    cluster = report["dask_cluster"]
    assert cluster["workers"] == 2 and cluster["threads"] == 2
    assert cluster["scheduler"] == client.scheduler.address
    assert "Dask cluster: " + cluster["scheduler"] + ", 2 workers" in _info.format_text(report)


def test_info_imports_no_dask():
    code = ("import sys, json; from gpulinalg import _info; r = _info.collect(); "
            "print(r['dask_cluster'], 'dask' in sys.modules, 'distributed' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "False", "False"]
