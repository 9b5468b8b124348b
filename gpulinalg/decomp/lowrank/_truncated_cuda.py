"""The GPU twins of :func:`~gpulinalg.decomp.truncated_svd`: in device memory, and streamed
from the host (the dispatcher's route for a host matrix larger than the GPU budget)."""

import numpy as np

from ..._runtime import validation as _v
from ._gesvdr_cuda import gesvdr
from ._ooc_cuda import CupyStreamer
from ._ooc_source import HostMatrix
from ._sketch_cuda import engine
from ._truncated_plan import is_cupy_sparse
from ._truncated_xp import run, streamed

__all__ = ["truncated_svd", "truncated_svd_streamed"]


def truncated_svd(a, plan):
    """``a``: a CuPy array, a SciPy or CuPy sparse matrix, or a
    :class:`~gpulinalg.decomp.lowrank._ooc_source.HostMatrix` (uploaded whole, checked there)."""
    import cupy
    if isinstance(a, HostMatrix):
        a = cupy.asarray(_contiguous(a.materialize()))
        if plan.check_finite:
            _v.check_finite(a)
    elif hasattr(a, "tocsr"):
        if not is_cupy_sparse(a):
            import cupyx.scipy.sparse as cps
            a = cps.csr_matrix(a.tocsr())
    elif not (a.flags.c_contiguous or a.flags.f_contiguous):
        a = cupy.ascontiguousarray(a)
    return run(engine(), a, plan, gesvdr=gesvdr)


def _contiguous(x):
    return x if x.flags.c_contiguous or x.flags.f_contiguous else np.ascontiguousarray(x)


def truncated_svd_streamed(a, plan):
    """A :class:`~gpulinalg.decomp.lowrank._ooc_source.HostMatrix` streamed through the GPU."""
    return streamed(CupyStreamer(a, check_finite=plan.check_finite), plan)
