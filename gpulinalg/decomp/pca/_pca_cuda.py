"""The GPU twins of :class:`gpulinalg.decomp.PCA`'s fit, projections and model (CuPy), in
device memory or streamed from the host."""

import numpy as np

from . import _pca_xp
from ._pca_input import check_deferred
from ..._runtime import arrays as _arrays
from ..lowrank._ooc_cuda import CupyStreamer
from ..lowrank._ooc_source import HostMatrix
from ..lowrank._ooc_xp import streamed_project
from ..lowrank._sketch_cuda import engine

__all__ = ["fit", "fit_streamed", "transform", "transform_streamed", "inverse_transform",
           "covariance", "precision", "score_samples"]


def arpack(a, mean, k, tol, seed):
    """The top ``k`` singular triplets of ``a`` (centered implicitly by ``mean`` when given),
    served as scikit-learn's ``arpack`` (the top-``k`` SVD up to ``tol``).

    Dense ``a`` (``mean`` is ``None``: already centered): the exact SVD on the device,
    truncated. CuPy 14's ``svds`` cannot stand in for ARPACK there: it runs Lanczos on
    ``a^H a`` (squaring the condition number), crashes with an ``IndexError`` when
    ``k > min(shape) - 3`` (see :func:`~gpulinalg.decomp.pca._pca_xp.lanczos_fits`), and returns
    garbage on a rank-deficient matrix (its Lanczos has no breakdown handling).

    Sparse ``a``: ``cupyx.scipy.sparse.linalg.svds`` on the centered operator (it returns
    ``u, s, vh`` with ``s`` ascending, the values under its cutoff zeroed and moved to the
    end, their vectors arbitrary orthonormal completions; it takes no start vector, so
    ``seed`` is unused), then one Rayleigh-Ritz step on the right subspace it found, which
    restores the accuracy that the squared operator loses. When ``k`` does not fit CuPy's
    Lanczos, or its result fails :func:`~gpulinalg.decomp.pca._pca_xp.ritz_converged`, the
    centered matrix is densified on the device and takes the exact route."""
    import cupy
    if mean is None and not _pca_xp.is_sparse(a):
        return _pca_xp.top_k_svd(cupy, a, k)
    if _pca_xp.lanczos_fits(k, a.shape):
        from cupyx.scipy.sparse.linalg import LinearOperator, svds
        op = a if mean is None else _pca_xp.centered_operator(cupy, LinearOperator, a, mean)
        _, _, vt = svds(op, k=k, tol=tol)
        U, S, Vt = _pca_xp.rayleigh_ritz(cupy, op, vt)
        rtol = max(float(tol), 100 * float(np.finfo(a.dtype).eps)) ** 0.5
        if _pca_xp.ritz_converged(cupy, op, U, S, Vt, rtol):
            return U, S, Vt
    dense = a.toarray() if _pca_xp.is_sparse(a) else a
    if mean is not None:
        dense = dense - mean
    return _pca_xp.top_k_svd(cupy, dense, k)


def _on_device(X):
    if isinstance(X, HostMatrix):
        data = _arrays.to_device(np.ascontiguousarray(X.materialize()))
        check_deferred(X, data)  # one device reduction, not a host pass
        return data
    if _pca_xp.is_sparse(X):
        if type(X).__module__.startswith("cupyx"):
            return X.tocsr()
        import cupyx.scipy.sparse as cps
        return cps.csr_matrix(X.tocsr())
    return X


def fit(X, cfg):
    """``X``: a CuPy array or sparse matrix, a SciPy sparse matrix (uploaded as CSR) or a
    :class:`~gpulinalg.decomp.lowrank._ooc_source.HostMatrix` (uploaded)."""
    return _pca_xp.fit(engine(), _on_device(X), cfg, arpack=arpack)


def fit_streamed(X, cfg):
    """A :class:`~gpulinalg.decomp.lowrank._ooc_source.HostMatrix` larger than the GPU budget."""
    return _pca_xp.fit_streamed(CupyStreamer(X), X, cfg)


def _scale(comp, explained_variance):
    import cupy
    if explained_variance is None:
        return None
    return _pca_xp.whiten_scale(cupy, explained_variance, comp.dtype)


def transform(X, comp, mean, explained_variance=None):
    """Projections of ``X`` (whitened when ``explained_variance`` is given)."""
    return _pca_xp.project(_on_device(X), comp, mean, _scale(comp, explained_variance))


def transform_streamed(X, comp, mean, explained_variance=None):
    """Projections of a host matrix larger than the GPU budget, panel by panel."""
    return streamed_project(CupyStreamer(X), comp, mean, _scale(comp, explained_variance))


def inverse_transform(X, comp, mean, explained_variance=None):
    import cupy
    return _pca_xp.back_project(cupy, X, comp, mean, explained_variance)


def covariance(comp, ev, noise, whiten):
    import cupy
    return _pca_xp.covariance(cupy, comp, ev, noise, whiten)


def precision(comp, ev, noise, whiten):
    import cupy
    return _pca_xp.precision(cupy, comp, ev, noise, whiten)


def score_samples(X, mean, comp, ev, noise, whiten):
    import cupy
    prec = _pca_xp.precision(cupy, comp, ev, noise, whiten)
    return _pca_xp.log_likelihood(cupy, _on_device(X), mean, prec)
