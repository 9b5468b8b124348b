"""``gpulinalg demo`` steps of the gp module: a GP's likelihood, fit and predictions, each
against scikit-learn's ``GaussianProcessRegressor`` on the same data."""

import numpy as np

from .._demo import compare

REFERENCE = "scikit-learn's GP"


def _data(n, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, d))
    y = np.sin(2 * np.pi * x.sum(axis=1) / d) + 0.1 * rng.standard_normal(n)
    return x, y


def _kernel(d):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    return ConstantKernel(1.0) * RBF(np.ones(d)) + WhiteKernel(1.0)


def step(small):
    """Log marginal likelihood + gradient, a full fit, and predict with std, vs scikit-learn."""
    from sklearn.gaussian_process import GaussianProcessRegressor as SKGPR

    from . import GaussianProcessRegressor
    n = 200 if small else 2000
    x, y = _data(n)
    k = _kernel(x.shape[1])
    ours = GaussianProcessRegressor(k, optimizer=None).fit(x, y)
    ref = SKGPR(k, optimizer=None).fit(x, y)
    theta = k.theta

    def same_lml(got, r):
        return np.isclose(got[0], r[0], rtol=1e-9) and np.allclose(got[1], r[1], rtol=1e-6,
                                                                   atol=1e-6)
    rows = [compare(f"GP log-likelihood + gradient n={n}",
                    lambda: ours.log_marginal_likelihood(theta, eval_gradient=True),
                    lambda: ref.log_marginal_likelihood(theta, True), REFERENCE, same_lml,
                    own_cpu_engine=True)]
    rows.append(compare(
        f"GP fit (L-BFGS-B) n={n}",
        lambda: GaussianProcessRegressor(k, random_state=0).fit(x, y),
        lambda: SKGPR(k, random_state=0).fit(x, y), REFERENCE,
        lambda got, r: np.isclose(got.log_marginal_likelihood_value_,
                                  r.log_marginal_likelihood_value_, rtol=1e-6),
        own_cpu_engine=True))
    fitted = GaussianProcessRegressor(k, random_state=0).fit(x, y)
    fitted_ref = SKGPR(fitted.kernel_, optimizer=None).fit(x, y)  # the same kernel on both
    queries = 500 if small else 5000
    xq, _ = _data(queries, seed=1)

    def same_prediction(got, r):
        return np.allclose(got[0], r[0], rtol=1e-7, atol=1e-9) and \
            np.allclose(got[1], r[1], rtol=1e-7, atol=1e-9)
    rows.append(compare(f"GP predict with std, {queries} points",
                        lambda: fitted.predict(xq, return_std=True),
                        lambda: fitted_ref.predict(xq, return_std=True), REFERENCE,
                        same_prediction, own_cpu_engine=True))
    return rows
