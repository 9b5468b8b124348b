"""NumPy's floating-point warnings of a CPU run (overflow, invalid value, division by zero) come
once, as a ``RuntimeWarning`` naming the operation, at the caller's line, not at a line inside
gpulinalg or SciPy."""

import warnings

import numpy as np

import gpulinalg
from gpulinalg import decomp, dense


def _caught(call):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        call()
    return [w for w in seen if issubclass(w.category, RuntimeWarning)]


def test_overflow_is_told_at_the_callers_line():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b = np.array([1e300, 1e300, 3e300])
    seen = _caught(lambda: decomp.lstsq(a, b))
    assert seen and all(w.filename == __file__ for w in seen)
    assert "decomp.lstsq: overflow" in str(seen[0].message)


def test_invalid_value_in_a_product_names_the_operation():
    a = np.array([[np.inf, 1.0], [1.0, 1.0]])
    with gpulinalg.config_context(backend="cpu"):
        seen = _caught(lambda: dense.matmul(a, np.array([[0.0], [1.0]])))
    assert len(seen) == 1 and seen[0].filename == __file__
    assert str(seen[0].message).startswith("dense.matmul: invalid value")


def test_a_clean_run_warns_nothing_and_numpy_is_as_before():
    assert _caught(lambda: decomp.solve(np.eye(3) * 2, np.ones(3))) == []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        np.float64(1e308) * 10  # outside gpulinalg: NumPy's own warning, untouched
    assert any("overflow encountered" in str(w.message) for w in seen)
