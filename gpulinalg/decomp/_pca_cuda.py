"""The GPU twins of :class:`gpulinalg.decomp.PCA`'s fit, projections and model (CuPy), in
device memory or streamed from the host."""

import numpy as np

from . import _pca_xp
from ._ooc_cuda import CupyStreamer
from ._ooc_source import HostMatrix
from ._ooc_xp import streamed_project
from ._sketch_cuda import engine

__all__ = ["fit", "fit_streamed", "transform", "transform_streamed", "inverse_transform",
           "covariance", "precision", "score_samples"]


def arpack(a, mean, k, tol, seed):
    """CuPy's thick-restart Lanczos SVD (``cupyx.scipy.sparse.linalg.svds``, on ``a^H a``) of
    ``a``, centered implicitly by ``mean`` when given, then one Rayleigh-Ritz step on the right
    subspace it found (the SVD of ``a V``), which restores the accuracy of the smaller singular
    values that the squared operator loses. CuPy's ``svds`` takes no start vector: ``seed`` is
    unused."""
    import cupy
    from cupyx.scipy.sparse.linalg import LinearOperator, svds
    if mean is not None:
        a = _pca_xp.centered_operator(cupy, LinearOperator, a, mean)
    _, _, vt = svds(a, k=k, tol=tol)
    v, _ = cupy.linalg.qr(vt.conj().T)
    u, s, w = cupy.linalg.svd(a @ v, full_matrices=False)
    return u, s, w @ v.conj().T


def _on_device(X):
    import cupy
    if isinstance(X, HostMatrix):
        return cupy.asarray(np.ascontiguousarray(X.materialize()))
    if _pca_xp.is_sparse(X):
        if type(X).__module__.startswith("cupyx"):
            return X.tocsr()
        import cupyx.scipy.sparse as cps
        return cps.csr_matrix(X.tocsr())
    return X


def fit(X, cfg):
    """``X``: a CuPy array or sparse matrix, a SciPy sparse matrix (uploaded as CSR) or a
    :class:`~gpulinalg.decomp._ooc_source.HostMatrix` (uploaded)."""
    return _pca_xp.fit(engine(), _on_device(X), cfg, arpack=arpack)


def fit_streamed(X, cfg):
    """A :class:`~gpulinalg.decomp._ooc_source.HostMatrix` larger than the GPU budget."""
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
