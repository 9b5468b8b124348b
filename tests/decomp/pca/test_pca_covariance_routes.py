"""PCA's ``covariance_eigh`` of float32 data: scikit-learn's float32 Gram matrix where the means
are small against the spreads, the data centered in float64 where they are not (far from the
origin, or near float32's underflow); ``fit_transform`` projects once inside the fit."""

import numpy as np
import pytest

pytest.importorskip("sklearn")
import gpulinalg  # noqa: E402
from gpulinalg.decomp import PCA  # noqa: E402
from gpulinalg.decomp.pca import _pca_xp  # noqa: E402

RNG = np.random.default_rng(7)
BASE = RNG.standard_normal((3000, 8)) @ np.diag([6.0, 4, 2, 1, .5, .3, .2, .1])


def _reference(X, k=4, whiten=False):
    return PCA(k, svd_solver="covariance_eigh", whiten=whiten).fit(X.astype(np.float64))


@pytest.mark.parametrize("offset", [0.0, 1.0, 1e4])
def test_float32_matches_float64_at_any_offset(offset):
    X = (BASE + offset).astype(np.float32)
    got = PCA(4, svd_solver="covariance_eigh").fit(X)
    ref = _reference(X)
    assert got.components_.dtype == np.float32
    np.testing.assert_allclose(got.explained_variance_, ref.explained_variance_, rtol=1e-4)
    np.testing.assert_allclose(np.abs(got.components_ @ ref.components_.T), np.eye(4),
                               atol=2e-3)
    np.testing.assert_allclose(got.mean_, ref.mean_, rtol=1e-6, atol=1e-6)


def test_gram_route_is_taken_only_where_it_is_accurate():
    near = (BASE + 0.1).astype(np.float32)
    far = (BASE + 1e4).astype(np.float32)
    tiny = (BASE * 1e-15).astype(np.float32)
    for X, fast in ((near, True), (far, False), (tiny, False)):
        mean = _pca_xp._column_mean(np, X, False)
        assert (_pca_xp._single_gram(gpulinalg.decomp.pca._pca_host.ENGINE, X, mean,
                                     X.shape[0]) is not None) is fast


def test_float32_column_mean_is_float32_accurate():
    X = (RNG.standard_normal((50_000, 3)) + 1e3).astype(np.float32)
    mean = _pca_xp._column_mean(np, X, False)
    assert mean.dtype == np.float64
    np.testing.assert_allclose(mean, X.astype(np.float64).mean(axis=0), rtol=2e-7)


@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fit_transform_projects_inside_the_fit(whiten, dtype):
    X = (BASE + 3.0).astype(dtype)
    pca = PCA(3, svd_solver="covariance_eigh", whiten=whiten)
    Z = pca.fit_transform(X)
    assert gpulinalg.last_run().op == "decomp.pca_fit"  # no second (transform) dispatch
    assert Z.dtype == dtype
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(Z, pca.transform(X), rtol=tol, atol=tol * np.abs(Z).max())
