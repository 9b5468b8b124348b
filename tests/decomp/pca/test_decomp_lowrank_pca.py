"""PCA: scikit-learn's estimator checks, agreement with scikit-learn per solver, dtypes."""

import warnings

import numpy as np
import pytest

import gpulinalg
from gpulinalg import FallbackWarning
from gpulinalg import testing
from gpulinalg.decomp.pca._pca_api import PCA
from gpulinalg.decomp.pca._pca_solvers import resolve_solver

sklearn = pytest.importorskip("sklearn")
from sklearn.decomposition import PCA as SkPCA  # noqa: E402


@pytest.fixture
def data(rng):
    scales = np.concatenate([[9, 6, 4, 3, 2], 0.3 * 0.9 ** np.arange(35)])
    return rng.standard_normal((600, 40)) * scales + np.arange(40)


@pytest.mark.parametrize("est", [PCA(), PCA(2, svd_solver="randomized", random_state=0),
                                 PCA(0.9, whiten=True),
                                 PCA(svd_solver="covariance_eigh")], ids=repr)
def test_check_estimator(backend, est):
    from sklearn.utils.estimator_checks import check_estimator
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=sklearn.exceptions.SkipTestWarning)
        results = check_estimator(est, on_fail=None)
    failed = [(r["check_name"], r["exception"]) for r in results if r["status"] == "failed"]
    assert not failed


@pytest.mark.parametrize("solver", ["full", "covariance_eigh", "randomized"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matches_sklearn(backend, data, solver, dtype):
    X = data.astype(dtype)
    ours = PCA(5, svd_solver=solver, random_state=0).fit(X)
    ref = SkPCA(5, svd_solver="full").fit(X.astype(np.float64))
    rtol = 1e-4 if dtype == np.float32 else 1e-8
    assert ours.components_.dtype == dtype and ours.explained_variance_.dtype == dtype
    assert np.allclose(ours.explained_variance_, ref.explained_variance_, rtol=rtol)
    assert np.allclose(ours.explained_variance_ratio_, ref.explained_variance_ratio_, rtol=rtol)
    assert np.allclose(ours.singular_values_, ref.singular_values_, rtol=rtol)
    assert np.allclose(ours.mean_, ref.mean_, atol=10 * rtol)
    assert np.allclose(np.abs(ours.components_), np.abs(ref.components_), atol=100 * rtol)
    assert np.allclose(ours.noise_variance_, ref.noise_variance_, rtol=1e-2)
    if solver != "randomized":  # same sign convention as scikit-learn
        assert np.allclose(ours.components_, ref.components_, atol=100 * rtol)
    Z = ours.transform(X)
    assert Z.dtype == dtype and np.allclose(np.abs(Z), np.abs(ref.transform(X)),
                                            atol=1e3 * rtol)


@pytest.mark.parametrize("n_components", [None, 0.95, 7])
def test_n_components_forms(backend, data, n_components):
    ours = PCA(n_components, svd_solver="full").fit(data)
    ref = SkPCA(n_components, svd_solver="full").fit(data)
    assert ours.n_components_ == ref.n_components_
    assert np.allclose(ours.explained_variance_, ref.explained_variance_)


def test_fit_transform_whiten_inverse(backend, data):
    for solver in ("full", "randomized", "covariance_eigh"):
        p = PCA(6, whiten=True, svd_solver=solver, random_state=1)
        Z = p.fit_transform(data)
        assert np.allclose(Z, p.transform(data), atol=1e-6)
        assert np.allclose(Z.std(axis=0, ddof=1), 1, rtol=1e-6)
        back = p.inverse_transform(Z)
        P = p.components_.T @ p.components_
        assert np.allclose(back, (data - p.mean_) @ P + p.mean_, atol=1e-6)


def test_auto_solver_is_stored(backend, data):
    assert PCA(3).fit(data).fit_svd_solver_ == "covariance_eigh"
    wide = np.random.default_rng(0).standard_normal((80, 700))
    assert PCA(3).fit(wide).fit_svd_solver_ == "randomized"
    assert PCA(0.5).fit(wide).fit_svd_solver_ == "full"
    assert resolve_solver("auto", (100, 600), 90) == ("full", 90)


def test_bad_parameters(data):
    with pytest.raises(ValueError, match="svd_solver"):
        PCA(2, svd_solver="lobpcg").fit(data)
    with pytest.raises(ValueError, match="must be between 1 and"):
        PCA(0, svd_solver="randomized").fit(data)
    with pytest.raises(ValueError, match="must be between 0 and"):
        PCA(41, svd_solver="full").fit(data)
    with pytest.raises(ValueError, match="must be between 1 and"):
        PCA(0.5, svd_solver="randomized").fit(data)
    with pytest.raises(ValueError, match="strictly less than"):
        PCA(40, svd_solver="arpack").fit(data)
    with pytest.raises(ValueError, match="NaN"):
        PCA(2).fit(np.full((5, 3), np.nan))
    import scipy.sparse as sp
    with pytest.raises(TypeError, match="sparse inputs with the"):
        PCA(2, svd_solver="full").fit(sp.random(20, 5, density=0.5, format="csr"))


def test_input_not_modified_and_f_order(backend, data):
    X = np.asfortranarray(data)
    keep = X.copy()
    a = PCA(4, random_state=0, svd_solver="randomized").fit(X)
    b = PCA(4, random_state=0, svd_solver="randomized").fit(np.ascontiguousarray(data))
    assert np.array_equal(X, keep)
    assert np.allclose(a.components_, b.components_, atol=1e-10)


def test_forced_oom_falls_back(data, fake_gpu):
    ref = PCA(3, svd_solver="full").fit(data)
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(FallbackWarning):
            got = PCA(3, svd_solver="full").fit(data)
    assert np.allclose(got.components_, ref.components_)


@pytest.mark.gpu
def test_cupy_in_cupy_attributes(xp_gpu, data):
    X = xp_gpu.asarray(data.astype(np.float32))
    p = PCA(4, svd_solver="randomized", random_state=0).fit(X)
    assert isinstance(p.components_, xp_gpu.ndarray) and p.components_.dtype == np.float32
    Z = p.transform(X)
    assert isinstance(Z, xp_gpu.ndarray)
    ref = SkPCA(4).fit(data)
    assert np.allclose(p.explained_variance_.get(), ref.explained_variance_, rtol=1e-4)


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    from gpulinalg.decomp import PCA
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((200, 12)))
    pca = PCA(n_components=3).fit(x)
    z = pca.transform(x)
    assert isinstance(z, torch.Tensor) and tuple(z.shape) == (200, 3)
    back = pca.inverse_transform(z)
    assert isinstance(back, torch.Tensor) and tuple(back.shape) == (200, 12)
    ref = PCA(n_components=3).fit(x.numpy())
    np.testing.assert_allclose(z.numpy(), ref.transform(x.numpy()), atol=1e-10)
