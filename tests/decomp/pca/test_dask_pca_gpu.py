"""The row-panel kernels of the Dask randomized SVD / PCA on CuPy blocks against their NumPy run
(the grouped column sums, a locally centred fused panel, the basis panel's QR), and PCA on CuPy
chunks tall enough for the grouped sums. GPU only: skips without one."""

import numpy as np
import pytest

import gpulinalg

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    if not gpulinalg.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    return pytest.importorskip("cupy")


@pytest.mark.parametrize("shape", [(250_001, 20), (70_000, 1000), (4099, 3)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_colsum_on_cupy(cp, shape, order):
    from gpulinalg.decomp.lowrank._rowpass_xp import colsum
    rng = np.random.default_rng(0)
    a = np.asarray(rng.standard_normal(shape, dtype=np.float32) + 1e3, order=order)
    got = colsum(cp.asarray(a, order=order), np.float64)
    assert isinstance(got, cp.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got.get(), a.astype(np.float64).sum(axis=0), rtol=1e-12)


def test_panels_on_cupy_match_numpy(cp):
    from gpulinalg.decomp.lowrank import _rowpass_xp as rp
    rng = np.random.default_rng(1)
    b = (rng.standard_normal((30_011, 64)) * 3 + 50).astype(np.float32)
    z = np.linalg.qr(rng.standard_normal((64, 12)))[0].astype(np.float32)
    mean = b.astype(np.float64).mean(axis=0) + 0.25
    for args in ((None, (64,), True, True), (mean, (64,), False, True),
                 (mean, (40, 24), False, False)):
        nb = [b] if len(args[1]) == 1 else [b[:, :40].copy(), b[:, 40:].copy()]
        ref = rp.panel(z, *args, *nb)
        got = rp.panel(cp.asarray(z), *(cp.asarray(v) if isinstance(v, np.ndarray) else v
                                         for v in args), *[cp.asarray(x) for x in nb])
        for key, v in ref.items():
            if isinstance(v, np.ndarray):
                np.testing.assert_allclose(got[key].get(), v, rtol=2e-4,
                                           atol=2e-4 * np.abs(v).max(), err_msg=key)
        if not args[3]:
            q = rp.local_qr(got, None, None)
            np.testing.assert_allclose((q["q"] @ q["r"]).get(), got["y"].get(), rtol=1e-5,
                                       atol=1e-5 * float(abs(got["y"]).max()))


def test_pca_on_tall_cupy_chunks(cp):
    da = pytest.importorskip("dask.array")
    import dask
    from gpulinalg.decomp.lowrank import _randomized_dask as rsvd
    rng = np.random.default_rng(2)
    a = rng.standard_normal((60_000, 40)) * (0.9 ** np.arange(40)) + 7.0
    x = da.from_array(cp.asarray(a), chunks=(25_000, 40), asarray=False)
    out = rsvd.pca(x, 5, iterated_power=2, n_oversamples=35, random_state=0)  # l = n: exact
    mean, ev, ratio = dask.compute(out["mean"], out["explained_variance"],
                                   out["explained_variance_ratio"], scheduler="sync")
    c = a - a.mean(axis=0)
    s = np.linalg.svd(c, compute_uv=False)
    np.testing.assert_allclose(cp.asnumpy(mean), a.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(cp.asnumpy(ev), s[:5] ** 2 / 59_999, rtol=1e-6)
    np.testing.assert_allclose(cp.asnumpy(ratio), s[:5] ** 2 / (c ** 2).sum(), rtol=1e-6)
