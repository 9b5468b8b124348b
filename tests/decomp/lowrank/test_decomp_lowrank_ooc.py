"""Out-of-core truncated SVD and PCA: the streamed path agrees with the in-core one."""

import numpy as np
import pytest

import gpulinalg
from gpulinalg.decomp.lowrank import _ooc_host
from gpulinalg.decomp.pca._pca_api import PCA
from gpulinalg.decomp.lowrank._truncated_api import truncated_svd


class Dataset:
    """A 2-D object with shape, dtype and row slicing only (like an h5py dataset)."""

    def __init__(self, x):
        self._x, self.shape, self.dtype = x, x.shape, x.dtype
        self.reads = 0

    def __getitem__(self, index):
        self.reads += 1
        return np.array(self._x[index])


def known(rng, m, n, s):
    u = np.linalg.qr(rng.standard_normal((m, len(s))))[0]
    v = np.linalg.qr(rng.standard_normal((n, len(s))))[0]
    return (u * s) @ v.T


@pytest.fixture
def small_panels(monkeypatch):
    monkeypatch.setattr(_ooc_host, "CPU_PANEL_BYTES", 64 * 8 * 60)


@pytest.fixture
def matrix(rng):
    s = np.concatenate([np.linspace(4, 2, 5), 0.5 * 0.8 ** np.arange(55)])
    return known(rng, 900, 60, s).astype(np.float32), s


def subspace_gap(a, b):
    return np.abs(np.abs(np.asarray(a) @ np.asarray(b).T) - np.eye(a.shape[0])).max()


@pytest.mark.parametrize("source", ["array", "memmap", "dataset"])
def test_streamed_agrees_with_in_core(backend, matrix, small_panels, tmp_path, source):
    a, s = matrix
    ref = truncated_svd(a, 5, method="randomized", random_state=0, out_of_core=False)
    if source == "memmap":
        mm = np.memmap(tmp_path / "a.dat", dtype=a.dtype, mode="w+", shape=a.shape)
        mm[:] = a
        mm.flush()
        src = np.memmap(tmp_path / "a.dat", dtype=a.dtype, mode="r", shape=a.shape)
    else:
        src = a if source == "array" else Dataset(a)
    got = truncated_svd(src, 5, random_state=0, out_of_core=True)
    rec = gpulinalg.last_run()
    assert rec.details["method"] == "randomized-out-of-core"
    assert got.U.dtype == np.float32 and got.S.dtype == np.float32
    assert np.allclose(got.S, ref.S, rtol=1e-5) and np.allclose(got.S, s[:5], rtol=1e-5)
    assert subspace_gap(got.Vh, ref.Vh) < 1e-3
    assert np.abs(got.U.T @ got.U - np.eye(5)).max() < 1e-5
    if source == "dataset":
        assert src.reads > 1  # streamed in panels, never read whole


def test_streamed_error_estimate_and_float64(backend, matrix, small_panels):
    a, s = matrix
    r = truncated_svd(a.astype(np.float64), 5, random_state=0, out_of_core=True,
                      error_estimate=True)
    assert r.S.dtype == np.float64 and np.allclose(r.S, s[:5], rtol=1e-10)
    assert abs(r.error - s[5]) < 0.05 * s[5]


def test_cpu_streams_a_memmap_by_default(matrix, small_panels, tmp_path):
    a, s = matrix
    mm = np.memmap(tmp_path / "b.dat", dtype=a.dtype, mode="w+", shape=a.shape)
    mm[:] = a
    with gpulinalg.config(backend="cpu"):
        r = truncated_svd(mm, 3, random_state=1)
    assert gpulinalg.last_run().details["method"] == "randomized-out-of-core"
    assert np.allclose(r.S, s[:3], rtol=1e-5)


def test_streamed_nan_raises(backend, small_panels):
    a = np.ones((300, 20), np.float32)
    a[250, 3] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        truncated_svd(Dataset(a), 2, out_of_core=True)


@pytest.mark.parametrize("solver", ["randomized", "covariance_eigh"])
def test_pca_streamed_matches_in_core(backend, matrix, small_panels, solver):
    a, _ = matrix
    a = a + np.linspace(0, 3, a.shape[1], dtype=np.float32)  # a non-zero mean
    ref = PCA(4, svd_solver=solver, random_state=0).fit(a)
    got = PCA(4, svd_solver=solver, random_state=0).fit(Dataset(a))
    assert np.allclose(got.mean_, ref.mean_, atol=1e-5)
    assert np.allclose(got.explained_variance_, ref.explained_variance_, rtol=1e-4)
    assert np.allclose(got.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=1e-4)
    assert subspace_gap(got.components_, ref.components_) < 1e-3
    assert got.components_.dtype == np.float32


@pytest.mark.gpu
def test_gpu_routes_to_streaming_when_over_budget(xp_gpu, matrix):
    a, s = matrix
    big = np.tile(a, (40, 1))  # 36000 x 60
    ref = truncated_svd(big, 5, random_state=0, out_of_core=False)
    with gpulinalg.config(backend="gpu", vram_headroom=0.999):
        got = truncated_svd(big, 5, random_state=0)
    rec = gpulinalg.last_run()
    assert rec.backend == "gpu-out-of-core"
    assert rec.details["streamed_bytes"] >= big.nbytes
    assert np.allclose(got.S, ref.S, rtol=1e-4)
    assert subspace_gap(got.Vh, ref.Vh) < 1e-3


@pytest.mark.gpu
def test_gpu_streamed_pca(xp_gpu, matrix):
    a, _ = matrix
    ref = PCA(3, svd_solver="randomized", random_state=0).fit(a)
    with gpulinalg.config(backend="gpu", vram_headroom=0.999):
        got = PCA(3, svd_solver="randomized", random_state=0).fit(Dataset(a))
    assert gpulinalg.last_run().backend == "gpu-out-of-core"
    assert np.allclose(got.explained_variance_, ref.explained_variance_, rtol=1e-4)


def test_pca_transform_streams_a_dataset(backend, matrix, small_panels):
    a, _ = matrix
    p = PCA(4, svd_solver="covariance_eigh", whiten=True).fit(a)
    ref = p.transform(a)
    got = p.transform(Dataset(a))
    assert got.dtype == np.float32 and np.allclose(got, ref, atol=1e-4)
    assert np.allclose(p.fit_transform(Dataset(a)), ref, atol=1e-4)
