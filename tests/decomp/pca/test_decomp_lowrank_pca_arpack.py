"""The GPU ``arpack`` route of :class:`gpulinalg.decomp.PCA` (``_pca_cuda.arpack``), tested on
the CPU: its NumPy-generic pieces in ``_pca_xp``, and the route itself with NumPy standing in
for CuPy and an emulation of CuPy 14's ``svds`` (its output order, its cutoff, its
``IndexError`` when ``k > min(shape) - 3``) standing in for ``cupyx.scipy.sparse.linalg``."""

import sys
import types

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from gpulinalg.decomp.pca import _pca_cuda, _pca_host, _pca_xp
from gpulinalg.decomp.pca._pca_api import PCA

sklearn = pytest.importorskip("sklearn")
from sklearn.decomposition import PCA as SkPCA  # noqa: E402


def _cupy_svds(a, k=6, *, ncv=None, tol=0, which="LM", maxiter=None,
               return_singular_vectors=True):
    """CuPy 14's ``svds`` as its source reads: eigsh of the Gram matrix (ascending), the
    values under ``1e6 eps max(w)`` zeroed and moved last, with arbitrary orthonormal vectors;
    an IndexError where its thick restart writes past its ``min(shape) - 1`` vectors."""
    m, n = a.shape
    if not _pca_xp.lanczos_fits(k, a.shape):
        raise IndexError(f"Index {min(m, n) - 1} is out of bounds for axis 0")
    eye = np.eye(n, dtype=a.dtype) if m >= n else np.eye(m, dtype=a.dtype)
    if m >= n:
        g = a.rmatmat(a.matmat(eye))
    else:
        g = a.matmat(a.rmatmat(eye))
    w, x = np.linalg.eigh((g + g.T) / 2)
    w, x = np.maximum(w[-k:], 0), x[:, -k:]
    keep = w > 1e6 * np.finfo(np.float64).eps * w.max()
    s = np.zeros_like(w)
    s[:keep.sum()] = np.sqrt(w[keep])
    x = x[:, keep]
    q, _ = np.linalg.qr(np.hstack([x, np.random.default_rng(0).standard_normal(
        (x.shape[0], k - x.shape[1]))]))
    x = np.hstack([x, q[:, x.shape[1]:]])
    if m >= n:
        v = x
        u = a.matmat(v[:, :len(s)]) / np.where(s > 0, s, 1)
    else:
        u = x
        v = a.rmatmat(u) / np.where(s > 0, s, 1)
    return u, s, v.T


@pytest.fixture
def numpy_as_cupy(monkeypatch):
    """``import cupy`` gives NumPy and ``cupyx.scipy.sparse.linalg`` the emulated svds;
    ``_pca_host.fit`` then runs the GPU arpack route on NumPy arrays."""
    calls = []

    def svds(*args, **kwargs):
        calls.append(kwargs.get("k"))
        return _cupy_svds(*args, **kwargs)

    linalg = types.ModuleType("cupyx.scipy.sparse.linalg")
    linalg.svds, linalg.LinearOperator = svds, LinearOperator
    for name, mod in [("cupy", np), ("cupyx", types.ModuleType("cupyx")),
                      ("cupyx.scipy", types.ModuleType("cupyx.scipy")),
                      ("cupyx.scipy.sparse", types.ModuleType("cupyx.scipy.sparse")),
                      ("cupyx.scipy.sparse.linalg", linalg)]:
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(_pca_host, "arpack", _pca_cuda.arpack)
    return calls


@pytest.mark.parametrize("k,shape,fits", [(1, (150, 4), True), (2, (150, 4), False),
                                          (3, (150, 4), False), (27, (30, 100), True),
                                          (28, (100, 30), False)])
def test_lanczos_fits(k, shape, fits):
    assert _pca_xp.lanczos_fits(k, shape) is fits


def test_top_k_svd_descending_exact(rng):
    a = rng.standard_normal((40, 12))
    U, S, Vt = _pca_xp.top_k_svd(np, a, 5)
    np.testing.assert_allclose(S, np.linalg.svd(a, compute_uv=False)[:5])
    assert U.shape == (40, 5) and Vt.shape == (5, 12)
    np.testing.assert_allclose(a @ Vt.T, U * S)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rayleigh_ritz_recovers_rotated_ascending_subspace(rng, dtype):
    a = (rng.standard_normal((60, 20)) @ np.diag(np.linspace(9, 0.5, 20))).astype(dtype)
    _, s, vt = np.linalg.svd(a.astype(np.float64))
    q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    approx = (q @ vt[:4][::-1]).astype(dtype)  # ascending and rotated, as svds may give
    U, S, Vt = _pca_xp.rayleigh_ritz(np, a, approx)
    assert S.dtype == dtype and np.all(np.diff(S) <= 0)
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(S, s[:4], rtol=rtol)
    assert _pca_xp.ritz_converged(np, a, U, S, Vt, rtol)


def test_ritz_converged_rejects_wrong_subspace_and_nan(rng):
    a = rng.standard_normal((50, 10)) @ np.diag(np.linspace(5, 1, 10))
    U, S, Vt = _pca_xp.rayleigh_ritz(np, a, rng.standard_normal((3, 10)))
    assert not _pca_xp.ritz_converged(np, a, U, S, Vt, 1e-6)
    U, S, Vt = _pca_xp.top_k_svd(np, a, 3)
    assert _pca_xp.ritz_converged(np, a, U, S, Vt, 1e-10)
    S = S.copy()
    S[1] = np.nan
    assert not _pca_xp.ritz_converged(np, a, U, S, Vt, 1e-6)


def test_ritz_converged_on_centered_operator(rng):
    X = sp.random(80, 15, density=0.3, format="csr", random_state=1)
    mean = np.asarray(X.mean(axis=0)).ravel()
    op = _pca_xp.centered_operator(np, LinearOperator, X, mean)
    U, S, Vt = _pca_xp.top_k_svd(np, X.toarray() - mean, 4)
    assert _pca_xp.ritz_converged(np, op, U, S, Vt, 1e-10)


@pytest.mark.parametrize("n_components", [1, 2, 3])
def test_gpu_route_dense_iris_like_is_exact(numpy_as_cupy, rng, n_components):
    X = rng.standard_normal((150, 4)) @ np.diag([4, 2, 1, 0.3])
    ours = PCA(n_components, svd_solver="arpack").fit(X)
    ref = SkPCA(n_components, svd_solver="full").fit(X)
    assert numpy_as_cupy == []  # dense input never reaches svds
    np.testing.assert_allclose(ours.singular_values_, ref.singular_values_, rtol=1e-12)
    np.testing.assert_allclose(ours.components_, ref.components_, atol=1e-12)
    np.testing.assert_allclose(ours.transform(X), ref.transform(X), atol=1e-10)


def test_gpu_route_dense_rank_deficient(numpy_as_cupy, rng):
    # scikit-learn's test_pca_singular_values: a rank-3 refit must give the set values
    X_t = rng.standard_normal((100, 3))
    X_t /= np.linalg.norm(X_t, axis=0)
    X_t *= [3.142, 2.718, 1.0]
    comp, _ = np.linalg.qr(rng.standard_normal((110, 3)))
    X = X_t @ comp.T
    ours = PCA(3, svd_solver="arpack").fit(X)
    ref = SkPCA(3, svd_solver="full").fit(X)
    np.testing.assert_allclose(ours.singular_values_, ref.singular_values_, rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gpu_route_float32_preserved(numpy_as_cupy, rng, dtype):
    X = rng.standard_normal((100, 6)).astype(dtype)
    ours = PCA(2, svd_solver="arpack").fit(X)
    assert ours.components_.dtype == dtype and ours.singular_values_.dtype == dtype


def test_gpu_route_sparse_uses_svds_then_matches(numpy_as_cupy):
    X = sp.random(300, 40, density=0.2, format="csr", random_state=3) * 3
    ours = PCA(5, svd_solver="arpack").fit(X)
    ref = SkPCA(5, svd_solver="full").fit(X.toarray())
    assert numpy_as_cupy == [5]
    np.testing.assert_allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(ours.components_, ref.components_, atol=1e-7)


def test_gpu_route_sparse_k_too_large_for_cupy_densifies(numpy_as_cupy):
    X = sp.random(200, 6, density=0.5, format="csr", random_state=4)
    ours = PCA(5, svd_solver="arpack").fit(X)  # k = min(shape) - 1: CuPy's svds would crash
    ref = SkPCA(5, svd_solver="full").fit(X.toarray())
    assert numpy_as_cupy == []
    np.testing.assert_allclose(ours.singular_values_, ref.singular_values_, rtol=1e-10)


def test_gpu_route_sparse_breakdown_falls_back(numpy_as_cupy, monkeypatch, rng):
    def broken(a, k=6, **kwargs):  # a Lanczos that broke down: the wrong subspace
        m, n = a.shape
        return None, None, np.random.default_rng(5).standard_normal((k, n))
    monkeypatch.setattr(sys.modules["cupyx.scipy.sparse.linalg"], "svds", broken)
    X = sp.random(120, 30, density=0.3, format="csr", random_state=6)
    ours = PCA(4, svd_solver="arpack").fit(X)
    ref = SkPCA(4, svd_solver="full").fit(X.toarray())
    np.testing.assert_allclose(ours.singular_values_, ref.singular_values_, rtol=1e-10)


@pytest.mark.gpu
def test_gpu_arpack_cases_cupy_svds_failed(xp_gpu, rng):
    """The H200 failures: k > min(shape) - 3 (dense and sparse) and a rank-deficient refit."""
    import cupyx.scipy.sparse as cps
    X = rng.standard_normal((150, 4)) @ np.diag([4, 2, 1, 0.3])
    for k in (2, 3):
        ours = PCA(k, svd_solver="arpack").fit(xp_gpu.asarray(X))
        ref = SkPCA(k, svd_solver="full").fit(X)
        np.testing.assert_allclose(ours.singular_values_.get(), ref.singular_values_,
                                   rtol=1e-10)
    Xs = sp.random(200, 6, density=0.5, format="csr", random_state=4)
    ours = PCA(5, svd_solver="arpack").fit(cps.csr_matrix(Xs))
    ref = SkPCA(5, svd_solver="full").fit(Xs.toarray())
    np.testing.assert_allclose(ours.singular_values_.get(), ref.singular_values_, rtol=1e-10)
    X_t = rng.standard_normal((100, 3))
    X_t *= [3.142, 2.718, 1.0] / np.linalg.norm(X_t, axis=0)
    comp, _ = np.linalg.qr(rng.standard_normal((110, 3)))
    X = X_t @ comp.T
    ours = PCA(3, svd_solver="arpack").fit(xp_gpu.asarray(X))
    ref = SkPCA(3, svd_solver="full").fit(X)
    np.testing.assert_allclose(ours.singular_values_.get(), ref.singular_values_, rtol=1e-10)
