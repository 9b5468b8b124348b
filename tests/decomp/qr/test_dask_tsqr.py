"""TSQR QR and SVD of tall-and-skinny Dask arrays (the engine, called directly;
``gpulinalg.decomp.qr`` / ``svd`` in test_dask_api.py), on a 2-worker CPU cluster with NumPy
chunks, against NumPy."""

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from gpulinalg.decomp.qr import _tsqr_dask as tsqr_dask  # noqa: E402



def _tall(rng, m, n, dtype):
    a = rng.standard_normal((m, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((m, n))
    return a.astype(dtype)


def _check_qr(a, q, r):
    eps = np.finfo(a.dtype).eps
    m, n = a.shape
    k = min(m, n)
    assert q.shape == (m, k) and r.shape == (k, n)
    assert q.dtype == a.dtype and r.dtype == a.dtype
    scale = max(np.linalg.norm(a), 1.0)
    assert np.linalg.norm(a - q @ r) / (max(n, 1) * scale * eps) <= 30
    assert np.linalg.norm(np.eye(k) - q.conj().T @ q) / (max(k, 1) * eps) <= 30
    assert np.all(np.tril(r, -1) == 0)
    d = np.diagonal(r)
    assert np.all(d.real >= 0) and np.allclose(d.imag, 0)


CHUNKS = [((103,), 2), ((7, 13, 5, 30, 48), 2), ((3,) * 30 + (13,), 4), ((11,) * 9 + (4,), 3)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.complex64])
@pytest.mark.parametrize("rows, split_every", CHUNKS)
def test_qr_matches_numpy(client, rng, dtype, rows, split_every):
    a = _tall(rng, sum(rows), 7, dtype)
    x = da.from_array(a, chunks=(rows, 7))
    q, r = tsqr_dask.qr(x, split_every=split_every)
    assert q.chunks == (rows, (7,))
    qc, rc = client.compute([q, r], sync=True)
    _check_qr(a, qc, rc)
    r_np = np.linalg.qr(a, mode="r")
    phase = np.diagonal(r_np) / np.abs(np.diagonal(r_np))
    tol = 50 * np.finfo(dtype).eps * np.linalg.norm(a)
    assert np.abs(rc - np.conj(phase)[:, None] * r_np).max() <= tol  # SciPy's R, rows re-signed


def test_qr_is_independent_of_the_chunking(client, rng):
    a = _tall(rng, 90, 6, np.float64)
    r1 = tsqr_dask.qr(da.from_array(a, chunks=(90, 6)), mode="r").compute()
    r2 = tsqr_dask.qr(da.from_array(a, chunks=(8, 6)), mode="r", split_every=2).compute()
    np.testing.assert_allclose(r1, r2, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
@pytest.mark.parametrize("rows, split_every", CHUNKS[:3])
def test_svd_matches_numpy(client, rng, dtype, rows, split_every):
    a = _tall(rng, sum(rows), 7, dtype)
    x = da.from_array(a, chunks=(rows, 7))
    u, s, vh = client.compute(list(tsqr_dask.svd(x, split_every=split_every)), sync=True)
    eps = np.finfo(dtype).eps
    s_np = np.linalg.svd(a, compute_uv=False)
    assert s.dtype == s_np.dtype
    np.testing.assert_allclose(s, s_np, rtol=50 * eps * 7, atol=50 * eps * s_np[0])
    assert np.linalg.norm(a - (u * s) @ vh) / (7 * np.linalg.norm(a) * eps) <= 50
    assert np.linalg.norm(np.eye(7) - u.conj().T @ u) / (7 * eps) <= 50
    idx = np.argmax(np.abs(vh), axis=1)
    peak = vh[np.arange(7), idx]
    assert np.all(peak.real > 0) and np.allclose(peak.imag, 0, atol=10 * eps)


def test_svd_signs_match_single_gpu_convention(client, rng):
    from gpulinalg import decomp
    a = _tall(rng, 60, 5, np.float64)
    u, s, vh = client.compute(list(tsqr_dask.svd(da.from_array(a, chunks=(13, 5)))), sync=True)
    ref = decomp.svd(a, full_matrices=False)
    np.testing.assert_allclose(vh, ref.Vh, atol=1e-10)
    np.testing.assert_allclose(u, ref.U, atol=1e-10)


def test_svd_of_a_wide_array_and_values_only(client, rng):
    a = _tall(rng, 6, 50, np.complex128)
    x = da.from_array(a, chunks=(6, 11))
    u, s, vh = client.compute(list(tsqr_dask.svd(x)), sync=True)
    assert u.shape == (6, 6) and vh.shape == (6, 50)
    np.testing.assert_allclose((u * s) @ vh, a, atol=1e-12)
    np.testing.assert_allclose(tsqr_dask.svd(x, compute_uv=False).compute(),
                               np.linalg.svd(a, compute_uv=False))


def test_blocks_with_fewer_rows_than_columns(client, rng):
    a = _tall(rng, 12, 7, np.float64)  # blocks of 3 rows, and m < k * n
    q, r = client.compute(list(tsqr_dask.qr(da.from_array(a, chunks=(3, 7)))), sync=True)
    _check_qr(a, q, r)


@pytest.mark.parametrize("shape, chunks", [((0, 4), (5, 4)), ((9, 0), (4, 0)), ((3, 5), (3, 5))])
def test_empty_and_wide_shapes(client, shape, chunks):
    a = np.arange(np.prod(shape), dtype=float).reshape(shape) + np.eye(*shape)
    q, r = client.compute(list(tsqr_dask.qr(da.from_array(a, chunks=chunks))), sync=True)
    k = min(shape)
    assert q.shape == (shape[0], k) and r.shape == (k, shape[1])
    np.testing.assert_allclose(q @ r, a, atol=1e-12)


def test_integers_compute_in_float64(client):
    x = da.from_array(np.arange(40).reshape(20, 2) % 7, chunks=(6, 2))
    q, r = tsqr_dask.qr(x)
    assert q.dtype == np.float64 and r.dtype == np.float64


#: Shapes of the blocks :func:`counted` saw (a module global: the scheduler pickles tasks by
#: reference, and the in-process workers share this module).
_CALLS = []


def counted(block):
    _CALLS.append(block.shape)  # list.append is atomic
    return block


def test_results_are_lazy_and_stay_numpy(client, rng):
    a = _tall(rng, 50, 4, np.float64)
    calls = _CALLS
    calls.clear()
    x = da.from_array(a, chunks=(10, 4)).map_blocks(counted, dtype=a.dtype,
                                                     meta=np.empty((0, 0), a.dtype))
    q, r = tsqr_dask.qr(x)
    u, s, vh = tsqr_dask.svd(x)
    for res in (q, r, u, s, vh):
        assert isinstance(res, da.Array)
        assert type(res._meta) is np.ndarray
    assert calls == []  # nothing ran while the graph was built
    out = client.compute([q, r, u, s, vh], sync=True)
    assert calls and all(type(o) is np.ndarray for o in out)


def test_bad_inputs():
    x = da.ones((20, 6), chunks=(5, 3))
    with pytest.raises(ValueError, match="one column of blocks"):
        tsqr_dask.qr(x)
    with pytest.raises(NotImplementedError):
        tsqr_dask.qr(x.rechunk((5, 6)), mode="complete")
    with pytest.raises(NotImplementedError):
        tsqr_dask.qr(x.rechunk((5, 6)), mode="full")
    with pytest.raises(ValueError, match="mode"):
        tsqr_dask.qr(x.rechunk((5, 6)), mode="raw")
    assert tsqr_dask.qr(x.rechunk((5, 6)), mode="economic").Q.shape == (20, 6)
    with pytest.raises(NotImplementedError):
        tsqr_dask.svd(x.rechunk((5, 6)), full_matrices=True)
    with pytest.raises(ValueError, match="split_every"):
        tsqr_dask.tsqr(x.rechunk((5, 6)), split_every=1)
