"""The public functions with Dask arrays (issue 17): ``decomp.qr``, ``svd``, ``cholesky``,
``cho_factor``, ``cho_solve``, ``logdet_cholesky``, ``truncated_svd`` and ``PCA`` route a
``dask.array.Array`` to the Dask engines through the dispatcher (``last_run().backend ==
"dask"``), return lazy Dask arrays, and match NumPy/SciPy/scikit-learn once computed; on a
2-worker CPU ``LocalCluster`` with NumPy chunks."""

import numpy as np
import pytest
import scipy.linalg as sla

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")

import dask  # noqa: E402
import gpulinalg  # noqa: E402
from gpulinalg import decomp  # noqa: E402


def _lazy(*xs):
    assert all(isinstance(x, da.Array) for x in xs)
    assert gpulinalg.last_run().backend == "dask"


def _spd(rng, n, dtype=np.float64):
    z = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n))
                                       if np.dtype(dtype).kind == "c" else 0)
    return (z @ z.conj().T + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("dtype, chunks", [(np.float64, (23, 7)), (np.complex128, (100, 7)),
                                           (np.float32, (41, 7))])
def test_qr(client, rng, dtype, chunks):
    a = (rng.standard_normal((100, 7)) + (1j * rng.standard_normal((100, 7))
                                          if np.dtype(dtype).kind == "c" else 0)).astype(dtype)
    x = da.from_array(a, chunks=chunks)
    q, r = decomp.qr(x, mode="economic")
    _lazy(q, r)
    (r_only,) = decomp.qr(x, mode="r")
    _lazy(r_only)
    q, r, r_only = client.compute([q, r, r_only], sync=True)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(q @ r, a, atol=tol * 10)
    np.testing.assert_allclose(q.conj().T @ q, np.eye(7), atol=tol)
    ref = sla.qr(a, mode="economic")[1]
    phase = np.diag(ref) / np.abs(np.diag(ref))
    np.testing.assert_allclose(r, phase.conj()[:, None] * ref, atol=tol * 10)
    np.testing.assert_allclose(r_only, r, atol=tol)
    assert q.dtype == dtype and r.dtype == dtype


def test_qr_refuses_what_dask_cannot_do(client, rng):
    x = da.from_array(rng.standard_normal((60, 6)), chunks=(20, 6))
    with pytest.raises(ValueError, match="mode='economic'"):
        decomp.qr(x)  # SciPy's default mode="full": an m x m Q
    with pytest.raises(ValueError, match="one column of blocks"):
        decomp.qr(x.rechunk((20, 3)), mode="economic")
    with pytest.raises(ValueError, match="pivoting"):
        decomp.qr(x, mode="economic", pivoting=True)
    with pytest.raises(ValueError, match="batches"):
        decomp.qr(da.zeros((2, 6, 3), chunks=2), mode="economic")
    wide = rng.standard_normal((4, 9))  # full == economic when m <= n
    q, r = decomp.qr(da.from_array(wide, chunks=(2, 9)))
    np.testing.assert_allclose(q.compute() @ r.compute(), wide, atol=1e-12)


@pytest.mark.parametrize("shape, chunks", [((90, 6), (17, 6)), ((6, 90), (6, 17)),
                                           ((40, 40), (40, 40))])
def test_svd(client, rng, shape, chunks):
    a = rng.standard_normal(shape)
    x = da.from_array(a, chunks=chunks)
    u, s, vh = decomp.svd(x, full_matrices=False)
    _lazy(u, s, vh)
    u, s, vh = client.compute([u, s, vh], sync=True)
    ref = decomp.svd(a, full_matrices=False)
    np.testing.assert_allclose(s, ref.S, rtol=1e-10)
    np.testing.assert_allclose(vh, ref.Vh, atol=1e-9)  # the same deterministic signs
    np.testing.assert_allclose((u * s) @ vh, a, atol=1e-10)
    values = decomp.svd(x, compute_uv=False)  # full_matrices is not read without U and Vh
    _lazy(values)
    np.testing.assert_allclose(values.compute(), ref.S, rtol=1e-10)


def test_svd_refuses_full_matrices_and_both_way_chunks(client, rng):
    x = da.from_array(rng.standard_normal((60, 6)), chunks=(20, 6))
    with pytest.raises(ValueError, match="full_matrices=False"):
        decomp.svd(x)
    with pytest.raises(ValueError, match="one column of blocks.*one row of blocks"):
        decomp.svd(x.rechunk((20, 3)), full_matrices=False)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_family(client, rng, dtype, lower):
    a = _spd(rng, 23, dtype)
    x = da.from_array(a, chunks=7)
    c = decomp.cholesky(x, lower=lower)
    _lazy(c)
    np.testing.assert_allclose(c.compute(), sla.cholesky(a, lower=lower), atol=1e-10)
    cf = decomp.cho_factor(x, lower=lower)
    _lazy(cf[0])
    assert cf[1] is lower
    b = rng.standard_normal((23, 3))
    for rhs, ref in ((da.from_array(b, chunks=(5, 2)), b), (b, b), (b[:, 0], b[:, 0])):
        sol = decomp.cho_solve(cf, rhs)
        _lazy(sol)
        np.testing.assert_allclose(sol.compute(), np.linalg.solve(a, ref), atol=1e-10)
    ld = decomp.logdet_cholesky(cf)
    _lazy(ld)
    assert ld.shape == ()
    np.testing.assert_allclose(float(ld.compute()), np.linalg.slogdet(a)[1], rtol=1e-12)


@pytest.mark.parametrize("group", [1, 2, 3, 99])
@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_blocks_of_any_height_agree(rng, monkeypatch, group, lower):
    """Blocks of one tile (the finest graph) up to whole columns give the same factor, with a
    ragged last tile and the jittered variant's retries."""
    from gpulinalg.decomp.cholesky import _cholesky_dask
    monkeypatch.setattr(_cholesky_dask, "row_group", lambda t, workers=None: group)
    a = _spd(rng, 37)
    x = da.from_array(a, chunks=5)
    c = decomp.cholesky(x, lower=lower).compute(scheduler="sync")
    np.testing.assert_allclose(c, sla.cholesky(a, lower=lower), atol=1e-10)
    shifted = a - (np.linalg.eigvalsh(a)[0] + 1e-3) * np.eye(37)  # indefinite by a little
    low, jit = _cholesky_dask.cholesky_jitter(da.from_array(shifted, chunks=5), 1e-6, 8)
    low, jit = dask.compute(low, jit, scheduler="sync")
    assert 0 < float(jit)
    assert np.abs(np.tril(low) - low).max() == 0
    residual = low @ low.T - shifted
    assert np.abs(residual - np.diag(np.diag(residual))).max() < 1e-9  # L L^T = a + D


def test_row_group_whole_columns_for_one_worker_single_tiles_for_more():
    from gpulinalg.decomp.cholesky._cholesky_dask import row_group
    assert [row_group(8, w) for w in (0, 1, 2, 4, 16)] == [8, 8, 1, 1, 1]
    assert row_group(0, 1) == 1


def test_row_group_reads_the_client(client):
    from gpulinalg.decomp.cholesky._cholesky_dask import row_group
    assert sum(client.nthreads().values()) == 2 and row_group(12) == 1
    assert row_group(12, 1) == 12


def test_cho_solve_with_a_numpy_factor_and_a_dask_rhs(client, rng):
    a = _spd(rng, 12)
    b = rng.standard_normal(12)
    sol = decomp.cho_solve(sla.cho_factor(a, lower=True), da.from_array(b, chunks=5))
    _lazy(sol)
    np.testing.assert_allclose(sol.compute(), np.linalg.solve(a, b), atol=1e-10)


def test_cholesky_checks_lazily(client, rng):
    with pytest.raises(ValueError, match="square"):
        decomp.cholesky(da.zeros((6, 5), chunks=3))
    with pytest.raises(ValueError, match="tiled alike"):
        decomp.cholesky(da.from_array(_spd(rng, 10), chunks=(5, 4)))
    bad = da.from_array(-np.eye(6), chunks=3)
    c = decomp.cholesky(bad, lower=True)  # nothing computed yet
    with pytest.raises(gpulinalg.NotPositiveDefiniteError):
        c.compute()


@pytest.mark.parametrize("chunks", [(37, 23), (200, 90)])
def test_truncated_svd(client, rng, chunks):
    u0, _ = np.linalg.qr(rng.standard_normal((200, 20)))
    v0, _ = np.linalg.qr(rng.standard_normal((90, 20)))
    s0 = 0.5 ** np.arange(20)
    a = (u0 * s0) @ v0.T
    x = da.from_array(a, chunks=chunks)
    res = decomp.truncated_svd(x, 4, random_state=0, n_iter=2, error_estimate=True)
    _lazy(*res)
    U, S, Vh, err = client.compute(list(res), sync=True)
    np.testing.assert_allclose(S, s0[:4], rtol=1e-10)
    ref = decomp.truncated_svd(a, 4, method="randomized", random_state=0)
    np.testing.assert_allclose(Vh, ref.Vh, atol=1e-8)
    assert abs(float(err) - s0[4]) <= 0.05 * s0[4]
    with pytest.raises(ValueError, match="method='randomized'"):
        decomp.truncated_svd(x, 4, method="exact")


@pytest.mark.parametrize("whiten", [False, True])
def test_pca(client, rng, whiten):
    sklearn_pca = pytest.importorskip("sklearn.decomposition").PCA
    X = rng.standard_normal((300, 12)) @ np.diag([9, 7, 5, 3, 1, .5, .4, .3, .2, .1, .1, .1]) \
        + 4.0
    x = da.from_array(X, chunks=(71, 5))
    pca = decomp.PCA(4, whiten=whiten, random_state=0, iterated_power=6).fit(x)
    assert gpulinalg.last_run().backend == "dask"
    ref = sklearn_pca(4, whiten=whiten, svd_solver="full").fit(X)
    for name in ("components_", "explained_variance_", "explained_variance_ratio_",
                 "singular_values_", "mean_"):
        got = getattr(pca, name)
        assert isinstance(got, np.ndarray), name  # fitted attributes are concrete
        np.testing.assert_allclose(got, getattr(ref, name), rtol=1e-6, atol=1e-8, err_msg=name)
    np.testing.assert_allclose(pca.noise_variance_, ref.noise_variance_, rtol=1e-6)
    assert (pca.n_components_, pca.n_samples_, pca.n_features_in_) == (4, 300, 12)
    assert pca.fit_svd_solver_ == "randomized"
    z = pca.transform(x)
    _lazy(z)
    np.testing.assert_allclose(z.compute(), ref.transform(X), atol=1e-6)
    zf = decomp.PCA(4, whiten=whiten, random_state=0, iterated_power=6).fit_transform(x)
    assert isinstance(zf, da.Array)
    np.testing.assert_allclose(zf.compute(), ref.transform(X), atol=1e-6)
    np.testing.assert_allclose(pca.transform(X), ref.transform(X), atol=1e-6)  # NumPy still


def test_pca_refuses_what_dask_cannot_do(client, rng):
    pytest.importorskip("sklearn")
    x = da.from_array(rng.standard_normal((50, 6)), chunks=(20, 3))
    with pytest.raises(ValueError, match="svd_solver"):
        decomp.PCA(2, svd_solver="full").fit(x)
    with pytest.raises(ValueError, match="n_components"):
        decomp.PCA(0.9).fit(x)
    pca = decomp.PCA(2, random_state=0).fit(x)
    with pytest.raises(ValueError, match="features"):
        pca.transform(da.zeros((5, 4), chunks=2))


def test_no_dask_function_computes_the_graph(client, rng):
    """Validation is lazy: a graph whose computation would fail is not touched by the calls."""
    def boom(block):
        raise AssertionError("computed")
    lazy = dict(dtype=np.float64, meta=np.empty((0, 0)))
    x = da.from_array(rng.standard_normal((40, 4)), chunks=(10, 4)).map_blocks(boom, **lazy)
    decomp.qr(x, mode="economic")
    decomp.svd(x, full_matrices=False, check_finite=True)
    decomp.truncated_svd(x, 2, check_finite=True)
    s = da.from_array(np.eye(8), chunks=4).map_blocks(boom, **lazy)
    decomp.cholesky(s, check_finite=True)
    decomp.logdet_cholesky(decomp.cho_factor(s))
