"""PCA of data so small that its variances underflow (``X * 1e-200``): the ratios are the
unscaled data's where every singular value is known, NaN with a warning where the total is not,
never a silent ``[0, 0, 0]``."""

import numpy as np
import pytest

pytest.importorskip("sklearn")
from gpulinalg.decomp import PCA  # noqa: E402

X = np.random.default_rng(3).standard_normal((60, 6))


@pytest.mark.parametrize("solver", ["full", "covariance_eigh", "auto"])
def test_ratios_survive_underflowing_variances(backend, solver):
    tiny = PCA(3, svd_solver=solver).fit(X * 1e-200)
    ref = PCA(3, svd_solver=solver).fit(X)
    np.testing.assert_allclose(tiny.explained_variance_ratio_, ref.explained_variance_ratio_,
                               rtol=1e-10)
    np.testing.assert_allclose(tiny.singular_values_, ref.singular_values_ * 1e-200, rtol=1e-10)


def test_randomized_says_the_total_is_unknown(backend):
    with pytest.warns(RuntimeWarning, match="underflows"):
        tiny = PCA(3, svd_solver="randomized", random_state=0).fit(X * 1e-200)
    assert np.isnan(tiny.explained_variance_ratio_).all()


def test_data_without_variance_keeps_zero_ratios(backend):
    assert not PCA(2, svd_solver="full").fit(np.ones((10, 4))).explained_variance_ratio_.any()
