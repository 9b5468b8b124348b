"""The numerical side of :class:`gpulinalg.decomp.PCA`, written once for any array module: the
fit (dense or sparse, in core; or streamed from the host by either streamer), the two
projections, and the probabilistic model (covariance, precision, log-likelihood)."""

import math

import numpy as np

from ..._runtime.dispatch import note
from ..._runtime.errors import warn as _warn
from ..lowrank._ooc_xp import streamed_gram, streamed_moments, streamed_svd
from ._pca_solvers import infer_dimension
from ..lowrank._randomized_xp import LinearOperator, randomized_svd
from ..lowrank._sketch_options import resolve_normalizer
from ..lowrank._sketch_xp import hermitian, svd_flip

__all__ = ["fit", "fit_streamed", "project", "back_project", "whiten_scale", "covariance",
           "precision", "log_likelihood", "is_sparse", "centered_operator", "lanczos_fits",
           "top_k_svd", "rayleigh_ritz", "ritz_converged"]


def is_sparse(X):
    """A SciPy or CuPy sparse matrix (or array)."""
    return hasattr(X, "tocsr") and hasattr(X, "nnz")


def fit(engine, X, cfg, arpack=None):
    """PCA of the ``engine.xp`` matrix ``X`` (dense, or sparse for the ``arpack`` and
    ``covariance_eigh`` solvers) as ``cfg`` (a
    :class:`~gpulinalg.decomp.pca._pca_solvers.FitConfig`) says: a dict of the fitted attributes.

    ``arpack``: the engine's Lanczos SVD ``(a, mean, k, tol, seed) -> (U, S, Vh)`` of ``a``
    (centered implicitly by ``mean`` when it is not ``None``), in any order."""
    sparse = is_sparse(X)
    if X.dtype != cfg.dtype:
        X = X.astype(cfg.dtype)
    m, n = X.shape
    mean64 = _column_mean(engine.xp, X, sparse)
    mean = mean64.astype(cfg.dtype)
    if cfg.solver == "covariance_eigh":
        out = _covariance(engine, X, mean64, cfg)
    elif sparse:
        xd = X.astype(np.float64)
        total = (float(xd.multiply(xd).sum()) - m * float((mean64 ** 2).sum())) / max(m - 1, 1)
        out = _arpack(engine, X, mean, cfg, arpack, total)
    else:
        xc = X - mean
        if cfg.solver == "full":
            out = _full(engine, xc, cfg)
        elif cfg.solver == "arpack":
            out = _arpack(engine, xc, None, cfg, arpack, _total(engine, xc))
        else:
            out = _randomized(engine, xc, cfg)
    res = _finish(engine, out, mean, m, n, cfg)
    if cfg.want_scores and "scores" not in res:  # covariance_eigh: one projection of X
        scale = whiten_scale(engine.xp, res["explained_variance"], cfg.dtype) if cfg.whiten \
            else None
        res["scores"] = project(X, res["components"], res["mean"], scale)
    return res


def centered_operator(xp, LinearOperator, a, mean):
    """``a - 1 mean^T`` as a ``LinearOperator`` (SciPy's or CuPy's class): products only, the
    sparse ``a`` is never densified."""
    at = a.T.tocsr()

    def matmat(x):
        return a @ x - (mean @ x)[None] if x.ndim == 2 else a @ x - mean @ x

    def rmatmat(y):
        s = y.sum(axis=0)
        return at @ y - (xp.outer(mean, s) if y.ndim == 2 else mean * s)

    return LinearOperator(a.shape, matvec=matmat, rmatvec=rmatmat, matmat=matmat,
                          rmatmat=rmatmat, dtype=a.dtype)


def lanczos_fits(k, shape):
    """Whether CuPy's ``svds`` can compute ``k`` triplets of a ``shape`` matrix. Its ``eigsh``
    runs on the ``min(shape)``-square Gram matrix with at most ``min(shape) - 1`` Lanczos
    vectors and, on every thick restart, writes vector ``k + 1``: it needs
    ``k + 2 <= min(shape) - 1`` (CuPy 14 raises an ``IndexError`` otherwise)."""
    return k + 3 <= min(shape)


def top_k_svd(xp, a, k):
    """The exact top-``k`` SVD ``(U, S, Vh)`` of the dense ``a`` (descending): what ARPACK's
    ``svds`` returns up to its ``tol``."""
    u, s, vt = xp.linalg.svd(a, full_matrices=False)
    return u[:, :k], s[:k], vt[:k]


def rayleigh_ritz(xp, a, vt):
    """``(U, S, Vh)`` of ``a`` (an array or a ``LinearOperator``) on the right subspace that
    the rows of ``vt`` span (orthonormalized first): the SVD of ``a V``, descending. Exact
    when the rows span a right singular subspace of ``a``; ``a V = U diag(S) Vh V``
    always."""
    v, _ = xp.linalg.qr(hermitian(vt))
    u, s, w = xp.linalg.svd(a @ v, full_matrices=False)
    return u, s, w @ hermitian(v)


def ritz_converged(xp, a, U, S, Vt, rtol):
    """Whether the triplets pass the other half of the SVD: ``||a^H u_i - s_i v_i|| <=
    rtol * s_max`` for every ``i`` (:func:`rayleigh_ritz` makes ``a v_i = s_i u_i`` exact).
    A Lanczos run that broke down (a rank-deficient Gram matrix) fails it, as do
    non-finite values."""
    if U.shape[1] == 0:
        return True
    aHu = a.rmatmat(U) if hasattr(a, "rmatmat") else hermitian(a) @ U
    res = xp.linalg.norm(aHu - hermitian(Vt) * S[None, :], axis=0)
    smax = float(S.max())
    return bool(xp.isfinite(res).all()) and float(res.max()) <= rtol * max(smax, 1e-300)


#: Rows summed in the input's precision before the partial sums are added in float64 (a
#: float64 mean at the speed of a float32 pass: no float64 copy of the rows is made).
MEAN_PANEL_ROWS = 1024


def _column_mean(xp, X, sparse):
    if sparse:
        return xp.asarray(X.sum(axis=0, dtype=np.float64)).reshape(-1) / X.shape[0]
    m, n = X.shape
    if X.dtype != np.float32 or m <= MEAN_PANEL_ROWS or not X.flags.c_contiguous:
        return X.mean(axis=0, dtype=np.float64)
    full = m - m % MEAN_PANEL_ROWS
    # every panel's sums at once (one reduction, not one launch per panel on a GPU)
    total = X[:full].reshape(-1, MEAN_PANEL_ROWS, n).sum(axis=1).sum(axis=0, dtype=np.float64)
    if full < m:
        total += X[full:].sum(axis=0, dtype=np.float64)
    return total / m


def _total(engine, xc):
    """The total variance of the centered ``xc``: its squares in float64, summed."""
    squares = engine.sum_squares
    ss = squares(xc) if squares is not None else (xc.astype(np.float64) ** 2).sum()
    return ss / max(xc.shape[0] - 1, 1)


def _full(engine, xc, cfg):
    U, S, Vt = engine.svd(xc)
    U, Vt = svd_flip(engine, U, Vt)
    m = xc.shape[0]
    ev = S ** 2 / max(m - 1, 1)
    return {"U": U, "S": S, "S_u": S, "Vt": Vt, "ev": ev, "total": ev.sum(), "all": True}


#: A total variance below this is taken to have underflowed (data near 1e-150 and smaller): the
#: Gram matrix is made again from the data scaled by a power of two (exact), once.
TINY_COVARIANCE = 1e-300


def _gram(engine, x):
    """``x^H x`` of a dense ``x``: the engine's route where it has one, else the product."""
    g = engine.gram(x) if engine.gram is not None else None
    return hermitian(x) @ x if g is None else g


def _centered_gram(engine, xd, mean, m):
    g = (xd.T.tocsr() @ xd).toarray() if is_sparse(xd) else _gram(engine, xd)
    c = engine.xp.asarray(g) - m * engine.xp.outer(mean, mean)
    c /= max(m - 1, 1)
    return c


#: The float32 Gram matrix of uncentered data is centered in float64 only while no column's
#: squared mean exceeds this many times its variance (the cancellation then costs at most about
#: this factor times float32's epsilon); otherwise the data are centered in float64 first.
GRAM_MEAN_RATIO = 64.0
#: ... and while its smallest nonzero diagonal entry is above this (far from float32 underflow).
GRAM_MIN_DIAGONAL = 1e-20


def _single_gram(engine, X, mean, m):
    """The covariance from the float32 Gram matrix ``X^T X`` (scikit-learn's product, no
    float64 copy of ``X``) centered in float64; ``None`` when the column means dominate the
    variances (cancellation) or the products come near float32's underflow."""
    if is_sparse(X) or X.dtype != np.float32:
        return None
    xp = engine.xp
    g = _gram(engine, X).astype(np.float64)
    diag = g.diagonal().copy()
    c = g - m * xp.outer(mean, mean)
    c /= max(m - 1, 1)
    var = c.diagonal()
    msq = mean * mean
    live = diag > 0
    # both tests in one read-back (a synchronization on a GPU)
    if bool(((diag < GRAM_MIN_DIAGONAL) & live).any() |
            (msq > GRAM_MEAN_RATIO * xp.maximum(var, 0) * (m - 1) / m).any()):
        return None
    return c


def _covariance(engine, X, mean, cfg):
    m = X.shape[0]
    c = _single_gram(engine, X, mean.astype(np.float64), m)
    if c is not None:
        return _from_covariance(engine, c, m, cfg)
    xd = X.astype(np.float64, copy=False)
    if not is_sparse(X):
        mean = xd.mean(axis=0)  # the float64 Gram matrix is centered by the exact mean
    mean = mean.astype(np.float64)
    out = _from_covariance(engine, _centered_gram(engine, xd, mean, m), m, cfg)
    # the total variance (read by _finish anyway) says whether the variances underflowed
    top = float(abs(xd).max()) if float(out["total"]) < TINY_COVARIANCE else 0.0
    if not 0 < top < math.inf:
        return out
    scale = 2.0 ** math.floor(math.log2(top))  # the variances' ratios survive the scaling
    out = _from_covariance(engine, _centered_gram(engine, xd / scale, mean / scale, m), m, cfg)
    out["ratio"] = out["ev"] / out["total"] if float(out["total"]) > 0 else None
    out["S"] = (out["S"] * scale).astype(cfg.dtype)
    out["ev"] = (out["ev"] * scale * scale).astype(cfg.dtype)
    out["total"] = out["ev"].sum()
    return out


def _from_covariance(engine, c, m, cfg):
    xp = engine.xp
    lam, vec = xp.linalg.eigh(c)
    lam, vec = xp.maximum(lam[::-1], 0), vec[:, ::-1]
    Vt = hermitian(vec).astype(cfg.dtype)
    _, Vt = svd_flip(engine, xp.empty((0, Vt.shape[0]), cfg.dtype), Vt)
    S = xp.sqrt(lam * max(m - 1, 1)).astype(cfg.dtype)
    ev = lam.astype(cfg.dtype)
    return {"U": None, "S": S, "Vt": Vt, "ev": ev, "total": ev.sum(), "all": True}


def _arpack(engine, a, mean, cfg, arpack, total):
    """Lanczos (ARPACK on the CPU, CuPy's on the GPU) for the top ``k`` triplets."""
    xp = engine.xp
    U, S, Vt = arpack(a, mean, cfg.k, cfg.tol, cfg.seed)
    order = xp.argsort(-S)
    U, S, Vt = U[:, order], S[order], Vt[order]
    U, Vt = svd_flip(engine, U, Vt)
    m = a.shape[0]
    return {"U": U, "S": S, "S_u": S, "Vt": Vt, "ev": S ** 2 / max(m - 1, 1), "total": total,
            "all": False}


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
                                    resolve_normalizer(engine, cfg.normalizer), cfg.seed)
    note(**info)
    return {"U": U, "S": S, "S_u": S, "Vt": Vt, "ev": S ** 2 / max(m - 1, 1),
            "total": _total(engine, xc), "all": False}


def _pick_k(engine, out, ratio, m, cfg):
    """The component count a variance fraction or ``"mle"`` selects (one small host copy)."""
    if cfg.select == "mle":
        return infer_dimension(engine.to_host(out["ev"]), m)
    cum = np.cumsum(engine.to_host(ratio).astype(np.float64))
    return int(min(np.searchsorted(cum, cfg.select, side="right") + 1, out["ev"].shape[0]))


def _underflowed_ratio(engine, out):
    """The variance ratios when the total variance is 0: zeros for data without variance; for
    data so small that its variances underflow (``X * 1e-200``), the ratios of the scaled
    singular values where all of them are known, else NaN with a warning (never silent 0)."""
    xp, S = engine.xp, out["S"]
    top = float(xp.max(S)) if S.shape[0] else 0.0
    if top == 0:
        return xp.zeros_like(out["ev"])
    if out["all"]:
        w = (S / top) ** 2
        return (w / w.sum()).astype(out["ev"].dtype)
    _warn("gpulinalg: PCA: the total variance underflows at this data's scale; "
          "explained_variance_ratio_ is NaN (rescale X)", RuntimeWarning)
    return xp.full_like(out["ev"], float("nan"))


def _finish(engine, out, mean, m, n, cfg):
    """Pick ``k`` (variance fraction, MLE), and the attributes scikit-learn's PCA exposes.

    ``out["S_u"]``: the singular values in the memory of ``out["U"]`` (the host, for a
    streamed run), which the scores are scaled by."""
    xp = engine.xp
    ev, total = out["ev"], out["total"]
    ratio = out.get("ratio")  # made before the variances were scaled back (and underflowed)
    if ratio is None:
        ratio = ev / total if float(total) > 0 else _underflowed_ratio(engine, out)
    k = _pick_k(engine, out, ratio, m, cfg) if cfg.k is None else cfg.k
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
    """PCA of a host matrix too large for memory: the covariance in one pass (``full``,
    ``covariance_eigh`` and ``arpack``: exact), or randomized in ``iterated_power + 2`` passes
    (means, power iterations, Rayleigh-Ritz)."""
    engine = streamer.engine
    xp = engine.xp
    m, n = X.shape
    if cfg.solver in ("full", "covariance_eigh", "arpack"):
        mean, gram = streamed_gram(streamer)
        c = (gram - m * xp.outer(mean, mean)) / max(m - 1, 1)
        out = _from_covariance(engine, c, m, cfg)
        if cfg.solver == "arpack":
            out["all"] = False
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
    """``(X - mean) @ comp.T`` (times ``scale`` per column); a sparse ``X`` stays sparse."""
    if X.dtype != comp.dtype:
        X = X.astype(comp.dtype)
    # scikit-learn's product: no centered copy of X (sparse X stays sparse)
    out = X @ comp.T
    out -= (mean @ comp.T)[None, :]
    if scale is not None:
        out *= scale[None, :]
    return out


def back_project(xp, X, comp, mean, explained_variance=None):
    """``X @ comp + mean`` (un-whitened by ``sqrt(explained_variance)`` when given)."""
    X = X.astype(comp.dtype, copy=False)
    if explained_variance is not None:
        return X @ (xp.sqrt(explained_variance)[:, None] * comp) + mean
    return X @ comp + mean


def _scaled(xp, comp, ev, noise, whiten):
    if whiten:
        comp = comp * xp.sqrt(ev)[:, None]
    return comp, xp.maximum(ev - noise, 0)


def covariance(xp, comp, ev, noise, whiten):
    """The model's covariance ``C^T diag(ev - noise) C + noise I`` (scikit-learn's)."""
    comp, diff = _scaled(xp, comp, ev, noise, whiten)
    cov = (comp.T * diff) @ comp
    return cov + noise * xp.eye(cov.shape[0], dtype=cov.dtype)


def precision(xp, comp, ev, noise, whiten):
    """The inverse of :func:`covariance`, by the matrix inversion lemma (scikit-learn's)."""
    n = comp.shape[1]
    eye = xp.eye(n, dtype=comp.dtype)
    if comp.shape[0] == 0:
        return eye / noise
    if noise == 0.0:
        return xp.linalg.inv(covariance(xp, comp, ev, noise, whiten))
    comp, diff = _scaled(xp, comp, ev, noise, whiten)
    inner = comp @ comp.T / noise + xp.diag(1.0 / diff)
    prec = comp.T @ xp.linalg.inv(inner) @ comp
    return prec / -(noise ** 2) + eye / noise


def log_likelihood(xp, X, mean, prec):
    """Per-sample Gaussian log-likelihood under the model of precision ``prec``."""
    xr = X.astype(prec.dtype, copy=False) - mean
    sign, logdet = xp.linalg.slogdet(prec)
    logdet = xp.where(sign > 0, logdet, -xp.inf)  # scikit-learn's fast_logdet, without a sync
    ll = -0.5 * (xr * (xr @ prec)).sum(axis=1)
    return ll - 0.5 * (X.shape[1] * math.log(2.0 * math.pi) - logdet)
