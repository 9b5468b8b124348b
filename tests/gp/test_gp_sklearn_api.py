"""gpulinalg.gp.GaussianProcessRegressor has scikit-learn 1.9's API: constructor parameters and
defaults, methods, fitted attributes (types and shapes as scikit-learn keeps them),
``copy_X_train``, ``n_targets``; shortcut records and warnings that point at the caller."""

import inspect
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor as SKGPR
from sklearn.gaussian_process.kernels import RBF, WhiteKernel

import gpulinalg
from gpulinalg.gp import GaussianProcessRegressor, exact_gp_solve


def data(n=12, d=2, t=None, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, (n, d))
    y = np.sin(2 * x[:, 0]) + 0.1 * rng.standard_normal(n)
    return x, (np.stack([y * (i + 1) + i for i in range(t)], axis=1) if t else y)


def test_constructor_is_sklearns_then_extras():
    ours = list(inspect.signature(GaussianProcessRegressor).parameters.values())
    theirs = list(inspect.signature(SKGPR).parameters.values())
    assert [(p.name, p.default, p.kind) for p in ours[:len(theirs)]] == \
        [(p.name, p.default, p.kind) for p in theirs]
    extras = ours[len(theirs):]
    assert [p.name for p in extras] == ["jitter", "precision", "solver", "cg_options"]
    assert [p.default for p in extras] == [None, "auto", "auto", None]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extras)
    assert set(GaussianProcessRegressor().get_params()) == set(SKGPR().get_params()) | {
        "jitter", "precision", "solver", "cg_options"}


def test_bases_methods_and_fitted_attributes():
    for base in (BaseEstimator, RegressorMixin, MultiOutputMixin):
        assert issubclass(GaussianProcessRegressor, base)
    public = {n for n in dir(SKGPR) if not n.startswith("_")}
    assert public <= set(dir(GaussianProcessRegressor))
    x, y = data()
    ref = SKGPR(RBF() + WhiteKernel()).fit(x, y)
    gp = GaussianProcessRegressor(RBF() + WhiteKernel()).fit(x, y)
    fitted = {n for n in vars(ref) if n.endswith("_") and not n.startswith("__")}
    fitted |= {"_y_train_mean", "_y_train_std"}
    # L_ is a property (a large factor stays on the GPU until read); the others are attributes
    assert fitted - {"L_"} <= set(vars(gp)), fitted - set(vars(gp))
    assert isinstance(gp.L_, np.ndarray) and gp.L_.shape == (len(x), len(x))
    assert not hasattr(GaussianProcessRegressor(), "L_")
    assert 0.9 < gp.score(x, y) <= 1.0
    assert np.isclose(gp.score(x, y), ref.score(x, y), rtol=1e-6)


@pytest.mark.parametrize("normalize_y", [False, True])
@pytest.mark.parametrize("t", [None, 1, 3])
def test_target_statistics_as_sklearn_keeps_them(normalize_y, t, backend):
    x, y = data(t=t)
    ref = SKGPR(RBF(), normalize_y=normalize_y, optimizer=None).fit(x, y)
    gp = GaussianProcessRegressor(RBF(), normalize_y=normalize_y, optimizer=None).fit(x, y)
    for name in ("_y_train_mean", "_y_train_std", "y_train_"):
        ours, theirs = getattr(gp, name), getattr(ref, name)
        assert type(ours) is type(theirs) and np.shape(ours) == np.shape(theirs), name
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, err_msg=name)
    lml = gp.log_marginal_likelihood(gp.kernel_.theta)
    assert type(lml) is np.float64 and type(gp.log_marginal_likelihood_value_) is np.float64
    assert np.isclose(lml, ref.log_marginal_likelihood(ref.kernel_.theta), rtol=1e-9)
    mean, std = gp.predict(x, return_std=True)
    ref_mean, ref_std = ref.predict(x, return_std=True)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(std, ref_std, rtol=1e-6, atol=1e-9)


def test_constant_target_scalar_std():
    x, _ = data()
    gp = GaussianProcessRegressor(RBF(), normalize_y=True).fit(x, np.full(len(x), 3.0))
    assert gp._y_train_std == 1.0 and gp._y_train_mean == 3.0
    np.testing.assert_allclose(gp.predict(x), 3.0)


@pytest.mark.parametrize("copy", [True, False])
def test_copy_X_train(copy, backend):
    x, y = data()
    gp = GaussianProcessRegressor(RBF(), copy_X_train=copy, optimizer=None).fit(x, y)
    assert (gp.X_train_ is x) is (not copy) and (gp.y_train_ is y) is (not copy)
    np.testing.assert_array_equal(gp.X_train_, x)
    ref = GaussianProcessRegressor(RBF(), optimizer=None).fit(x, y)
    np.testing.assert_allclose(gp.predict(x[:3]), ref.predict(x[:3]), rtol=1e-12)


@pytest.mark.parametrize("t", [None, 1, 2, 3])
def test_n_targets_prior_matches_sklearn(t):
    x, _ = data()
    ours, theirs = GaussianProcessRegressor(n_targets=t), SKGPR(n_targets=t)
    for kw in ({}, {"return_std": True}, {"return_cov": True}):
        a, b = ours.predict(x, **kw), theirs.predict(x, **kw)
        for u, v in zip(a if kw else (a,), b if kw else (b,)):
            assert u.shape == v.shape
            np.testing.assert_allclose(u, v, rtol=1e-12)
    np.testing.assert_allclose(ours.sample_y(x, 4), theirs.sample_y(x, 4), rtol=1e-9)


def test_n_targets_checked_and_parameters_validated():
    x, y = data(t=2)
    GaussianProcessRegressor(n_targets=2, optimizer=None).fit(x, y)
    with pytest.raises(ValueError, match=r"`n_targets`. Got 2 != 3"):
        GaussianProcessRegressor(n_targets=3).fit(x, y)
    for bad in ({"n_targets": 0}, {"n_targets": 1.5}, {"jitter": "lots"}, {"jitter": -1.0}):
        with pytest.raises(ValueError):
            GaussianProcessRegressor(**bad).fit(x, y)
    for bad in ({"copy_X_train": "yes"}, {"normalize_y": 1}):
        with pytest.raises(TypeError):
            GaussianProcessRegressor(**bad).fit(x, y)


def test_alpha_of_one_entry_is_not_rewritten():
    x, y = data()
    alpha = np.array([1e-2])
    gp = GaussianProcessRegressor(RBF(), alpha=alpha, optimizer=None).fit(x, y)
    assert gp.alpha is alpha  # scikit-learn replaces it by its element; we leave params alone
    ref = SKGPR(RBF(), alpha=1e-2, optimizer=None).fit(x, y)
    np.testing.assert_allclose(gp.predict(x), ref.predict(x), rtol=1e-9)


def test_non_pd_kernel_raises_by_default_and_jitters_on_request(backend):
    """A rank-3 DotProduct kernel pushed indefinite by 1e-9 (every backend's Cholesky fails)."""
    from sklearn.gaussian_process.kernels import DotProduct
    x, y, alpha = np.arange(12.0).reshape(6, 2), np.ones(6), np.full(6, -1e-9)
    with pytest.raises(np.linalg.LinAlgError, match="Try gradually increasing the 'alpha'"):
        GaussianProcessRegressor(DotProduct(), alpha=alpha, optimizer=None).fit(x, y)
    with pytest.warns(gpulinalg.IllConditionedWarning, match="jitter"):
        gp = GaussianProcessRegressor(DotProduct(), alpha=alpha, optimizer=None,
                                      jitter="auto").fit(x, y)
    assert gp.jitter_ > 1e-9
    gp = GaussianProcessRegressor(DotProduct(), alpha=alpha, optimizer=None, jitter=1e-6).fit(x, y)
    assert gp.jitter_ == 1e-6
    np.testing.assert_allclose(gp.predict(x), y, atol=1e-3)


def test_shortcuts_are_recorded():
    x, y = data()
    with gpulinalg.config(backend="cpu"):
        gp = GaussianProcessRegressor(RBF()).fit(x, y)
        assert gp.log_marginal_likelihood() == gp.log_marginal_likelihood_value_
        record = gpulinalg.last_run()
        assert (record.op, record.backend) == ("gp.log_marginal_likelihood", "none")
        res = exact_gp_solve(np.zeros((0, 0)), np.zeros(0))
        assert res.L.shape == (0, 0)
        assert (gpulinalg.last_run().op, gpulinalg.last_run().backend) == \
            ("gp.exact_gp_solve", "none")


class _NegativeDiagonalRBF(RBF):
    """An RBF whose diagonal is -1 (a subclass: evaluated by scikit-learn, not by a plan), so
    that every predicted variance comes out negative."""

    def diag(self, X):
        return np.full(len(X), -1.0)


def test_warnings_point_at_the_callers_line(backend):
    x, y = data()
    gp = GaussianProcessRegressor(_NegativeDiagonalRBF(), optimizer=None).fit(x, y)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        _, std = gp.predict(x[:3], return_std=True)
    hits = [w for w in rec if "Predicted variances smaller than 0" in str(w.message)]
    assert len(hits) == 1 and (hits[0].filename, hits[0].lineno) == (__file__, line)
    assert (std == 0).all()


def test_convergence_warning_points_at_the_fit_line(monkeypatch):
    import scipy.optimize

    real = scipy.optimize.minimize

    def one_step(*args, **kwargs):
        return real(*args, **kwargs, options={"maxiter": 1})

    monkeypatch.setattr(scipy.optimize, "minimize", one_step)
    x, y = data(n=30)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        GaussianProcessRegressor(RBF() + WhiteKernel()).fit(x, y)
    hits = [w for w in rec if issubclass(w.category, ConvergenceWarning)
            and "lbfgs failed to converge after 1 iteration(s)" in str(w.message)]
    assert hits and (hits[0].filename, hits[0].lineno) == (__file__, line)
