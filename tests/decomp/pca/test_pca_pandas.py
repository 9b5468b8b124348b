"""pandas input to ``gpulinalg.decomp``: ``PCA`` on a DataFrame gives what NumPy input gives,
with scikit-learn's feature-name bookkeeping and ``set_output``; the decomposition functions
take a DataFrame as ``scipy.linalg`` does (its values, results as NumPy arrays)."""

import warnings

import numpy as np
import pytest
import scipy.linalg as sl

pd = pytest.importorskip("pandas")
pytest.importorskip("sklearn")

from sklearn.decomposition import PCA as SklearnPCA  # noqa: E402

from gpulinalg import decomp  # noqa: E402
from gpulinalg.decomp import PCA  # noqa: E402

SOLVERS = ["full", "covariance_eigh", "arpack", "randomized"]


@pytest.fixture
def frame(rng):
    X = rng.standard_normal((40, 5)) @ np.diag([5.0, 3.0, 2.0, 1.0, 0.5])
    return pd.DataFrame(X, columns=["a", "b", "c", "d", "e"], index=np.arange(100, 140))


@pytest.mark.parametrize("svd_solver", SOLVERS)
def test_fit_transform_dataframe_equals_numpy(frame, svd_solver, backend):
    X = frame.to_numpy()
    before = frame.copy()
    kw = dict(n_components=3, svd_solver=svd_solver, random_state=0)
    on_df, on_np = PCA(**kw).fit(frame), PCA(**kw).fit(X)
    for attr in ("components_", "explained_variance_", "singular_values_", "mean_"):
        np.testing.assert_allclose(getattr(on_df, attr), getattr(on_np, attr),
                                   rtol=1e-12, atol=1e-12)
    t = on_df.transform(frame)
    assert type(t) is np.ndarray
    np.testing.assert_allclose(t, on_np.transform(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(PCA(**kw).fit_transform(frame), PCA(**kw).fit_transform(X),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(on_df.inverse_transform(t), on_np.inverse_transform(t),
                               rtol=1e-12, atol=1e-12)
    pd.testing.assert_frame_equal(frame, before)  # input not modified


def test_feature_names_as_sklearn(frame):
    ours, theirs = PCA(n_components=2).fit(frame), SklearnPCA(n_components=2).fit(frame)
    assert ours.n_features_in_ == theirs.n_features_in_ == 5
    np.testing.assert_array_equal(ours.feature_names_in_, theirs.feature_names_in_)
    assert ours.feature_names_in_.dtype == object
    np.testing.assert_array_equal(ours.get_feature_names_out(), theirs.get_feature_names_out())
    np.testing.assert_array_equal(ours.get_feature_names_out(), ["pca0", "pca1"])
    assert not hasattr(PCA(n_components=2).fit(frame.to_numpy()), "feature_names_in_")


def test_feature_names_checked_as_sklearn(frame):
    est = PCA(n_components=2).fit(frame)
    renamed = frame.rename(columns={"a": "z"})
    with pytest.raises(ValueError, match="feature names should match"):
        est.transform(renamed)
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        est.transform(frame.to_numpy())
    fitted_on_numpy = PCA(n_components=2).fit(frame.to_numpy())
    with pytest.warns(UserWarning, match="X has feature names, but PCA was fitted without"):
        fitted_on_numpy.transform(frame)


def test_set_output_pandas(frame):
    ours = PCA(n_components=2).set_output(transform="pandas")
    theirs = SklearnPCA(n_components=2).set_output(transform="pandas")
    for out_ours, out_theirs in ((ours.fit_transform(frame), theirs.fit_transform(frame)),
                                 (ours.transform(frame), theirs.transform(frame))):
        assert isinstance(out_ours, pd.DataFrame)
        assert list(out_ours.columns) == list(out_theirs.columns) == ["pca0", "pca1"]
        pd.testing.assert_index_equal(out_ours.index, frame.index)
        np.testing.assert_allclose(np.abs(out_ours.to_numpy()), np.abs(out_theirs.to_numpy()),
                                   rtol=1e-10, atol=1e-10)  # signs: both use svd_flip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert type(PCA(n_components=2).set_output(transform="default")
                    .fit(frame).transform(frame)) is np.ndarray


@pytest.mark.parametrize("make", [
    lambda X: pd.DataFrame({"a": X[:, 0], "b": (X[:, 1] > 0).astype(np.int64),
                            "c": X[:, 2].astype(np.float32)}),
    lambda X: pd.DataFrame(X[:, :3], columns=list("abc")).astype("Float64"),
], ids=["mixed_dtypes", "nullable_Float64"])
def test_column_dtypes_as_sklearn(rng, make):
    df = make(rng.standard_normal((30, 3)))
    ours, theirs = (PCA(n_components=2).fit_transform(df),
                    SklearnPCA(n_components=2).fit_transform(df))
    assert ours.dtype == theirs.dtype == np.float64
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-10)


def test_float32_frame_stays_float32(frame):
    f32 = frame.astype(np.float32)
    assert PCA(n_components=2).fit_transform(f32).dtype == np.float32
    assert PCA(n_components=2).fit(f32).components_.dtype == np.float32


def test_missing_values_refused(frame):
    frame.iloc[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        PCA(n_components=2).fit(frame)


# -- the decomposition functions: a DataFrame is taken as scipy.linalg takes it -------------


@pytest.fixture
def square(rng):
    A = rng.standard_normal((6, 6))
    return pd.DataFrame(A), pd.DataFrame(A @ A.T + 6 * np.eye(6)), \
        pd.DataFrame(rng.standard_normal((6, 2)))


def _assert_like_scipy(ours, theirs, rtol=1e-10):
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert type(o) is type(t)  # scipy.linalg returns NumPy arrays for a DataFrame
        if isinstance(t, np.ndarray):
            assert o.shape == t.shape and o.dtype == t.dtype
            np.testing.assert_allclose(np.abs(o), np.abs(t), rtol=rtol, atol=rtol)
        else:
            assert o == t


def test_qr_svd_dataframe_as_scipy(square, backend):
    A, _, _ = square
    before = A.copy()
    _assert_like_scipy(decomp.qr(A), sl.qr(A))
    _assert_like_scipy(decomp.svd(A), sl.svd(A))
    _assert_like_scipy(decomp.svd(A, compute_uv=False), sl.svd(A, compute_uv=False))
    pd.testing.assert_frame_equal(A, before)


def test_cholesky_family_dataframe_as_scipy(square, backend):
    A, S, B = square
    _assert_like_scipy(decomp.cholesky(S), sl.cholesky(S))
    _assert_like_scipy(decomp.cholesky(S, lower=True), sl.cholesky(S, lower=True))
    (c, lower), (c_ref, lower_ref) = decomp.cho_factor(S), sl.cho_factor(S)
    # SciPy's batching wrapper returns ``lower`` as a 0-d array in some releases
    assert type(c) is np.ndarray and lower is False and not bool(lower_ref)
    np.testing.assert_allclose(np.triu(c), np.triu(c_ref), rtol=1e-10, atol=1e-10)
    _assert_like_scipy(decomp.cho_solve(sl.cho_factor(S), B), sl.cho_solve(sl.cho_factor(S), B))
    logdet = decomp.logdet_cholesky(decomp.cho_factor(S))
    np.testing.assert_allclose(logdet, np.linalg.slogdet(S.to_numpy())[1], rtol=1e-12)
    T = pd.DataFrame(np.triu(A.to_numpy()) + 6 * np.eye(6))
    _assert_like_scipy(decomp.solve_triangular(T, B), sl.solve_triangular(T, B))


def test_truncated_svd_dataframe(square):
    A, _, _ = square
    U, s, Vt = decomp.truncated_svd(A, 2)
    assert type(U) is type(s) is type(Vt) is np.ndarray
    np.testing.assert_allclose(s, sl.svd(A, compute_uv=False)[:2], rtol=1e-8)
