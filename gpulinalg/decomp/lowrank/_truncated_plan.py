"""How a :func:`~gpulinalg.decomp.truncated_svd` call runs (:class:`LowRankPlan`, resolved by
:func:`resolve_plan`) and what it returns with an error estimate (:class:`LowRankSVDResult`).
Pure Python: no array code."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

from ._sketch_options import NORMALIZERS, seed_of

__all__ = ["LowRankSVDResult", "LowRankPlan", "resolve_plan", "is_cupy_sparse",
           "EXACT_MAX_DIM", "EXACT_MIN_FRACTION", "METHODS"]

METHODS = ("auto", "randomized", "gesvdr", "exact")
#: ``method="auto"`` computes the full SVD when ``max(m, n) <= EXACT_MAX_DIM`` ...
EXACT_MAX_DIM = 500
#: ... or when ``k > EXACT_MIN_FRACTION * min(m, n)``; randomized otherwise (always for
#: sparse input).
EXACT_MIN_FRACTION = 0.25


class LowRankSVDResult(NamedTuple):
    """``SVDResult`` plus ``error``, an estimate of ``||A - U diag(S) Vh||_2``."""

    U: Any
    S: Any
    Vh: Any
    error: float


@dataclasses.dataclass(frozen=True)
class LowRankPlan:
    """How a call runs, as :func:`resolve_plan` decided it (also in ``last_run().details``)."""

    method: str
    k: int
    sketch: int
    n_iter: int
    normalizer: str
    seed: int
    dtype: Any
    error_estimate: bool = False
    out_of_core: Any = None
    progress: Any = None
    check_finite: bool = True


def resolve_plan(shape: tuple[int, int], k: int, *, sparse: bool = False, method: str = "auto",
                 n_oversamples: int = 10, n_iter: int | str = "auto",
                 power_iteration_normalizer: str = "auto", random_state: Any = None,
                 dtype: Any = np.float64, **extra: Any) -> LowRankPlan:
    """Resolve every ``"auto"`` of :func:`~gpulinalg.decomp.truncated_svd` for an ``m x n``
    matrix.

    * ``method="auto"``: ``"exact"`` when ``max(m, n) <= 500`` or ``k > 0.25 min(m, n)``
      (dense input), else ``"randomized"``.
    * ``n_iter="auto"``: 7 when ``k < 0.1 min(m, n)``, else 4 (scikit-learn's rule).
    * ``power_iteration_normalizer="auto"``: ``"CholQR"`` on the GPU, ``"LU"`` on the CPU
      (resolved where it runs).
    * sketch size ``l = min(k + n_oversamples, min(m, n))``.

    Examples
    --------
    >>> p = resolve_plan((20000, 2000), 32, random_state=0)
    >>> p.method, p.n_iter, p.sketch, p.normalizer
    ('randomized', 7, 42, 'auto')
    >>> resolve_plan((300, 200), 5).method
    'exact'
    """
    m, n = shape
    small = min(m, n)
    k = _check_k(k, small)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        dense_exact = max(m, n) <= EXACT_MAX_DIM or k > EXACT_MIN_FRACTION * small
        method = "exact" if dense_exact and not sparse else "randomized"
    if isinstance(n_oversamples, bool) or not isinstance(n_oversamples, (int, np.integer)) \
            or n_oversamples < 0:
        raise ValueError(f"n_oversamples must be an int >= 0, got {n_oversamples!r}")
    if n_iter == "auto":
        n_iter = 7 if k < 0.1 * small else 4
    if isinstance(n_iter, bool) or not isinstance(n_iter, (int, np.integer)) or n_iter < 0:
        raise ValueError(f"n_iter must be 'auto' or an int >= 0, got {n_iter!r}")
    normalizer = power_iteration_normalizer
    if normalizer not in ("auto", *NORMALIZERS):
        raise ValueError(f"power_iteration_normalizer must be 'auto' or one of {NORMALIZERS}, "
                         f"got {power_iteration_normalizer!r}")
    return LowRankPlan(method, k, min(k + int(n_oversamples), small), int(n_iter), normalizer,
                       seed_of(random_state), np.dtype(dtype), **extra)


def _check_k(k, small):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if not 0 <= k <= small:
        raise ValueError(f"k must be in [0, min(m, n)] = [0, {small}], got k={k}")
    return int(k)


def is_cupy_sparse(a: Any) -> bool:
    """True for a CuPy sparse matrix (told by its type's module: nothing is imported)."""
    return type(a).__module__.startswith("cupyx")
