"""pandas input to ``gpulinalg.gp.GaussianProcessRegressor``: a DataFrame ``X`` and a Series
(or DataFrame) ``y`` give what NumPy input gives, with scikit-learn's feature-name
bookkeeping."""

import numpy as np
import pytest

pd = pytest.importorskip("pandas")
pytest.importorskip("sklearn")

from sklearn.gaussian_process import \
    GaussianProcessRegressor as SklearnGaussianProcessRegressor  # noqa: E402
from sklearn.gaussian_process.kernels import RBF, WhiteKernel  # noqa: E402

from gpulinalg.gp import GaussianProcessRegressor  # noqa: E402

KERNEL = RBF(length_scale=1.0) + WhiteKernel(noise_level=0.1)


@pytest.fixture
def data(rng):
    X = rng.uniform(-2, 2, (30, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.05 * rng.standard_normal(30)
    index = np.arange(500, 530)
    return pd.DataFrame(X, columns=["x1", "x2"], index=index), pd.Series(y, index=index, name="t")


def test_fit_predict_dataframe_equals_numpy(data, backend):
    df, series = data
    before_df, before_y = df.copy(), series.copy()
    on_pd = GaussianProcessRegressor(kernel=KERNEL, normalize_y=True).fit(df, series)
    on_np = GaussianProcessRegressor(kernel=KERNEL, normalize_y=True).fit(df.to_numpy(),
                                                                         series.to_numpy())
    np.testing.assert_allclose(on_pd.kernel_.theta, on_np.kernel_.theta, rtol=1e-10)
    mean, std = on_pd.predict(df, return_std=True)
    assert type(mean) is np.ndarray and type(std) is np.ndarray
    mean_np, std_np = on_np.predict(df.to_numpy(), return_std=True)
    np.testing.assert_allclose(mean, mean_np, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(std, std_np, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(on_pd.log_marginal_likelihood_value_,
                               on_np.log_marginal_likelihood_value_, rtol=1e-12)
    np.testing.assert_allclose(on_pd.score(df, series), on_np.score(df.to_numpy(),
                                                                    series.to_numpy()))
    pd.testing.assert_frame_equal(df, before_df)
    pd.testing.assert_series_equal(series, before_y)


def test_matches_sklearn_on_dataframe(data):
    df, series = data
    ours = GaussianProcessRegressor(kernel=KERNEL, random_state=0).fit(df, series)
    theirs = SklearnGaussianProcessRegressor(kernel=KERNEL, random_state=0).fit(df, series)
    np.testing.assert_allclose(ours.kernel_.theta, theirs.kernel_.theta, rtol=1e-6)
    np.testing.assert_allclose(ours.predict(df), theirs.predict(df), rtol=1e-6, atol=1e-8)


def test_two_target_dataframe(data):
    df, series = data
    Y = pd.DataFrame({"u": series, "v": -2 * series})
    mean = GaussianProcessRegressor(kernel=KERNEL).fit(df, Y).predict(df)
    ref = GaussianProcessRegressor(kernel=KERNEL).fit(df.to_numpy(), Y.to_numpy()) \
        .predict(df.to_numpy())
    assert type(mean) is np.ndarray and mean.shape == (30, 2)
    np.testing.assert_allclose(mean, ref, rtol=1e-10, atol=1e-12)


def test_feature_names_as_sklearn(data):
    df, series = data
    ours = GaussianProcessRegressor(kernel=KERNEL).fit(df, series)
    theirs = SklearnGaussianProcessRegressor(kernel=KERNEL).fit(df, series)
    assert ours.n_features_in_ == theirs.n_features_in_ == 2
    np.testing.assert_array_equal(ours.feature_names_in_, theirs.feature_names_in_)
    with pytest.raises(ValueError, match="feature names should match"):
        ours.predict(df.rename(columns={"x1": "other"}))
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        ours.predict(df.to_numpy())
    assert not hasattr(GaussianProcessRegressor(kernel=KERNEL).fit(df.to_numpy(), series),
                       "feature_names_in_")


def test_sample_y_and_missing_values(data):
    df, series = data
    gpr = GaussianProcessRegressor(kernel=KERNEL).fit(df, series)
    draws = gpr.sample_y(df.iloc[:5], n_samples=3, random_state=0)
    assert type(draws) is np.ndarray and draws.shape == (5, 3)
    bad = df.copy()
    bad.iloc[2, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        GaussianProcessRegressor(kernel=KERNEL).fit(bad, series)
