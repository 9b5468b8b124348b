"""The numerical side of :class:`gpulinalg.decomp.PCA`: solver choice and the fit itself,
written once for NumPy and CuPy, in core or streamed from the host."""

import dataclasses
from typing import Any

import numpy as np

from .._runtime.dispatch import note
from . import _ooc
from ._randomized import LinearOperator, randomized_svd
from ._sketch import hermitian, resolve_normalizer, svd_flip, to_host

__all__ = ["SOLVERS", "resolve_solver", "FitConfig", "fit_cpu", "fit_gpu", "fit_streamed_gpu",
           "COV_MAX_FEATURES", "COV_MIN_RATIO", "FULL_MAX_DIM", "RANDOMIZED_MAX_FRACTION"]

SOLVERS = ("auto", "full", "covariance_eigh", "randomized")
#: ``svd_solver="auto"`` thresholds (scikit-learn's): covariance when n_features <= 1000 ...
COV_MAX_FEATURES = 1000
#: ... and n_samples >= 10 n_features; full when max(shape) <= 500; randomized when
#: n_components < 0.8 min(shape); full otherwise.
COV_MIN_RATIO = 10
FULL_MAX_DIM = 500
RANDOMIZED_MAX_FRACTION = 0.8


def resolve_solver(svd_solver, shape, n_components):
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
    solver: str
    k: Any  # int, or None for a variance fraction
    n_oversamples: int
    iterated_power: Any
    seed: int
    dtype: Any
    want_scores: bool
    whiten: bool
    fraction: Any = None


def fit_cpu(X, cfg):
    return _fit(np, X, cfg)


def fit_gpu(X, cfg):
    import cupy
    return _fit(cupy, X, cfg)


def _materialize(xp, X):
    if isinstance(X, _ooc.HostMatrix):
        if xp is np and not X.in_memory:
            return None  # stream it
        X = X.materialize()
        return X if xp is np else xp.asarray(np.ascontiguousarray(X))
    return X


def _fit(xp, X, cfg):
    dense = _materialize(xp, X)
    if dense is None:
        return _fit_streamed(_ooc.NumpyStreamer(X), X, cfg)
    X = dense.astype(cfg.dtype, copy=False)
    m, n = X.shape
    mean64 = X.mean(axis=0, dtype=np.float64)
    mean = mean64.astype(cfg.dtype)
    xc = X - mean
    if cfg.solver == "full":
        out = _full(xp, xc, cfg)
    elif cfg.solver == "covariance_eigh":
        out = _covariance(xp, X, mean64, cfg)
    else:
        out = _randomized(xp, xc, cfg)
    return _finish(xp, out, mean, m, n, cfg)


def _full(xp, xc, cfg):
    if xp is np:
        from scipy.linalg import svd
        U, S, Vt = svd(xc, full_matrices=False, check_finite=False)
    else:
        U, S, Vt = xp.linalg.svd(xc, full_matrices=False)
    U, Vt = svd_flip(xp, U, Vt)
    m = xc.shape[0]
    ev = S ** 2 / max(m - 1, 1)
    return {"U": U, "S": S, "Vt": Vt, "ev": ev, "total": ev.sum(), "all": True}


def _covariance(xp, X, mean, cfg):
    m = X.shape[0]
    xd = X.astype(np.float64, copy=False)
    c = hermitian(xd) @ xd - m * xp.outer(mean, mean)
    c /= max(m - 1, 1)
    return _from_covariance(xp, c, m, cfg)


def _from_covariance(xp, c, m, cfg):
    lam, vec = xp.linalg.eigh(c)
    lam, vec = xp.maximum(lam[::-1], 0), vec[:, ::-1]
    Vt = hermitian(vec).astype(cfg.dtype)
    _, Vt = svd_flip(xp, xp.empty((0, Vt.shape[0]), cfg.dtype), Vt)
    S = xp.sqrt(lam * max(m - 1, 1)).astype(cfg.dtype)
    ev = lam.astype(cfg.dtype)
    return {"U": None, "S": S, "Vt": Vt, "ev": ev, "total": ev.sum(), "all": True}


def _randomized(xp, xc, cfg):
    m, n = xc.shape
    small = min(m, n)
    k = cfg.k
    n_iter = (7 if k < 0.1 * small else 4) if cfg.iterated_power == "auto" else cfg.iterated_power
    op = LinearOperator(xp, xc)
    U, S, Vt, info = randomized_svd(op, k, min(k + cfg.n_oversamples, small), int(n_iter),
                                    resolve_normalizer(xp, "auto"), cfg.seed)
    note(**info)
    total = (xc.astype(np.float64) ** 2).sum() / max(m - 1, 1)
    return {"U": U, "S": S, "Vt": Vt, "ev": S ** 2 / max(m - 1, 1), "total": total,
            "all": False}


def _finish(xp, out, mean, m, n, cfg):
    """Pick ``k`` (variance fraction), and the attributes scikit-learn's PCA exposes."""
    ev, total = out["ev"], out["total"]
    ratio = ev / total if float(total) > 0 else xp.zeros_like(ev)
    k = cfg.k
    if k is None:
        cum = np.cumsum(to_host(ratio).astype(np.float64))
        k = int(min(np.searchsorted(cum, cfg.fraction, side="right") + 1, ev.shape[0]))
    small = min(m, n)
    if out["all"]:
        noise = float(ev[k:].mean()) if k < small and ev.shape[0] > k else 0.0
    else:
        noise = (float(total) - float(ev.sum())) / (small - k) if k < small else 0.0
    dtype = cfg.dtype
    res = {"mean": mean.astype(dtype), "components": xp.ascontiguousarray(out["Vt"][:k]),
           "singular_values": out["S"][:k].astype(dtype),
           "explained_variance": ev[:k].astype(dtype),
           "explained_variance_ratio": ratio[:k].astype(dtype), "noise_variance": noise}
    if cfg.want_scores and out["U"] is not None:
        U = out["U"][:, :k]
        scale = np.sqrt(max(m - 1, 1)) if cfg.whiten else out["S"][:k][None, :]
        if isinstance(U, np.ndarray) and not np.isscalar(scale):
            scale = to_host(scale)
        res["scores"] = (U * scale).astype(dtype)
    return res


def fit_streamed_gpu(X, cfg):
    return _fit_streamed(_ooc.CupyStreamer(X), X, cfg)


def _fit_streamed(streamer, X, cfg):
    """PCA of a host matrix too large for memory: covariance in one pass, or randomized in
    ``iterated_power + 2`` passes (means, power iterations, Rayleigh-Ritz)."""
    xp = streamer.xp
    m, n = X.shape
    if cfg.solver in ("full", "covariance_eigh"):
        mean, gram = _streamed_gram(streamer)
        c = (gram - m * xp.outer(mean, mean)) / max(m - 1, 1)
        out = _from_covariance(xp, c, m, cfg)
        return _finish(xp, out, mean.astype(cfg.dtype), m, n, cfg)
    mean, total_ss = _ooc.streamed_moments(streamer)
    small = min(m, n)
    k = cfg.k
    n_iter = (7 if k < 0.1 * small else 4) if cfg.iterated_power == "auto" else cfg.iterated_power
    U, S, Vt, info = _ooc.streamed_svd(streamer, k, min(k + cfg.n_oversamples, small),
                                       int(n_iter), cfg.seed, mean=mean)
    note(method="randomized-out-of-core", **info)
    S, Vt = xp.asarray(S), xp.asarray(Vt)
    out = {"U": U, "S": S, "Vt": Vt, "ev": S ** 2 / max(m - 1, 1),
           "total": total_ss / max(m - 1, 1), "all": False}
    return _finish(xp, out, mean.astype(cfg.dtype), m, n, cfg)


def _streamed_gram(streamer):
    xp = streamer.xp
    n = streamer.matrix.shape[1]
    acc = {"sum": xp.zeros(n, np.float64), "gram": xp.zeros((n, n), np.float64)}

    def consume(start, stop, p):
        acc["sum"] += p.sum(axis=0)
        acc["gram"] += hermitian(p) @ p

    streamer.run_pass(consume, _ooc._Progress(streamer.matrix.nbytes, None))
    streamer.finish()
    return acc["sum"] / max(streamer.matrix.shape[0], 1), acc["gram"]
