"""scikit-learn's estimator checks on gpulinalg.gp.GaussianProcessRegressor."""

import pytest
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpulinalg.gp import GaussianProcessRegressor


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@parametrize_with_checks([GaussianProcessRegressor(),
                          GaussianProcessRegressor(RBF() + WhiteKernel(), normalize_y=True)])
def test_sklearn_compatible(estimator, check):
    check(estimator)
