"""Blocked Cholesky, cho_solve and logdet of Dask arrays (the engines, called directly; the
public functions are tested in test_dask_api.py), and ``gpulinalg.distributed``, on a 2-worker
CPU cluster with NumPy chunks, against SciPy."""

import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
scipy_linalg = pytest.importorskip("scipy.linalg")

import gpulinalg  # noqa: E402
from gpulinalg.decomp.cholesky import _cholesky_dask as chol  # noqa: E402



def _spd(rng, n, dtype):
    g = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        g = g + 1j * rng.standard_normal((n, n))
    return (g @ g.conj().T + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("n, tile", [(23, 23), (29, 7)])
def test_cholesky_solve_logdet_match_scipy(client, rng, dtype, lower, n, tile):
    a = _spd(rng, n, dtype)
    x = da.from_array(a, chunks=tile)
    c = chol.cholesky(x, lower)
    pair = chol.cho_factor(x, lower)
    b = rng.standard_normal((n, 3)).astype(dtype)
    sol = chol.cho_solve(pair, da.from_array(b, chunks=(11, 2)))
    vec = chol.cho_solve(pair, da.from_array(b[:, 0], chunks=5))
    ld = chol.logdet_cholesky(pair)
    for r in (c, sol, vec, ld):
        assert isinstance(r, da.Array) and type(r._meta) is np.ndarray
    assert c.chunks == x.chunks
    cc, xs, xv, ldc = client.compute([c, sol, vec, ld], sync=True)
    eps = np.finfo(dtype).eps
    ref = scipy_linalg.cholesky(a, lower=lower)
    assert cc.dtype == dtype
    assert np.linalg.norm(cc - ref) / (n * np.linalg.norm(a) * eps) <= 30
    anorm = np.linalg.norm(a, 2)
    for xx, bb in ((xs, b), (xv, b[:, 0])):
        assert np.linalg.norm(bb - a @ xx) / (anorm * np.linalg.norm(xx) * eps) <= 30 * n
    assert abs(float(ldc) - np.linalg.slogdet(a.astype(np.complex128))[1]) <= 1e3 * n * eps
    assert np.asarray(ldc).dtype == np.empty(0, dtype).real.dtype


def test_reads_only_the_named_triangle(client, rng):
    a = _spd(rng, 20, np.float64)
    junk = a + np.triu(np.full_like(a, 7.0), 1)  # upper triangle spoiled
    c = chol.cholesky(da.from_array(junk, chunks=6), lower=True).compute()
    np.testing.assert_allclose(c, np.linalg.cholesky(a), atol=1e-12)


def test_not_positive_definite_names_the_minor_of_the_whole_matrix(client):
    a = np.eye(30)
    a[17, 17] = -1.0
    c = chol.cholesky(da.from_array(a, chunks=10))  # nothing raises while building
    with pytest.raises(gpulinalg.NotPositiveDefiniteError) as info:
        c.compute()
    assert info.value.minor == 18


def test_lazy_until_computed(client, rng):
    a = _spd(rng, 12, np.float64)
    c = chol.cholesky(da.from_array(a, chunks=4))
    assert len(c.dask.layers) >= 2 and c.dask.dependencies  # a graph, nothing computed


def test_empty_matrix(client):
    x = da.from_array(np.zeros((0, 0)), chunks=5)
    c = chol.cholesky(x)
    assert c.compute().shape == (0, 0)
    assert float(chol.logdet_cholesky((c, True)).compute()) == 0.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="square"):
        chol.cholesky(da.ones((4, 5), chunks=2))
    with pytest.raises(ValueError, match="tiled alike"):
        chol.cholesky(da.ones((6, 6), chunks=(3, 2)))
    with pytest.raises(TypeError, match="pair"):
        chol.cho_solve(da.ones((4, 4), chunks=2), da.ones(4, chunks=2))
    with pytest.raises(ValueError, match="b must be"):
        chol.cho_solve((da.eye(4, chunks=2), True), da.ones(5, chunks=2))


def test_local_cluster_and_cluster_info(client):
    from gpulinalg.distributed import cluster_info, local_cluster
    info = cluster_info(client)
    assert info["workers"] == 2 and info["threads"] == 2 and info["gpus"] == 0
    assert cluster_info() is not None  # the fixture's client is the current one
    if gpulinalg.gpu_available():
        pytest.skip("the CPU branch of local_cluster")
    with local_cluster(n_workers=1, threads_per_worker=1, processes=False,
                       dashboard_address=":0") as cluster:
        assert type(cluster).__name__ == "LocalCluster"
    with pytest.raises(gpulinalg.GPUUnavailableError):
        local_cluster(gpu=True)


def test_import_gpulinalg_imports_no_dask():
    code = ("import sys, gpulinalg, gpulinalg.decomp; "
            "assert not any(m == 'dask' or m.startswith(('dask.', 'distributed', 'dask_cuda')) "
            "for m in sys.modules), sorted(m for m in sys.modules if 'dask' in m)")
    subprocess.run([sys.executable, "-c", code], check=True)
