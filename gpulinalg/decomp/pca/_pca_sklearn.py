"""The one adapter between :class:`gpulinalg.decomp.PCA` and scikit-learn: it imports
scikit-learn (only when ``PCA`` is first used), makes the class with scikit-learn's bases, and
holds every use of scikit-learn's private names (parameter constraints, feature-name checks),
checked against :data:`KNOWN_VERSIONS` by the test suite."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = ["build", "truncated_svd_constraints", "validate_params", "check_feature_names",
           "not_fitted", "wrap_output",
           "KNOWN_VERSIONS", "INSTALL_HINT"]

#: scikit-learn releases (major, minor) whose private names used here were checked.
KNOWN_VERSIONS = ((1, 4), (1, 5), (1, 6), (1, 7), (1, 8), (1, 9))
INSTALL_HINT = "pip install 'gpulinalg[sklearn]'"


def _constraints() -> dict:
    from sklearn.utils._param_validation import Interval, RealNotInt, StrOptions
    return {
        "n_components": [Interval(numbers.Integral, 0, None, closed="left"),
                         Interval(RealNotInt, 0, 1, closed="neither"), StrOptions({"mle"}),
                         None],
        "copy": ["boolean"],
        "whiten": ["boolean"],
        "svd_solver": [StrOptions({"auto", "full", "covariance_eigh", "arpack", "randomized"})],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "iterated_power": [StrOptions({"auto"}), Interval(numbers.Integral, 0, None,
                                                          closed="left")],
        "n_oversamples": [Interval(numbers.Integral, 1, None, closed="left")],
        # gpulinalg's extras: the CholQR normalizer, numpy Generators as random_state
        "power_iteration_normalizer": [StrOptions({"auto", "QR", "LU", "none", "CholQR"})],
        "random_state": ["random_state", np.random.Generator],
    }


def truncated_svd_constraints() -> dict:
    """``sklearn.decomposition.TruncatedSVD``'s parameter constraints (its own names; the
    ``CholQR`` normalizer and NumPy Generators as gpulinalg's extras)."""
    from sklearn.utils._param_validation import Interval, StrOptions
    return {
        "n_components": [Interval(numbers.Integral, 1, None, closed="left")],
        "algorithm": [StrOptions({"arpack", "randomized"})],
        "n_iter": [Interval(numbers.Integral, 0, None, closed="left")],
        "n_oversamples": [Interval(numbers.Integral, 1, None, closed="left")],
        "power_iteration_normalizer": [StrOptions({"auto", "QR", "LU", "none",
                                                   "CholQR"})],
        "random_state": ["random_state", np.random.Generator],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
    }


def build(body: type, name: str, module: str, constraints: Any = None) -> type:
    """``body`` made a scikit-learn estimator (``BaseEstimator`` with the transformer mixins,
    as ``sklearn.decomposition.PCA``); without scikit-learn, a class whose construction raises
    an ImportError naming the extra to install."""
    try:
        from sklearn.base import (BaseEstimator, ClassNamePrefixFeaturesOutMixin,
                                  TransformerMixin)
        constraints = (constraints or _constraints)()
    except ImportError as exc:
        return _unavailable(name, module, exc)
    # transform/fit_transform stay on ``body``: scikit-learn's set_output wrapper (applied
    # only to methods a class defines itself) would put its own frame between the user's line
    # and gpulinalg's warnings; the methods call :func:`wrap_output` instead.
    namespace = {"__doc__": body.__doc__, "__module__": module, "__qualname__": name,
                 "_parameter_constraints": constraints}
    return type(name, (body, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator),
                namespace)


def _unavailable(name, module, exc):
    message = f"gpulinalg.decomp.{name} needs scikit-learn ({exc}): {INSTALL_HINT}"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ImportError(message)

    return type(name, (), {"__init__": __init__, "__module__": module, "__qualname__": name,
                           "__doc__": message})


def _plainly_valid(est: Any) -> bool:
    """The common, plainly valid parameter values, told in a microsecond (scikit-learn's own
    validation costs hundreds): anything else goes through scikit-learn's checks."""
    n, power, over = est.n_components, est.iterated_power, est.n_oversamples
    return ((n is None or n == "mle" or (type(n) is int and n >= 0)
             or (type(n) is float and 0 < n < 1))
            and type(est.copy) is bool and type(est.whiten) is bool
            and est.svd_solver in ("auto", "full", "covariance_eigh", "arpack", "randomized")
            and type(est.tol) in (int, float) and est.tol >= 0
            and (power == "auto" or (type(power) is int and power >= 0))
            and type(over) is int and over >= 1
            and est.power_iteration_normalizer in ("auto", "QR", "LU", "none", "CholQR")
            and (est.random_state is None or type(est.random_state) is int))


def validate_params(est: Any) -> None:
    """scikit-learn's parameter validation (its ``InvalidParameterError`` and messages)."""
    if not _plainly_valid(est):
        est._validate_params()


def check_feature_names(est: Any, X: Any, reset: bool) -> None:
    """scikit-learn's ``feature_names_in_`` bookkeeping (set on fit, checked after)."""
    from sklearn.utils.validation import _check_feature_names
    _check_feature_names(est, X, reset=reset)


def wrap_output(est: Any, out: Any, X: Any) -> Any:
    """``out`` in the container ``set_output`` / ``sklearn.set_config(transform_output=...)``
    asks for (unchanged for "default"; a pandas or polars frame of host data otherwise)."""
    from sklearn.utils._set_output import _get_output_config, _wrap_data_with_container
    if _get_output_config("transform", est)["dense"] == "default":
        return out
    from ..._runtime import arrays as _arrays
    return _wrap_data_with_container("transform", _arrays.to_host(out), X, est)


def not_fitted(name: str) -> Exception:
    from sklearn.exceptions import NotFittedError
    return NotFittedError(f"This {name} instance is not fitted yet. Call 'fit' with "
                          "appropriate arguments before using this estimator.")
