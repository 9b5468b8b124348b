"""The CPU twins of :class:`gpulinalg.decomp.PCA`'s fit and projections (NumPy/SciPy)."""

import numpy as np

from . import _pca_xp
from ._ooc_host import NumpyStreamer
from ._ooc_source import HostMatrix
from ._ooc_xp import streamed_project
from ._sketch_host import ENGINE

__all__ = ["fit", "transform", "inverse_transform"]


def fit(X, cfg):
    """``X``: a NumPy array or a :class:`~gpulinalg.decomp._ooc_source.HostMatrix` (streamed
    when it is not in memory)."""
    if isinstance(X, HostMatrix):
        if not X.in_memory:
            return _pca_xp.fit_streamed(NumpyStreamer(X), X, cfg)
        X = X.materialize()
    return _pca_xp.fit(ENGINE, X, cfg)


def transform(X, comp, mean, explained_variance=None):
    """Projections of ``X`` (whitened when ``explained_variance`` is given)."""
    scale = None
    if explained_variance is not None:
        scale = _pca_xp.whiten_scale(np, explained_variance, comp.dtype)
    if isinstance(X, HostMatrix):
        if not X.in_memory:
            return streamed_project(NumpyStreamer(X), comp, mean, scale)
        X = X.materialize()
    return _pca_xp.project(X, comp, mean, scale)


def inverse_transform(X, comp, mean, explained_variance=None):
    return _pca_xp.back_project(np, X, comp, mean, explained_variance)
