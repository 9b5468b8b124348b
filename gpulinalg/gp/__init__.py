"""Exact Gaussian-process regression on the GPU, scikit-learn compatible.

* :class:`GaussianProcessRegressor` — scikit-learn's estimator and kernels; kernel matrices and
  likelihood gradients on the GPU, factorizations through :mod:`gpulinalg.decomp`. Needs
  scikit-learn (imported when the class is first used).
* :func:`exact_gp_solve` — the functional core for a kernel matrix you built yourself.
* :class:`CGOptions` — the options of the matrix-free solver (``solver="cg"``).
"""

from ._cg_options import CGOptions
from ._results import GPSolveResult
from ._solve_api import exact_gp_solve

__all__ = ["GaussianProcessRegressor", "exact_gp_solve", "GPSolveResult", "CGOptions"]


def __getattr__(name):
    if name == "GaussianProcessRegressor":
        try:
            from ._regressor_api import GaussianProcessRegressor
        except ImportError as exc:
            if "sklearn" not in str(exc):
                raise
            raise ImportError(f"gpulinalg.gp.GaussianProcessRegressor needs scikit-learn "
                              f"({exc}): pip install 'gpulinalg[sklearn]'") from exc
        globals()[name] = GaussianProcessRegressor
        return GaussianProcessRegressor
    raise AttributeError(f"module 'gpulinalg.gp' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"GaussianProcessRegressor"})
