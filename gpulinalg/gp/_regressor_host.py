"""Host-only pieces of :class:`~gpulinalg.gp.GaussianProcessRegressor` (NumPy / SciPy on the
CPU whatever the backend): SciPy's L-BFGS-B driving the dispatched log marginal likelihood,
the ``normalize_y`` statistics, the GP prior, and the draws of ``sample_y``."""

import numpy as np

from .._runtime.errors import warn

__all__ = ["minimize_lbfgsb", "normalized_targets", "prior", "draw_samples"]


def minimize_lbfgsb(obj_func, initial_theta, bounds):
    """``(theta_opt, func_min)`` of SciPy's L-BFGS-B on ``obj_func`` (value and gradient),
    with a :class:`~sklearn.exceptions.ConvergenceWarning` when it did not converge."""
    import scipy.optimize
    from sklearn.exceptions import ConvergenceWarning
    res = scipy.optimize.minimize(obj_func, initial_theta, method="L-BFGS-B", jac=True,
                                  bounds=bounds)
    if res.status != 0:  # scikit-learn's message (sklearn.utils.optimize)
        warn(f"lbfgs failed to converge after {res.nit} iteration(s) (status={res.status}):\n"
             f"{res.message}\n", ConvergenceWarning)
    return res.x, res.fun


def normalized_targets(y, normalize):
    """``(y, mean, std)`` as scikit-learn keeps them: with ``normalize``, ``y`` scaled to zero
    mean and unit variance per column (``mean``/``std`` NumPy scalars for a 1-D ``y``, arrays
    of one entry per column otherwise; a zero standard deviation, or one below ``10 eps`` in a
    column, is replaced by 1); without, ``y`` unchanged with zeros and ones of shape
    ``(n_targets,)`` (``(1,)`` for a 1-D ``y``)."""
    if not normalize:
        shape = (y.shape[1],) if y.ndim == 2 else 1
        return y, np.zeros(shape), np.ones(shape)
    mean, std = np.mean(y, axis=0), np.std(y, axis=0)
    if np.isscalar(std):
        std = std if std != 0.0 else np.float64(1.0)
    else:
        std[std < 10 * np.finfo(std.dtype).eps] = 1.0  # constant targets: no scaling
    return (y - mean) / std, mean, std


def prior(kernel, X, return_std, return_cov, n_targets=None):
    """scikit-learn's prediction from the GP prior (an unfitted model), with ``n_targets``
    identical outputs (``None``: one, squeezed)."""
    t = 1 if n_targets is None else n_targets
    y_mean = np.zeros(shape=(X.shape[0] if hasattr(X, "shape") else len(X), t)).squeeze()
    if not (return_cov or return_std):
        return y_mean
    spread = kernel(X) if return_cov else kernel.diag(X)
    if t > 1:
        spread = np.repeat(np.expand_dims(spread, -1), repeats=t, axis=-1)
    return y_mean, (spread if return_cov else np.sqrt(spread))


def draw_samples(rng, y_mean, y_cov, n_samples):
    """scikit-learn's ``sample_y`` draws from the predicted mean and covariance."""
    if y_mean.ndim == 1:
        return rng.multivariate_normal(y_mean, y_cov, n_samples).T
    return np.hstack([rng.multivariate_normal(y_mean[:, t], y_cov[..., t], n_samples).T[
        :, np.newaxis] for t in range(y_mean.shape[1])])
