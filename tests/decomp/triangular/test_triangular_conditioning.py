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


def test_hilbert_cho_solve_warns_through_trcon():
    h = scipy.linalg.hilbert(12)
    with gpulinalg.config_context(backend="cpu"):
        with pytest.warns(IllConditionedWarning):
            decomp.cho_solve(decomp.cho_factor(h), h @ np.ones(12))
        details = gpulinalg.last_run().details
    assert details["rcond_bound"] > np.finfo(float).eps  # the cheap bound alone misses it
    assert details["rcond_estimate"] < np.finfo(float).eps


@pytest.mark.parametrize("lower, trans", [(True, 0), (False, 0), (True, 1), (False, 2)])
def test_trcon_estimate_matches_the_true_condition(lower, trans):
    rng = np.random.default_rng(7)
    t = np.tril(rng.standard_normal((40, 40))) + np.diag(np.logspace(0, -9, 40))
    t = t if lower else t.T
    op = {0: t, 1: t.T, 2: t.conj().T}[trans]
    with gpulinalg.config_context(backend="cpu"), warnings.catch_warnings():
        warnings.simplefilter("ignore", IllConditionedWarning)
        decomp.solve_triangular(t, np.ones(40), lower=lower, trans=trans)
        details = gpulinalg.last_run().details
    true = 1.0 / np.linalg.cond(op, np.inf)
    if "rcond_estimate" in details:  # within LAPACK's estimator's factor of the truth
        assert true / 20 <= details["rcond_estimate"] <= true * 20


def test_well_conditioned_solve_runs_no_estimate():
    a = np.triu(np.random.default_rng(0).standard_normal((50, 50))) + 10 * np.eye(50)
    with gpulinalg.config_context(backend="cpu"), warnings.catch_warnings():
        warnings.simplefilter("error", IllConditionedWarning)
        decomp.solve_triangular(a, np.ones(50))
    assert "rcond_estimate" not in gpulinalg.last_run().details
