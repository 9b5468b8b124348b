"""Host-only pieces of :class:`~gpulinalg.gp.GaussianProcessRegressor` (NumPy / SciPy on the
CPU whatever the backend): SciPy's L-BFGS-B driving the dispatched log marginal likelihood,
the ``normalize_y`` statistics, the GP prior, and the draws of ``sample_y``."""

import warnings

import numpy as np

__all__ = ["minimize_lbfgsb", "normalized_targets", "prior", "draw_samples"]


def minimize_lbfgsb(obj_func, initial_theta, bounds):
    """``(theta_opt, func_min)`` of SciPy's L-BFGS-B on ``obj_func`` (value and gradient),
    with a :class:`~sklearn.exceptions.ConvergenceWarning` when it did not converge."""
    import scipy.optimize
    from sklearn.exceptions import ConvergenceWarning
    res = scipy.optimize.minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True,
                                  bounds=bounds)
    if res.status != 0:
        warnings.warn(f"lbfgs failed to converge (status={res.status}): {res.message}",
                      ConvergenceWarning, stacklevel=5)
    return res.x, res.fun


def normalized_targets(y, normalize):
    """``(y, mean, std)``: with ``normalize``, ``y`` scaled to zero mean and unit variance per
    column (constant columns are not scaled); else ``y`` with mean 0 and std 1."""
    if not normalize:
        shape = (y.shape[1],) if y.ndim == 2 else 1
        return y, np.zeros(shape), np.ones(shape)
    mean = np.atleast_1d(np.mean(y, axis=0))
    std = np.atleast_1d(np.std(y, axis=0))
    std[std < 10 * np.finfo(std.dtype).eps] = 1.0  # constant targets: no scaling
    return (y - np.mean(y, axis=0)) / (std if y.ndim == 2 else std[0]), mean, std


def prior(kernel, X, return_std, return_cov):
    """scikit-learn's prediction from the GP prior (an unfitted model)."""
    y_mean = np.zeros(shape=(X.shape[0] if hasattr(X, "shape") else len(X), 1)).squeeze()
    if return_cov:
        return y_mean, kernel(X)
    if return_std:
        return y_mean, np.sqrt(kernel.diag(X))
    return y_mean


def draw_samples(rng, y_mean, y_cov, n_samples):
    """scikit-learn's ``sample_y`` draws from the predicted mean and covariance."""
    if y_mean.ndim == 1:
        return rng.multivariate_normal(y_mean, y_cov, n_samples).T
    return np.hstack([rng.multivariate_normal(y_mean[:, t], y_cov[..., t], n_samples).T[
        :, np.newaxis] for t in range(y_mean.shape[1])])
