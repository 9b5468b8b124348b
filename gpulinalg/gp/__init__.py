"""Exact Gaussian-process regression on the GPU, scikit-learn compatible.

* :class:`GaussianProcessRegressor` — scikit-learn's estimator and kernels; kernel matrices and
  likelihood gradients on the GPU, factorizations through :mod:`gpulinalg.decomp`.
* :func:`exact_gp_solve` — the functional core for a kernel matrix you built yourself.
"""

from ._core import GPSolveResult, exact_gp_solve
from ._regressor import GaussianProcessRegressor

__all__ = ["GaussianProcessRegressor", "exact_gp_solve", "GPSolveResult"]
