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
    from gpulinalg.decomp.qr import _tsqr_dask as t
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
    from gpulinalg.decomp.lowrank import _randomized_dask as r
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
    from gpulinalg.decomp.lowrank import _randomized_dask as r
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2000, 50)) @ np.diag(0.8 ** np.arange(50)) + 4.0
    out = r.pca(_cupy_chunks(a, (500, 25)), 3, random_state=0, iterated_power=6)
    comp, mean, ratio = cuda_client.compute(
        [out["components"], out["mean"], out["explained_variance_ratio"]], sync=True)
    assert _is_cupy(comp) and _is_cupy(mean)
    np.testing.assert_allclose(mean.get(), a.mean(axis=0), atol=1e-12)
    s = np.linalg.svd(a - a.mean(axis=0), compute_uv=False)  # moments of the first pass
    np.testing.assert_allclose(ratio.get(), s[:3] ** 2 / (s ** 2).sum(), rtol=1e-6)


def test_blocked_cholesky_on_cupy_tiles(cuda_client):
    from gpulinalg.decomp.cholesky import _cholesky_dask as c
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


@pytest.mark.parametrize("dtype, lower", [(np.complex128, False)])
def test_panel_cholesky_dtypes_and_triangles(cuda_client, dtype, lower):
    """The panel kernels (HERK/SYRK, GEMM and TRSM in the C-ordered frame) with odd tiles."""
    from gpulinalg.decomp.cholesky import _cholesky_dask as c
    rng = np.random.default_rng(4)
    g = rng.standard_normal((700, 700)) + (1j * rng.standard_normal((700, 700))
                                           if np.dtype(dtype).kind == "c" else 0)
    a = (g @ g.conj().T + 700 * np.eye(700)).astype(dtype)
    f = cuda_client.compute(c.cholesky(_cupy_chunks(a, 256), lower), sync=True).get()
    hi = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    ref = np.linalg.cholesky(a.astype(hi))
    ref = ref if lower else ref.conj().T
    tol = 2e-4 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(f, ref, atol=tol * np.abs(ref).max())


def test_not_positive_definite_on_cupy_tiles(cuda_client):
    from gpulinalg.decomp.cholesky import _cholesky_dask as c
    a = np.eye(600)
    a[400, 400] = -1
    with pytest.raises(gpulinalg.NotPositiveDefiniteError) as info:
        c.cholesky(_cupy_chunks(a, 256)).compute()
    assert info.value.minor == 401


# -- the public functions on CuPy chunks against the single-GPU call on the same CuPy array --

def _dask_run(*xs):
    assert all(isinstance(x, da.Array) and _is_cupy(x._meta) for x in xs)
    assert gpulinalg.last_run().backend == "dask"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_public_qr_svd_tall(cuda_client, dtype):
    import cupy
    from gpulinalg import decomp
    rng = np.random.default_rng(10)
    a = rng.standard_normal((20000, 64)).astype(dtype)
    ag = cupy.asarray(a)
    x = _cupy_chunks(a, (3000, 64))
    q, r = decomp.qr(x, mode="economic")
    u, s, vh = decomp.svd(x, full_matrices=False)
    _dask_run(q, r, u, s, vh)
    q, r, u, s, vh = cuda_client.compute([q, r, u, s, vh], sync=True)
    assert all(_is_cupy(v) for v in (q, r, u, s, vh))
    ref_r = decomp.qr(ag, mode="economic")[1]
    phase = cupy.diag(ref_r) / abs(cupy.diag(ref_r))
    tol = 2e-3 if dtype == np.float32 else 1e-9
    assert float(abs(r - phase.conj()[:, None] * ref_r).max()) <= tol * float(abs(ref_r).max())
    ref = decomp.svd(ag, full_matrices=False)
    assert float(abs(s - ref.S).max()) <= tol * float(ref.S[0])
    assert float(abs(vh - ref.Vh).max()) <= 100 * tol  # the same deterministic signs
    assert float(abs((q @ r) - ag).max()) <= 100 * tol


def _low_rank(rng, m, n, r=40):
    u, _ = np.linalg.qr(rng.standard_normal((m, r)))
    v, _ = np.linalg.qr(rng.standard_normal((n, r)))
    return (u * 0.7 ** np.arange(r)) @ v.T


def test_public_truncated_svd_and_pca(cuda_client):
    import cupy
    from gpulinalg import decomp
    rng = np.random.default_rng(11)
    a = _low_rank(rng, 6000, 800)
    ag = cupy.asarray(a)
    x = _cupy_chunks(a, (1500, 400))
    res = decomp.truncated_svd(x, 5, random_state=0, n_iter=4)
    _dask_run(*res)
    U, S, Vh = cuda_client.compute(list(res), sync=True)
    ref = decomp.truncated_svd(ag, 5, method="randomized", random_state=0, n_iter=4)
    np.testing.assert_allclose(S.get(), cupy.asnumpy(ref.S), rtol=1e-9)
    np.testing.assert_allclose(Vh.get(), cupy.asnumpy(ref.Vh), atol=1e-7)
    X = a * 50 + 3.0
    pca = decomp.PCA(5, random_state=0, iterated_power=6).fit(_cupy_chunks(X, (1500, 400)))
    assert gpulinalg.last_run().backend == "dask" and _is_cupy(pca.components_)
    one = decomp.PCA(5, svd_solver="randomized", random_state=0, iterated_power=6).fit(
        cupy.asarray(X))
    np.testing.assert_allclose(pca.explained_variance_.get(),
                               cupy.asnumpy(one.explained_variance_), rtol=1e-8)
    np.testing.assert_allclose(pca.components_.get(), cupy.asnumpy(one.components_), atol=1e-7)
    z = pca.transform(_cupy_chunks(X, (1500, 400)))
    _dask_run(z)
    np.testing.assert_allclose(z.compute().get(), cupy.asnumpy(one.transform(cupy.asarray(X))),
                               atol=1e-6 * float(abs(X).max()))


def test_public_cholesky_cho_solve_logdet(cuda_client):
    import cupy
    from gpulinalg import decomp
    rng = np.random.default_rng(12)
    g = rng.standard_normal((2048, 2048))
    a = g @ g.T + 2048 * np.eye(2048)
    ag = cupy.asarray(a)
    x = _cupy_chunks(a, 512)
    b = rng.standard_normal((2048, 3))
    L = decomp.cholesky(x, lower=True)
    cf = decomp.cho_factor(x, lower=True)
    sol = decomp.cho_solve(cf, _cupy_chunks(b, (512, 3)))
    ld = decomp.logdet_cholesky(cf)
    _dask_run(L, sol, ld)
    L, sol, ld = cuda_client.compute([L, sol, ld], sync=True)
    ref_l = decomp.cholesky(ag, lower=True)
    ref_cf = decomp.cho_factor(ag, lower=True)
    assert float(abs(L - ref_l).max()) <= 1e-10 * float(abs(ref_l).max())
    assert float(abs(sol - decomp.cho_solve(ref_cf, cupy.asarray(b))).max()) <= 1e-10
    assert float(ld) == pytest.approx(float(decomp.logdet_cholesky(ref_cf)), rel=1e-12)


def _rbf(n, ls=0.05, noise=1e-2, seed=13):
    x = np.sort(np.random.default_rng(seed).uniform(0, 1, n))
    return np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / ls ** 2) + noise * np.eye(n), \
        np.sin(6 * x)


def test_public_exact_gp_solve(cuda_client):
    import cupy
    from gpulinalg.gp import exact_gp_solve
    K, y = _rbf(3000)
    res = exact_gp_solve(_cupy_chunks(K, 750), _cupy_chunks(y, 750))
    _dask_run(res.alpha, res.L)
    alpha, lml = cuda_client.compute([res.alpha, res.log_marginal_likelihood], sync=True)
    ref = exact_gp_solve(cupy.asarray(K), cupy.asarray(y))
    assert _is_cupy(alpha)
    assert float(abs(alpha - ref.alpha).max()) <= 1e-8 * float(abs(ref.alpha).max())
    assert float(lml) == pytest.approx(float(ref.log_marginal_likelihood), rel=1e-10)
    Ks, ys = _rbf(400, ls=0.3, noise=0.0)  # numerically singular: a tile retries with jitter
    auto = exact_gp_solve(_cupy_chunks(Ks, 128), ys, jitter="auto")
    L, a2, used = cuda_client.compute([auto.L, auto.alpha, auto.jitter], sync=True)
    assert 0 < float(used) < 1e-8
    D = (L @ L.T).get() - Ks
    np.testing.assert_allclose(D - np.diag(np.diag(D)), 0, atol=1e-12)
    with pytest.raises(gpulinalg.NotPositiveDefiniteError):
        exact_gp_solve(_cupy_chunks(Ks, 128), ys, jitter=None).alpha.compute()


def test_regressor_fit_predict_on_cupy_chunks(cuda_client):
    from sklearn.gaussian_process import GaussianProcessRegressor as SkGPR
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    from gpulinalg.gp import GaussianProcessRegressor
    from gpulinalg.gp import _regressor_dask as rd
    rng = np.random.default_rng(14)
    X = rng.uniform(0, 5, (1500, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(1500)
    Xq = rng.uniform(0, 5, (200, 3))
    kernel = 1.5 * RBF([1.0, 2.0, 3.0]) + WhiteKernel(1e-2)
    ref = SkGPR(kernel, optimizer=None, normalize_y=True).fit(X, y)
    est = rd.fit(GaussianProcessRegressor(kernel, optimizer=None, normalize_y=True),
                 _cupy_chunks(X, (400, 3)), y)
    assert _is_cupy(est.L_._meta) and _is_cupy(est.alpha_._meta)
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=1e-9)
    mean, std = rd.predict(est, _cupy_chunks(Xq, (64, 3)), return_std=True)
    assert _is_cupy(mean._meta)
    mean, std = cuda_client.compute([mean, std], sync=True)
    mr, sr = ref.predict(Xq, return_std=True)
    np.testing.assert_allclose(mean.get(), mr, atol=1e-8)
    np.testing.assert_allclose(std.get(), sr, atol=1e-8)


@pytest.mark.parametrize("driver", [None, "gelsy"])
def test_public_lstsq_and_solve_pos(cuda_client, driver):
    """``lstsq`` (one TSQR of ``[a | b]``, the root on decomp's GPU engine) and
    ``solve(assume_a="pos")`` (the blocked Cholesky) on CuPy chunks match the single-GPU calls."""
    import cupy
    from gpulinalg import decomp
    rng = np.random.default_rng(14)
    a, b = rng.standard_normal((20000, 64)), rng.standard_normal((20000, 3))
    res = decomp.lstsq(_cupy_chunks(a, (2500, 64)), _cupy_chunks(b, (2500, 3)),
                       lapack_driver=driver)
    _dask_run(res.x, res.rank)
    x, rank = cuda_client.compute([res.x, res.rank], sync=True)
    assert _is_cupy(x)
    ref = decomp.lstsq(cupy.asarray(a), cupy.asarray(b), lapack_driver=driver)
    assert float(abs(x - ref.x).max()) <= 1e-10 * float(abs(ref.x).max())
    assert int(rank) == 64
    g = rng.standard_normal((1024, 1024))
    spd = g @ g.T + 1024 * np.eye(1024)
    sol = decomp.solve(_cupy_chunks(spd, 256), _cupy_chunks(b[:1024], (256, 3)), assume_a="pos")
    _dask_run(sol)
    got = cuda_client.compute(sol, sync=True)
    assert _is_cupy(got)
    assert float(abs(got - cupy.asarray(np.linalg.solve(spd, b[:1024]))).max()) <= 1e-10
