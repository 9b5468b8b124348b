"""The conditioning rule sees what the cheap bound cannot: a non-finite solution is reported
(both backends), and on the CPU LAPACK's ``?trcon`` runs once the bound is below sqrt(eps)."""

import warnings

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg import IllConditionedWarning, decomp


@pytest.mark.parametrize("scale", [1e-300, 1e-310])
def test_non_finite_solution_warns(backend, scale):
    a = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, scale]])
    with pytest.warns(IllConditionedWarning, match="not finite|condition number"):
        decomp.solve_triangular(a, np.array([1.0, 1.0, 1e300]))
    assert gpulinalg.last_run().details["rcond_bound"] < np.finfo(float).eps


def test_hilbert_cho_solve_warns_through_trcon(backend):
    """The CPU's LAPACK ``?trcon`` and the GPU's estimate through its own triangular solves
    (:func:`gpulinalg.decomp.triangular._triangular_cuda.rcond_estimate`) see what the bound
    misses."""
    h = scipy.linalg.hilbert(12)
    with pytest.warns(IllConditionedWarning):
        decomp.cho_solve(decomp.cho_factor(h), h @ np.ones(12))
    details = gpulinalg.last_run().details
    assert details["rcond_bound"] > np.finfo(float).eps  # the cheap bound alone misses it
    assert details["rcond_estimate"] < np.finfo(float).eps


@pytest.mark.parametrize("lower, trans", [(True, 0), (False, 0), (True, 1), (False, 2)])
def test_trcon_estimate_matches_the_true_condition(backend, lower, trans):
    rng = np.random.default_rng(7)
    t = np.tril(rng.standard_normal((40, 40))) + np.diag(np.logspace(0, -9, 40))
    t = t if lower else t.T
    op = {0: t, 1: t.T, 2: t.conj().T}[trans]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IllConditionedWarning)
        decomp.solve_triangular(t, np.ones(40), lower=lower, trans=trans)
        details = gpulinalg.last_run().details
    # the CPU estimates op(t)'s infinity norm (LAPACK's), the GPU t's 1-norm: both within
    # their estimators' factor of the truth
    true = 1.0 / min(np.linalg.cond(op, np.inf), np.linalg.cond(op, 1))
    true_max = 1.0 / max(np.linalg.cond(op, np.inf), np.linalg.cond(op, 1))
    assert "rcond_estimate" in details
    assert true_max / 20 <= details["rcond_estimate"] <= true * 20


def test_well_conditioned_solve_runs_no_estimate():
    a = np.triu(np.random.default_rng(0).standard_normal((50, 50))) + 10 * np.eye(50)
    with gpulinalg.config_context(backend="cpu"), warnings.catch_warnings():
        warnings.simplefilter("error", IllConditionedWarning)
        decomp.solve_triangular(a, np.ones(50))
    assert "rcond_estimate" not in gpulinalg.last_run().details


def _verdict(check, *args):
    from gpulinalg._runtime import dispatch
    dispatch._local.details = details = {}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                check(*args)
                outcome = "ok"
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"
    finally:
        dispatch._local.details = None
    rcond = details.get("rcond_bound")
    return outcome, "nan" if rcond != rcond else rcond, [str(w.message) for w in caught]


@pytest.mark.parametrize("diag", [None, 0.0, np.nan, np.inf, 1e-300])
@pytest.mark.parametrize("xval", [None, np.nan, np.inf, 1e300])
@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("k", [0, 3, 20])
def test_one_matrix_rule_matches_the_stack_rule(rng, diag, xval, squared, unit, k):
    from gpulinalg.decomp.triangular import _triangular_xp as tx
    a = np.triu(rng.standard_normal((5, 5))) + 3 * np.eye(5)
    x = rng.standard_normal((5, k) if k else 5)
    b = rng.standard_normal(x.shape)
    if diag is not None:
        a[2, 2] = diag
    if xval is not None:
        x[(1, 1) if k else 1] = xval
    if k:
        b[:, 0] = 0  # a zero right-hand side
    scale = tx.rhs_scale_host(b)
    np.testing.assert_array_equal(scale, tx.rhs_scale(b, np))
    fast = _verdict(tx.check_conditioning_host, a, scale, x, unit, squared)
    stack = _verdict(lambda *args: tx.judge(a, *tx.figures(*args), x.dtype, squared),
                     a, scale, x, unit, np)
    assert fast == stack


@pytest.mark.parametrize("shape, order", [((7, 1), "C"), ((7, 1), "F"), ((7, 3), "C"),
                                          ((7, 20), "C"), ((7, 3), "F")])
def test_host_column_absmax_matches_the_generic_reduction(shape, order):
    """The host's short roads (one column as a vector, few columns transposed) give the
    generic reduction's figures, NaN included."""
    from gpulinalg.decomp.triangular._triangular_xp import column_absmax, column_absmax_host
    x = np.asarray(np.random.default_rng(1).standard_normal(shape), order=order)
    x[2, 0] = -9.0
    x[4, -1] = np.nan
    got, want = column_absmax_host(x), column_absmax(x, np)
    assert got.shape == want.shape == (shape[1],) and got.dtype == np.float64
    np.testing.assert_array_equal(got, want)
