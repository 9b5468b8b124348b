"""PCA's solver choice (:func:`resolve_solver`, scikit-learn's ``"auto"`` rule) and the
resolved options of one fit (:class:`FitConfig`). Pure Python: no array code."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["SOLVERS", "resolve_solver", "FitConfig", "COV_MAX_FEATURES", "COV_MIN_RATIO",
           "FULL_MAX_DIM", "RANDOMIZED_MAX_FRACTION"]

SOLVERS = ("auto", "full", "covariance_eigh", "randomized")
#: ``svd_solver="auto"`` thresholds (scikit-learn's): covariance when n_features <= 1000 ...
COV_MAX_FEATURES = 1000
#: ... and n_samples >= 10 n_features; full when max(shape) <= 500; randomized when
#: n_components < 0.8 min(shape); full otherwise.
COV_MIN_RATIO = 10
FULL_MAX_DIM = 500
RANDOMIZED_MAX_FRACTION = 0.8


def resolve_solver(svd_solver: str, shape: tuple[int, int],
                   n_components: int | float | None) -> tuple[str, int | None]:
    """``(solver, k)``: the solver ``svd_solver`` resolves to, and the component count
    (``None`` when a variance fraction picks it after the fit).

    Examples
    --------
    >>> resolve_solver("auto", (100000, 50), 5)
    ('covariance_eigh', 5)
    >>> resolve_solver("auto", (5000, 3000), 20)
    ('randomized', 20)
    >>> resolve_solver("auto", (300, 200), 0.9)
    ('full', None)
    """
    m, n = shape
    small = min(m, n)
    frac = isinstance(n_components, (float, np.floating)) and not float(n_components).is_integer()
    if n_components is None:
        k = small
    elif frac:
        if not 0 < n_components < 1:
            raise ValueError(f"n_components={n_components!r} must be in (0, 1) as a fraction")
        k = None
    elif isinstance(n_components, (int, np.integer, float)) and not isinstance(n_components, bool):
        k = int(n_components)
    else:
        raise ValueError(f"n_components must be None, an int or a float in (0, 1), got "
                         f"{n_components!r}")
    solver = svd_solver
    if solver == "auto":
        if n <= COV_MAX_FEATURES and m >= COV_MIN_RATIO * n:
            solver = "covariance_eigh"
        elif max(m, n) <= FULL_MAX_DIM or k is None:
            solver = "full"
        elif 1 <= k < RANDOMIZED_MAX_FRACTION * small:
            solver = "randomized"
        else:
            solver = "full"
    if k is not None:
        low = 1 if solver == "randomized" else 0
        if not low <= k <= small:
            raise ValueError(f"n_components={k} must be between {low} and min(n_samples, "
                             f"n_features)={small} with svd_solver={solver!r}")
    elif solver == "randomized":
        raise ValueError("a fractional n_components needs svd_solver='full' or "
                         "'covariance_eigh'")
    return solver, k


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """The resolved options of one PCA fit (what the GPU and CPU twins receive)."""

    solver: str
    k: Any  # int, or None for a variance fraction
    n_oversamples: int
    iterated_power: Any
    seed: int
    dtype: Any
    want_scores: bool
    whiten: bool
    fraction: Any = None
