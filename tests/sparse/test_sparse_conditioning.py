"""Issue 18, sparse: no silent answer on a singular or numerically singular system.

One rule on every engine (docs/sparse.md): a pivot the engine finds zero raises
SingularMatrixError; otherwise an estimated rcond below eps raises (check="raise"), warns
IllConditionedWarning (check="warn") or is ignored (check="ignore"). The same bodies run on the
CPU (SuperLU) and, through the ``backend`` fixture, on the GPU with the default library;
tests/sparse/test_sparse_gpu_singular.py runs them per GPU library.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import gpulinalg
from gpulinalg import IllConditionedWarning, LinAlgError, SingularMatrixError
from gpulinalg.sparse import default_tol, factorize, solve

from tests.support.sparse_ref import berr, graded, neumann1d, numerically_singular, spd, unsymmetric


def host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


@pytest.mark.parametrize("n", [50, 400])
@pytest.mark.parametrize("method", ["auto", "ldlt", "lu", "qr"])
def test_neumann_laplacian_raises(backend, method, n):
    """Singular, b = ones not in its range: SingularMatrixError on every method."""
    a = neumann1d(n)
    with pytest.raises(SingularMatrixError):
        solve(a, np.ones(n), method=method)
    with pytest.raises(SingularMatrixError):
        with factorize(a, method=method) as fac:
            fac.solve(np.ones(n))


def test_neumann_laplacian_cholesky_is_a_linalg_error(backend):
    with pytest.raises(LinAlgError, match="singular|positive definite"):
        solve(neumann1d(60), np.ones(60), method="cholesky")


@pytest.mark.parametrize("seed", range(4))
def test_numerically_singular_raises_warns_or_is_ignored(backend, seed):
    """cond ~ 1e17: last row = 0.3 row 3 + 0.7 row 7 (failed before: solved silently)."""
    a = numerically_singular(20, seed)
    b = np.random.default_rng(seed).standard_normal(20)
    with pytest.raises(SingularMatrixError, match="numerically singular|singular"):
        solve(a, b)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            solve(a, b, check="warn")
        except SingularMatrixError:  # an engine that sees a zero pivot raises whatever check
            pass
        else:
            ill = [w for w in caught if issubclass(w.category, IllConditionedWarning)]
            assert ill and ill[0].filename == __file__  # at the user's line
    with warnings.catch_warnings():
        warnings.simplefilter("error", IllConditionedWarning)
        try:
            solve(a, b, check="ignore")
        except SingularMatrixError:
            pass


def test_consistent_singular_rhs_still_flagged(backend):
    """b = ones is in the range of this matrix (0.3 + 0.7 = 1): x is modest, the growth says
    nothing; the tiny pivot (or the engine) must still flag it."""
    a = numerically_singular(20, 0)
    with pytest.raises(SingularMatrixError):
        solve(a, np.ones(20))


@pytest.mark.parametrize("cond", [1e3, 1e9, 1e13])
def test_well_enough_conditioned_is_silent(backend, cond):
    a = graded(40, cond, seed=1)
    b = np.random.default_rng(2).standard_normal(40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = solve(a, b, check="warn")
    assert berr(a, host(x), b) <= default_tol(40, np.float64)


@pytest.mark.parametrize("cond", [1e18, 1e22])
def test_ill_conditioned_beyond_eps(backend, cond):
    a = graded(40, cond, seed=3)
    b = np.random.default_rng(4).standard_normal(40)
    with pytest.raises(SingularMatrixError):
        solve(a, b)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            solve(a, b, check="warn", refine=0)
        except SingularMatrixError:
            return
    assert any(issubclass(w.category, IllConditionedWarning) for w in caught)
    assert gpulinalg.last_run().details["rcond"] < np.finfo(np.float64).eps


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("kind", ["spd", "unsymmetric"])
def test_rcond_estimate(backend, dtype, kind):
    rng = np.random.default_rng(5)
    a = (spd if kind == "spd" else unsymmetric)(50, rng, dtype)
    dense = a.toarray()
    exact = 1.0 / (np.linalg.norm(dense, 1) * np.linalg.norm(np.linalg.inv(dense), 1))
    with factorize(a) as fac:
        est = fac.rcond()
        assert fac.rcond() == est  # kept
        assert exact <= est * (1 + 1e-10) and est <= 10 * exact  # ||A⁻¹|| est is a lower bound
        fac.refactorize(a * 4.0)
        np.testing.assert_allclose(fac.rcond(), est, rtol=1e-8)  # recomputed, same value


def test_estimator_matches_scipy_onenormest(rng):
    from gpulinalg.sparse import _condition_xp
    for seed in range(5):
        a = unsymmetric(60, np.random.default_rng(seed)).tocsc()
        lu = spla.splu(a)
        op = spla.LinearOperator(a.shape, matvec=lu.solve,
                                 rmatvec=lambda v: lu.solve(v, trans="T"))
        ours = _condition_xp.inverse_norm1(lu.solve, lambda v: lu.solve(v, trans="T"), 60,
                                           np.zeros(1))
        exact = np.linalg.norm(np.linalg.inv(a.toarray()), 1)
        assert ours <= exact * (1 + 1e-12)
        assert ours >= exact / 3 and spla.onenormest(op) <= exact * (1 + 1e-12)


def test_ignore_estimates_nothing(backend):
    a = numerically_singular(20, 1)
    try:
        solve(a, np.arange(20.0), method="lu", check="ignore")
    except SingularMatrixError:
        return  # the engine found a zero pivot
    assert "rcond" not in gpulinalg.last_run().details


def test_rcond_trigger_thresholds():
    from gpulinalg.sparse import _condition_xp
    eps = np.finfo(np.float64).eps
    assert not _condition_xp.triggered(1e3, 1e-3, np.float64)
    assert _condition_xp.triggered(1.0 / np.sqrt(eps), None, np.float64)
    assert _condition_xp.triggered(None, 0.5 * np.sqrt(eps), np.float64)
    assert _condition_xp.triggered(1e4, None, np.float32)  # 1/sqrt(eps32) ~ 2900


def test_empty_factorization_rcond():
    with factorize(sp.csr_matrix((0, 0))) as fac:
        assert fac.rcond() == np.inf


def test_perturbed_gpu_factor_rechecks_on_host():
    """A GPU factor with pivots its engine perturbed (cuDSS) cannot tell a small genuine pivot
    from a zero one: a solve whose growth is suspicious is re-done by SuperLU on the host, so
    cond 1e13 stays silent and accurate, and a singular matrix still raises. Simulated on the
    CPU with a SuperLU factor marked as a perturbed GPU factor."""
    from gpulinalg.sparse import _factor_xp, _superlu_host
    a = graded(40, 1e13, seed=1)
    b = np.random.default_rng(2).standard_normal(40)
    f = _superlu_host.SuperLUFactor(a.indptr, a.indices, a.data, 40, "lu")
    f.perturbed, f.device, f.pivot_eps = 1, "fake-gpu", 500 * np.finfo(np.float64).eps
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x, report = _factor_xp.checked_solve(f, b, check="warn", tol=None, max_steps=5,
                                             what="t")
    assert "host_recheck" in report and f.recheck_twin is not None
    assert berr(a, host(x), b) <= default_tol(40, np.float64)
    _factor_xp.release(f)
    assert f.recheck_twin is None
    s = numerically_singular(20, 0)
    g = _superlu_host.SuperLUFactor(s.indptr, s.indices, s.data, 20, "lu")
    g.perturbed, g.device, g.pivot_eps = 1, "fake-gpu", 500 * np.finfo(np.float64).eps
    b = np.random.default_rng(0).standard_normal(20)
    with pytest.raises(SingularMatrixError):
        _factor_xp.checked_solve(g, b, check="raise", tol=None, max_steps=5, what="t")
