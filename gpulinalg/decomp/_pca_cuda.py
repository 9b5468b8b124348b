"""The GPU twins of :class:`gpulinalg.decomp.PCA`'s fit and projections (CuPy), in device
memory or streamed from the host."""

import numpy as np

from . import _pca_xp
from ._ooc_cuda import CupyStreamer
from ._ooc_source import HostMatrix
from ._ooc_xp import streamed_project
from ._sketch_cuda import engine

__all__ = ["fit", "fit_streamed", "transform", "transform_streamed", "inverse_transform"]


def fit(X, cfg):
    """``X``: a CuPy array or a :class:`~gpulinalg.decomp._ooc_source.HostMatrix` (uploaded)."""
    import cupy
    if isinstance(X, HostMatrix):
        X = cupy.asarray(np.ascontiguousarray(X.materialize()))
    return _pca_xp.fit(engine(), X, cfg)


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
    import cupy
    scale = _scale(comp, explained_variance)
    if isinstance(X, HostMatrix):
        X = cupy.asarray(X.materialize())
    return _pca_xp.project(X, comp, mean, scale)


def transform_streamed(X, comp, mean, explained_variance=None):
    """Projections of a host matrix larger than the GPU budget, panel by panel."""
    return streamed_project(CupyStreamer(X), comp, mean, _scale(comp, explained_variance))


def inverse_transform(X, comp, mean, explained_variance=None):
    import cupy
    return _pca_xp.back_project(cupy, X, comp, mean, explained_variance)
