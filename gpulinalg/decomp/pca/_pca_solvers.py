"""PCA's solver choice (:func:`resolve_solver`, scikit-learn's ``"auto"`` rule), the resolved
options of one fit (:class:`FitConfig`), and Minka's MLE of the dimension
(:func:`infer_dimension`, for ``n_components="mle"``, on a host spectrum). No device code."""

from __future__ import annotations

import dataclasses
from math import lgamma, log
from typing import Any

import numpy as np

__all__ = ["SOLVERS", "resolve_solver", "FitConfig", "infer_dimension", "assess_dimension",
           "COV_MAX_FEATURES", "COV_MIN_RATIO", "FULL_MAX_DIM", "RANDOMIZED_MAX_FRACTION"]

SOLVERS = ("auto", "full", "covariance_eigh", "arpack", "randomized")
#: ``svd_solver="auto"`` thresholds (scikit-learn's): covariance when n_features <= 1000 ...
COV_MAX_FEATURES = 1000
#: ... and n_samples >= 10 n_features; full when max(shape) <= 500 (or ``"mle"``); randomized
#: when n_components < 0.8 min(shape); full otherwise. Sparse input: arpack.
COV_MIN_RATIO = 10
FULL_MAX_DIM = 500
RANDOMIZED_MAX_FRACTION = 0.8


def _is_fraction(n_components):
    return isinstance(n_components, (float, np.floating)) and \
        not float(n_components).is_integer()


def _auto(shape, n_components, sparse):
    m, n = shape
    if sparse:
        return "arpack"
    if n <= COV_MAX_FEATURES and m >= COV_MIN_RATIO * n:
        return "covariance_eigh"
    if max(m, n) <= FULL_MAX_DIM or n_components == "mle":
        return "full"
    if n_components is not None and not _is_fraction(n_components) \
            and 1 <= n_components < RANDOMIZED_MAX_FRACTION * min(m, n):
        return "randomized"
    return "full"


def resolve_solver(svd_solver: str, shape: tuple[int, int], n_components: Any,
                   sparse: bool = False) -> tuple[str, int | None]:
    """``(solver, k)``: the solver ``svd_solver`` resolves to, and the component count
    (``None`` when a variance fraction or ``"mle"`` picks it after the fit). The errors and
    their messages are scikit-learn's.

    Examples
    --------
    >>> resolve_solver("auto", (100000, 50), 5)
    ('covariance_eigh', 5)
    >>> resolve_solver("auto", (5000, 3000), 20)
    ('randomized', 20)
    >>> resolve_solver("auto", (300, 200), 0.9)
    ('full', None)
    >>> resolve_solver("auto", (300, 200), None, sparse=True)
    ('arpack', 199)
    """
    m, n = shape
    small = min(m, n)
    solver = _auto(shape, n_components, sparse) if svd_solver == "auto" else svd_solver
    if n_components is None:
        n_components = small - 1 if solver == "arpack" else small
    truncated = solver in ("arpack", "randomized")
    hint = " (sparse input: use svd_solver='covariance_eigh')" if sparse and truncated else ""
    if isinstance(n_components, str):
        if truncated:
            raise ValueError(f"n_components={n_components!r} cannot be a string with "
                             f"svd_solver='{solver}'{hint}")
        if m < n:
            raise ValueError("n_components='mle' is only supported if n_samples >= n_features")
        return solver, None
    low = 1 if truncated else 0
    if not low <= n_components <= small:
        raise ValueError(f"n_components={n_components!r} must be between {low} and "
                         f"min(n_samples, n_features)={small} with svd_solver={solver!r}"
                         f"{hint}")
    if solver == "arpack" and n_components == small:
        raise ValueError(f"n_components={n_components!r} must be strictly less than "
                         f"min(n_samples, n_features)={small} with svd_solver='arpack'")
    return solver, None if _is_fraction(n_components) else int(n_components)


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """The resolved options of one PCA fit (what the GPU and CPU twins receive).

    ``k`` is ``None`` when ``select`` (a variance fraction, or ``"mle"``) picks it after the
    fit; ``normalizer`` and ``tol`` steer the randomized and arpack solvers."""

    solver: str
    k: Any
    n_oversamples: int
    iterated_power: Any
    seed: int
    dtype: Any
    want_scores: bool
    whiten: bool
    select: Any = None
    normalizer: str = "auto"
    tol: float = 0.0


def assess_dimension(spectrum: np.ndarray, rank: int, n_samples: int) -> float:
    """Log-likelihood of a rank-``rank`` model of data with eigenvalues ``spectrum``
    (Minka, "Automatic choice of dimensionality for PCA", NIPS 2000; scikit-learn's formula).

    Examples
    --------
    >>> bool(assess_dimension(np.array([1.0, 1e-30, 1e-30]), 2, 10) == -np.inf)
    True
    """
    n_features = spectrum.shape[0]
    if not 1 <= rank < n_features:
        raise ValueError("the tested rank should be in [1, n_features - 1]")
    eps = 1e-15
    if spectrum[rank - 1] < eps:
        return -np.inf
    pu = -rank * log(2.0)
    for i in range(1, rank + 1):
        pu += lgamma((n_features - i + 1) / 2.0) - log(np.pi) * (n_features - i + 1) / 2.0
    pl = -float(np.sum(np.log(spectrum[:rank]))) * n_samples / 2.0
    v = max(eps, float(np.sum(spectrum[rank:])) / (n_features - rank))
    pv = -log(v) * n_samples * (n_features - rank) / 2.0
    m = n_features * rank - rank * (rank + 1.0) / 2.0
    pp = log(2.0 * np.pi) * (m + rank) / 2.0
    filled = np.array(spectrum, dtype=np.float64)
    filled[rank:] = v
    rows, cols = np.triu_indices(n_features, 1)
    keep = rows < rank
    rows, cols = rows[keep], cols[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.log((spectrum[rows] - spectrum[cols])
                       * (1.0 / filled[cols] - 1.0 / filled[rows]))
    pa = float(np.sum(terms + log(n_samples)))
    return pu + pl + pv + pp - pa / 2.0 - rank * log(n_samples) / 2.0


def infer_dimension(spectrum: np.ndarray, n_samples: int) -> int:
    """The rank in ``[1, n_features - 1]`` that maximizes :func:`assess_dimension`.

    Examples
    --------
    >>> infer_dimension(np.array([5.0, 1e-3, 9e-4, 8e-4]), 1000)
    1
    """
    spectrum = np.asarray(spectrum, dtype=np.float64)
    ll = [-np.inf] + [assess_dimension(spectrum, rank, n_samples)
                      for rank in range(1, spectrum.shape[0])]
    return int(np.argmax(ll))  # 0 when no rank has a finite likelihood (scikit-learn's)
