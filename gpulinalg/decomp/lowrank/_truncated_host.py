"""The CPU twin of :func:`~gpulinalg.decomp.truncated_svd` (NumPy/SciPy)."""

from ..._runtime import validation as _v
from ._ooc_host import NumpyStreamer
from ._ooc_source import HostMatrix
from ._sketch_host import ENGINE
from ._truncated_plan import is_cupy_sparse
from ._truncated_xp import run, streamed

__all__ = ["truncated_svd"]


def truncated_svd(a, plan):
    """``a``: a NumPy array, a SciPy (or, after a fallback, CuPy) sparse matrix, or a
    :class:`~gpulinalg.decomp.lowrank._ooc_source.HostMatrix` (streamed when ``plan`` asks or when
    it is not in memory)."""
    if isinstance(a, HostMatrix):
        if plan.out_of_core or (plan.out_of_core is None and not a.in_memory):
            return streamed(NumpyStreamer(a, check_finite=plan.check_finite), plan)
        a = a.materialize()
        if plan.check_finite:
            _v.check_finite(a)
    elif is_cupy_sparse(a):
        a = a.get()
    return run(ENGINE, a, plan)
