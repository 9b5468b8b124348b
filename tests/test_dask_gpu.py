"""The Dask engines on CuPy chunks under ``dask_cuda.LocalCUDACluster`` (one worker per GPU):
the GPU half of issue 17's tests. Skips without a GPU or dask_cuda; run on the device machine."""

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import gpulinalg  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_client():
    if not gpulinalg.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    pytest.importorskip("dask_cuda")
    from gpulinalg.distributed import local_cluster
    with local_cluster(gpu=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def _cupy_chunks(a, chunks):
    import cupy
    return da.from_array(cupy.asarray(a), chunks=chunks, asarray=False)


def _is_cupy(x):
    import cupy
    return isinstance(x, cupy.ndarray)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_tsqr_on_cupy_chunks(cuda_client, dtype):
    from gpulinalg.decomp import _tsqr_dask as t
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4000, 16)).astype(dtype)
    x = _cupy_chunks(a, (700, 16))
    q, r = t.qr(x)
    u, s, vh = t.svd(x)
    for res in (q, r, u, s, vh):
        assert _is_cupy(res._meta)
    qc, rc, uc, sc, vhc = cuda_client.compute([q, r, u, s, vh], sync=True)
    assert all(_is_cupy(v) for v in (qc, rc, uc, sc, vhc))
    tol = 100 * np.finfo(dtype).eps * np.linalg.norm(a)
    assert float(abs(qc @ rc - x.compute()).max()) <= tol
    np.testing.assert_allclose(sc.get(), np.linalg.svd(a, compute_uv=False), rtol=1e-4)


def test_randomized_svd_on_cupy_chunks(cuda_client):
    from gpulinalg.decomp import _randomized_dask as r
    rng = np.random.default_rng(1)
    u, _ = np.linalg.qr(rng.standard_normal((3000, 30)))
    v, _ = np.linalg.qr(rng.standard_normal((500, 30)))
    s = 0.6 ** np.arange(30)
    a = (u * s) @ v.T
    x = _cupy_chunks(a, (700, 200))
    res = r.randomized_svd(x, 5, random_state=0, error_estimate=True)
    assert all(_is_cupy(v._meta) for v in res[:3])
    U, S, Vh, err = cuda_client.compute(list(res), sync=True)
    assert _is_cupy(U) and _is_cupy(S) and _is_cupy(Vh)
    np.testing.assert_allclose(S.get(), s[:5], rtol=1e-10)
    cpu = r.randomized_svd(da.from_array(a, chunks=(700, 200)), 5, random_state=0)
    np.testing.assert_allclose(Vh.get(), cpu.Vh.compute(scheduler="sync"), atol=1e-8)  # same Omega


def test_pca_on_cupy_chunks(cuda_client):
    from gpulinalg.decomp import _randomized_dask as r
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2000, 50)) @ np.diag(0.8 ** np.arange(50)) + 4.0
    out = r.pca(_cupy_chunks(a, (500, 25)), 3, random_state=0, iterated_power=6)
    comp, mean = cuda_client.compute([out["components"], out["mean"]], sync=True)
    assert _is_cupy(comp) and _is_cupy(mean)
    np.testing.assert_allclose(mean.get(), a.mean(axis=0), atol=1e-12)


def test_blocked_cholesky_on_cupy_tiles(cuda_client):
    from gpulinalg.decomp import _cholesky_dask as c
    rng = np.random.default_rng(3)
    g = rng.standard_normal((1000, 1000))
    a = g @ g.T + 1000 * np.eye(1000)
    x = _cupy_chunks(a, 256)
    pair = c.cho_factor(x, True)
    b = rng.standard_normal((1000, 2))
    sol = c.cho_solve(pair, _cupy_chunks(b, (256, 2)))
    L, xs, ld = cuda_client.compute([pair[0], sol, c.logdet_cholesky(pair)], sync=True)
    assert _is_cupy(L) and _is_cupy(xs)
    np.testing.assert_allclose(L.get(), np.linalg.cholesky(a), atol=1e-8)
    np.testing.assert_allclose(a @ xs.get(), b, atol=1e-8)
    assert abs(float(ld) - np.linalg.slogdet(a)[1]) < 1e-8


def test_not_positive_definite_on_cupy_tiles(cuda_client):
    from gpulinalg.decomp import _cholesky_dask as c
    a = np.eye(600)
    a[400, 400] = -1
    with pytest.raises(gpulinalg.NotPositiveDefiniteError) as info:
        c.cholesky(_cupy_chunks(a, 256)).compute()
    assert info.value.minor == 401
