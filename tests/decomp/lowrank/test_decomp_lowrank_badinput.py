"""Issue 18 for the low-rank family, and PCA's scikit-learn surface: non-finite input with
``check_finite=False``, ``inverse_transform`` of NaN, the ``k = 0`` / empty shortcuts, where
PCA's FallbackWarning points, sparse input, the model methods, and scikit-learn absent."""

import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import gpulinalg
from gpulinalg import FallbackWarning
from gpulinalg import testing
from gpulinalg.decomp import truncated_svd

sklearn = pytest.importorskip("sklearn")
from sklearn.decomposition import PCA as SkPCA  # noqa: E402

from gpulinalg.decomp import PCA  # noqa: E402


@pytest.fixture
def a_nan(rng):
    a = rng.standard_normal((600, 300))
    a[3, 4] = np.nan
    return a


@pytest.mark.parametrize("method", ["randomized", "gesvdr", "auto"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_truncated_nonfinite_unchecked_raises_clearly(backend, a_nan, method, bad):
    a_nan[3, 4] = bad
    with pytest.raises(ValueError, match="not finite.*check_finite=False"):
        truncated_svd(a_nan, 3, method=method, check_finite=False, random_state=0)


def test_truncated_nonfinite_unchecked_exact_sparse_streamed(backend, a_nan, tmp_path):
    with pytest.raises(ValueError):
        truncated_svd(a_nan, 3, method="exact", check_finite=False)
    s = sp.random(600, 300, density=0.05, format="csr", random_state=0)
    s.data[0] = np.nan
    with pytest.raises(ValueError, match="not finite"):
        truncated_svd(s, 3, check_finite=False, random_state=0)
    mm = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=np.float64,
                                   shape=a_nan.shape)
    mm[:] = a_nan
    for kw in ({"out_of_core": True}, {"error_estimate": True}):
        with pytest.raises(ValueError, match="not finite"):
            truncated_svd(mm, 3, method="randomized", check_finite=False, random_state=0, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["randomized", "gesvdr", "exact"])
def test_truncated_nonfinite_unchecked_cupy(xp_gpu, a_nan, method):
    with pytest.raises(ValueError):
        truncated_svd(xp_gpu.asarray(a_nan), 3, method=method, check_finite=False,
                      random_state=0)
    assert gpulinalg.last_run().backend == "gpu"


@pytest.mark.parametrize("shape,k", [((5, 4), 0), ((0, 4), 0), ((5, 0), 0)])
def test_truncated_shortcuts_are_recorded(shape, k):
    with gpulinalg.config(backend="cpu"):
        truncated_svd(np.eye(3), 1)
    U, S, Vh = truncated_svd(np.ones(shape), k)
    assert U.shape == (shape[0], 0) and S.shape == (0,) and Vh.shape == (0, shape[1])
    rec = gpulinalg.last_run()
    assert rec.op == "decomp.truncated_svd" and rec.backend == "none"


@pytest.mark.skipif(gpulinalg.gpu_available(), reason="checks the no-GPU case")
def test_truncated_shortcut_strict_under_backend_gpu():
    with gpulinalg.config(backend="gpu"), pytest.raises(gpulinalg.GPUUnavailableError):
        truncated_svd(np.ones((5, 4)), 0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_pca_inverse_transform_rejects_nonfinite(backend, rng, bad):
    pca = PCA(2).fit(rng.standard_normal((50, 5)))
    z = np.zeros((3, 2))
    z[1, 1] = bad
    with pytest.raises(ValueError, match="NaN or infinity"):
        pca.inverse_transform(z)
    with pytest.raises(ValueError, match="NaN|infinity"):
        SkPCA(2).fit(rng.standard_normal((50, 5))).inverse_transform(z)  # the reference


@pytest.mark.parametrize("call", ["fit", "fit_transform", "transform"])
def test_pca_fallback_warning_points_at_user_line(fake_gpu, rng, call):
    X = rng.standard_normal((300, 8))
    pca = PCA(3, svd_solver="full").fit(X)
    op = "decomp.pca_transform" if call == "transform" else "decomp.pca_fit"
    with testing.inject_fault("oom", op=op), gpulinalg.config(backend="gpu"):
        with pytest.warns(FallbackWarning) as record:
            getattr(pca, call)(X)
    assert [w.filename for w in record] == [__file__]
    assert gpulinalg.last_run().fell_back


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("solver", ["arpack", "covariance_eigh", "auto"])
def test_pca_sparse_matches_dense(backend, fmt, solver):
    X = sp.random(400, 60, density=0.1, format=fmt, random_state=1) * 3.0
    ours = PCA(4, svd_solver=solver, random_state=0).fit(X)
    dense = SkPCA(4, svd_solver="full").fit(X.toarray())
    assert ours.fit_svd_solver_ == ("arpack" if solver == "auto" else solver)
    np.testing.assert_allclose(ours.explained_variance_, dense.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(ours.components_, dense.components_, atol=1e-8)
    np.testing.assert_allclose(ours.noise_variance_, dense.noise_variance_, rtol=1e-9)
    Z = ours.transform(X)
    assert isinstance(Z, np.ndarray)
    np.testing.assert_allclose(Z, dense.transform(X.toarray()), atol=1e-8)


@pytest.mark.parametrize("solver", ["full", "covariance_eigh", "arpack", "randomized"])
@pytest.mark.parametrize("whiten", [False, True])
def test_pca_model_methods_match_sklearn(backend, rng, solver, whiten):
    X = rng.standard_normal((300, 12)) @ np.diag(np.linspace(4, 0.5, 12)) + 2.0
    kw = dict(svd_solver=solver, whiten=whiten, random_state=0, iterated_power=20)
    ours, ref = PCA(5, **kw).fit(X), SkPCA(5, **kw).fit(X)
    np.testing.assert_allclose(ours.get_covariance(), ref.get_covariance(), atol=1e-9)
    np.testing.assert_allclose(ours.get_precision(), ref.get_precision(), atol=1e-8)
    np.testing.assert_allclose(ours.score_samples(X), ref.score_samples(X), rtol=1e-9)
    assert ours.score(X) == pytest.approx(ref.score(X), rel=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pca_mle_and_dtype(backend, rng, dtype):
    X = rng.standard_normal((800, 10))
    X[:, -1] = X[:, :-1].mean(axis=1)
    ours = PCA("mle", svd_solver="full").fit(X.astype(dtype))
    assert ours.n_components_ == SkPCA("mle", svd_solver="full").fit(X).n_components_ == 9
    assert ours.components_.dtype == dtype and ours.get_precision().dtype == dtype
    with pytest.raises(ValueError, match="cannot be a string"):
        PCA("mle", svd_solver="arpack").fit(X)


def test_pca_is_a_sklearn_estimator_and_pickles(rng):
    from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
    assert issubclass(PCA, (BaseEstimator)) and issubclass(PCA, TransformerMixin)
    assert issubclass(PCA, ClassNamePrefixFeaturesOutMixin)
    assert set(SkPCA().get_params()) <= set(PCA().get_params())
    assert {k: v for k, v in PCA().get_params().items()} == SkPCA().get_params()
    X = rng.standard_normal((40, 5))
    p = pickle.loads(pickle.dumps(PCA(2).fit(X)))
    np.testing.assert_allclose(p.transform(X), PCA(2).fit(X).transform(X))
    assert list(p.get_feature_names_out()) == ["pca0", "pca1"]
    with pytest.raises(ValueError):  # scikit-learn's parameter validation
        PCA(n_components=1.5).fit(X)


def test_known_sklearn_version():
    from gpulinalg.decomp.pca._pca_sklearn import KNOWN_VERSIONS
    major, minor = (int(x) for x in sklearn.__version__.split(".")[:2])
    assert (major, minor) in KNOWN_VERSIONS, (
        f"scikit-learn {sklearn.__version__}: check the private names _pca_sklearn uses, then "
        "add the version to KNOWN_VERSIONS")


def test_import_fast_and_clear_error_without_sklearn():
    code = ("import sys; sys.modules['sklearn'] = None\n"
            "import gpulinalg.decomp as d\n"
            "assert 'sklearn' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
            "try:\n    d.PCA(2)\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "gpulinalg[sklearn]" in out


def test_no_runtime_warnings_on_mle_edge(rng):
    X = np.ones((9, 6))  # rank 0 after centering
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scikit-learn divides 0 by 0 here
        expected = SkPCA("mle", svd_solver="full").fit(X).n_components_
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # gpulinalg does not
        assert PCA("mle", svd_solver="full").fit(X).n_components_ == expected


@pytest.mark.gpu
def test_pca_cupy_sparse_arpack_and_model(xp_gpu):
    import cupyx.scipy.sparse as cps
    X = sp.random(500, 80, density=0.1, format="csr", random_state=2, dtype=np.float64) * 3
    ref = SkPCA(5, svd_solver="full").fit(X.toarray())
    for solver in ("arpack", "covariance_eigh"):
        ours = PCA(5, svd_solver=solver).fit(cps.csr_matrix(X))
        assert isinstance(ours.components_, xp_gpu.ndarray)
        np.testing.assert_allclose(ours.explained_variance_.get(), ref.explained_variance_,
                                   rtol=1e-9)
        np.testing.assert_allclose(ours.components_.get(), ref.components_, atol=1e-7)
        Z = ours.transform(cps.csr_matrix(X))
        np.testing.assert_allclose(Z.get(), ref.transform(X.toarray()), atol=1e-7)
        np.testing.assert_allclose(ours.get_precision().get(), ref.get_precision(), atol=1e-7)
        assert float(ours.score(xp_gpu.asarray(X.toarray()))) == pytest.approx(
            ref.score(X.toarray()), rel=1e-8)


@pytest.mark.gpu
def test_pca_gpu_arpack_dense_float32(xp_gpu, rng):
    X = (rng.standard_normal((2000, 50)) @ np.diag(np.linspace(5, 0.1, 50))).astype(np.float32)
    ours = PCA(10, svd_solver="arpack").fit(xp_gpu.asarray(X))
    ref = SkPCA(10, svd_solver="full").fit(X.astype(np.float64))
    assert ours.components_.dtype == np.float32
    np.testing.assert_allclose(ours.singular_values_.get(), ref.singular_values_, rtol=1e-4)
    assert gpulinalg.last_run().backend == "gpu"


@pytest.mark.parametrize("params", [{}, {"n_components": 0.5, "svd_solver": "full"},
                                    {"n_components": "mle", "tol": 1, "copy": False},
                                    {"n_components": 3, "iterated_power": 0, "n_oversamples": 1,
                                     "power_iteration_normalizer": "CholQR",
                                     "random_state": 7, "whiten": True}])
def test_fast_parameter_check_agrees_with_sklearn(params):
    from gpulinalg.decomp.pca._pca_sklearn import _plainly_valid
    est = PCA(**params)
    assert _plainly_valid(est)
    est._validate_params()  # scikit-learn accepts what the fast check lets through
