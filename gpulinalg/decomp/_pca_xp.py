"""The numerical side of :class:`gpulinalg.decomp.PCA`, written once for any array module: the
fit (in core, or streamed from the host by either streamer), and the two projections."""

import numpy as np

from .._runtime.dispatch import note
from ._ooc_xp import streamed_gram, streamed_moments, streamed_svd
from ._randomized_xp import LinearOperator, randomized_svd
from ._sketch_options import resolve_normalizer
from ._sketch_xp import hermitian, svd_flip

__all__ = ["fit", "fit_streamed", "project", "back_project", "whiten_scale"]


def fit(engine, X, cfg):
    """PCA of the dense ``engine.xp`` matrix ``X`` as ``cfg`` (a
    :class:`~gpulinalg.decomp._pca_solvers.FitConfig`) says: a dict of the fitted attributes."""
    X = X.astype(cfg.dtype, copy=False)
    m, n = X.shape
    mean64 = X.mean(axis=0, dtype=np.float64)
    mean = mean64.astype(cfg.dtype)
    xc = X - mean
    if cfg.solver == "full":
        out = _full(engine, xc, cfg)
    elif cfg.solver == "covariance_eigh":
        out = _covariance(engine, X, mean64, cfg)
    else:
        out = _randomized(engine, xc, cfg)
    return _finish(engine, out, mean, m, n, cfg)


def _full(engine, xc, cfg):
    U, S, Vt = engine.svd(xc)
    U, Vt = svd_flip(engine, U, Vt)
    m = xc.shape[0]
    ev = S ** 2 / max(m - 1, 1)
    return {"U": U, "S": S, "S_u": S, "Vt": Vt, "ev": ev, "total": ev.sum(), "all": True}


def _covariance(engine, X, mean, cfg):
    m = X.shape[0]
    xd = X.astype(np.float64, copy=False)
    c = hermitian(xd) @ xd - m * engine.xp.outer(mean, mean)
    c /= max(m - 1, 1)
    return _from_covariance(engine, c, m, cfg)


def _from_covariance(engine, c, m, cfg):
    xp = engine.xp
    lam, vec = xp.linalg.eigh(c)
    lam, vec = xp.maximum(lam[::-1], 0), vec[:, ::-1]
    Vt = hermitian(vec).astype(cfg.dtype)
    _, Vt = svd_flip(engine, xp.empty((0, Vt.shape[0]), cfg.dtype), Vt)
    S = xp.sqrt(lam * max(m - 1, 1)).astype(cfg.dtype)
    ev = lam.astype(cfg.dtype)
    return {"U": None, "S": S, "Vt": Vt, "ev": ev, "total": ev.sum(), "all": True}


def _n_iter(cfg, small):
    if cfg.iterated_power == "auto":
        return 7 if cfg.k < 0.1 * small else 4
    return int(cfg.iterated_power)


def _randomized(engine, xc, cfg):
    m, n = xc.shape
    small = min(m, n)
    k = cfg.k
    op = LinearOperator(engine, xc)
    U, S, Vt, info = randomized_svd(op, k, min(k + cfg.n_oversamples, small), _n_iter(cfg, small),
                                    resolve_normalizer(engine, "auto"), cfg.seed)
    note(**info)
    total = (xc.astype(np.float64) ** 2).sum() / max(m - 1, 1)
    return {"U": U, "S": S, "S_u": S, "Vt": Vt, "ev": S ** 2 / max(m - 1, 1), "total": total,
            "all": False}


def _finish(engine, out, mean, m, n, cfg):
    """Pick ``k`` (variance fraction), and the attributes scikit-learn's PCA exposes.

    ``out["S_u"]``: the singular values in the memory of ``out["U"]`` (the host, for a
    streamed run), which the scores are scaled by."""
    xp = engine.xp
    ev, total = out["ev"], out["total"]
    ratio = ev / total if float(total) > 0 else xp.zeros_like(ev)
    k = cfg.k
    if k is None:
        cum = np.cumsum(engine.to_host(ratio).astype(np.float64))
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
        scale = np.sqrt(max(m - 1, 1)) if cfg.whiten else out["S_u"][:k][None, :]
        res["scores"] = (U * scale).astype(dtype)
    return res


def fit_streamed(streamer, X, cfg):
    """PCA of a host matrix too large for memory: covariance in one pass, or randomized in
    ``iterated_power + 2`` passes (means, power iterations, Rayleigh-Ritz)."""
    engine = streamer.engine
    xp = engine.xp
    m, n = X.shape
    if cfg.solver in ("full", "covariance_eigh"):
        mean, gram = streamed_gram(streamer)
        c = (gram - m * xp.outer(mean, mean)) / max(m - 1, 1)
        out = _from_covariance(engine, c, m, cfg)
        return _finish(engine, out, mean.astype(cfg.dtype), m, n, cfg)
    mean, total_ss = streamed_moments(streamer)
    small = min(m, n)
    k = cfg.k
    U, S_host, Vt, info = streamed_svd(streamer, k, min(k + cfg.n_oversamples, small),
                                       _n_iter(cfg, small), cfg.seed, mean=mean)
    note(method="randomized-out-of-core", **info)
    S, Vt = xp.asarray(S_host), xp.asarray(Vt)
    out = {"U": U, "S": S, "S_u": S_host, "Vt": Vt, "ev": S ** 2 / max(m - 1, 1),
           "total": total_ss / max(m - 1, 1), "all": False}
    return _finish(engine, out, mean.astype(cfg.dtype), m, n, cfg)


def whiten_scale(xp, explained_variance, dtype):
    """``1 / sqrt(explained_variance)`` (guarded against zeros), the whitening of projections."""
    return 1.0 / xp.sqrt(xp.maximum(explained_variance, np.finfo(dtype).tiny))


def project(X, comp, mean, scale=None):
    """``(X - mean) @ comp.T`` (times ``scale`` per column)."""
    out = (X.astype(comp.dtype, copy=False) - mean) @ comp.T
    return out * scale[None, :] if scale is not None else out


def back_project(xp, X, comp, mean, explained_variance=None):
    """``X @ comp + mean`` (un-whitened by ``sqrt(explained_variance)`` when given)."""
    X = X.astype(comp.dtype, copy=False)
    if explained_variance is not None:
        return X @ (xp.sqrt(explained_variance)[:, None] * comp) + mean
    return X @ comp + mean
