"""``gpulinalg demo`` steps of the gp module: a GP's likelihood, fit and predictions, each
against scikit-learn's ``GaussianProcessRegressor`` on the same data."""


import numpy as np

from .._demo import timed as _timed
from .._runtime import last_run


def _data(n, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, d))
    y = np.sin(2 * np.pi * x.sum(axis=1) / d) + 0.1 * rng.standard_normal(n)
    return x, y


def _kernel(d):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    return ConstantKernel(1.0) * RBF(np.ones(d)) + WhiteKernel(1.0)



def _row(name, seconds, t_ref, check):
    rec = last_run()
    return dict(step=name, where=f"{rec.backend} ({rec.reason})", seconds=seconds,
                reference="sklearn GaussianProcessRegressor", reference_seconds=t_ref,
                check=bool(check))


def step(small):
    """Log marginal likelihood + gradient, a full fit, and predict with std, vs scikit-learn."""
    from sklearn.gaussian_process import GaussianProcessRegressor as SKGPR

    from . import GaussianProcessRegressor
    n = 300 if small else 2000
    x, y = _data(n)
    k = _kernel(x.shape[1])
    ours = GaussianProcessRegressor(k, optimizer=None).fit(x, y)
    ref = SKGPR(k, optimizer=None).fit(x, y)
    theta = k.theta
    (lml, grad), t = _timed(lambda: ours.log_marginal_likelihood(theta, eval_gradient=True))
    (lml_r, grad_r), t_ref = _timed(lambda: ref.log_marginal_likelihood(theta, True))
    ok = np.isclose(lml, lml_r, rtol=1e-9) and np.allclose(grad, grad_r, rtol=1e-6, atol=1e-6)
    rows = [_row(f"GP log-likelihood + gradient n={n}", t, t_ref, ok)]
    fitted, t = _timed(lambda: GaussianProcessRegressor(k, random_state=0).fit(x, y))
    fit_rec = _row(f"GP fit (L-BFGS-B) n={n}", t, 0.0, True)
    ref, t_ref = _timed(lambda: SKGPR(k, random_state=0).fit(x, y))
    fit_rec.update(reference_seconds=t_ref, check=bool(np.isclose(
        fitted.log_marginal_likelihood_value_, ref.log_marginal_likelihood_value_, rtol=1e-6)))
    rows.append(fit_rec)
    xq, _ = _data(500, seed=1)
    (m, s), t = _timed(lambda: fitted.predict(xq, return_std=True))
    same = GaussianProcessRegressor(ref.kernel_, optimizer=None).fit(x, y)
    (m1, s1) = same.predict(xq, return_std=True)
    (mr, sr), t_ref = _timed(lambda: ref.predict(xq, return_std=True))
    ok = np.allclose(m1, mr, rtol=1e-7, atol=1e-9) and np.allclose(s1, sr, rtol=1e-7, atol=1e-9)
    rows.append(_row("GP predict with std, 500 points", t, t_ref, ok and np.isfinite(m).all()))
    return rows
