"""scikit-learn's estimator checks (``check_estimator``, one test per check) on
gpulinalg.gp.GaussianProcessRegressor, on both backends (the ``backend`` fixture)."""

import pytest
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpulinalg.gp import GaussianProcessRegressor


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@parametrize_with_checks([GaussianProcessRegressor(),
                          GaussianProcessRegressor(RBF() + WhiteKernel(), normalize_y=True),
                          GaussianProcessRegressor(copy_X_train=False)])
def test_sklearn_compatible(estimator, check, backend):
    check(estimator)
