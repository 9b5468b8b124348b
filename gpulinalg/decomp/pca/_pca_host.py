"""The CPU twins of :class:`gpulinalg.decomp.PCA`'s fit, projections and model (NumPy/SciPy)."""

import numpy as np

from . import _pca_xp
from ._pca_input import check_deferred
from ..lowrank._ooc_host import NumpyStreamer
from ..lowrank._ooc_source import HostMatrix
from ..lowrank._ooc_xp import streamed_project
from ..lowrank._sketch_host import ENGINE

__all__ = ["fit", "transform", "inverse_transform", "covariance", "precision", "score_samples"]


def arpack(a, mean, k, tol, seed):
    """ARPACK (``scipy.sparse.linalg.svds``) on ``a``, centered implicitly by ``mean`` when
    given; the start vector is drawn from ``seed`` as scikit-learn draws it."""
    from scipy.sparse.linalg import LinearOperator, svds
    v0 = np.random.RandomState(seed % (2 ** 32)).uniform(-1, 1, min(a.shape))
    if mean is not None:
        a = _pca_xp.centered_operator(np, LinearOperator, a, mean)
    return svds(a, k=k, tol=tol, v0=v0)


def _in_memory(X):
    """The entries of the in-memory :class:`HostMatrix` ``X``, checked if still unchecked."""
    data = X.materialize()
    check_deferred(X, data)
    return data


def fit(X, cfg):
    """``X``: a NumPy array, a SciPy sparse matrix, or a
    :class:`~gpulinalg.decomp.lowrank._ooc_source.HostMatrix` (streamed when it is not in
    memory)."""
    if isinstance(X, HostMatrix):
        if not X.in_memory:
            return _pca_xp.fit_streamed(NumpyStreamer(X), X, cfg)
        X = _in_memory(X)
    elif _pca_xp.is_sparse(X) and hasattr(X, "get"):  # CuPy sparse, after a fallback
        X = X.get()
    return _pca_xp.fit(ENGINE, X, cfg, arpack=arpack)


def transform(X, comp, mean, explained_variance=None):
    """Projections of ``X`` (whitened when ``explained_variance`` is given)."""
    scale = None
    if explained_variance is not None:
        scale = _pca_xp.whiten_scale(np, explained_variance, comp.dtype)
    if isinstance(X, HostMatrix):
        if not X.in_memory:
            return streamed_project(NumpyStreamer(X), comp, mean, scale)
        X = _in_memory(X)
    elif _pca_xp.is_sparse(X) and hasattr(X, "get"):
        X = X.get()
    return _pca_xp.project(X, comp, mean, scale)


def inverse_transform(X, comp, mean, explained_variance=None):
    return _pca_xp.back_project(np, X, comp, mean, explained_variance)


def covariance(comp, ev, noise, whiten):
    return _pca_xp.covariance(np, comp, ev, noise, whiten)


def precision(comp, ev, noise, whiten):
    return _pca_xp.precision(np, comp, ev, noise, whiten)


def score_samples(X, mean, comp, ev, noise, whiten):
    if isinstance(X, HostMatrix):
        X = _in_memory(X)
    return _pca_xp.log_likelihood(np, X, mean, _pca_xp.precision(np, comp, ev, noise, whiten))
