"""Per-thread memo of decomp's small GPU calls with CuPy arrays (no array computation).

A call of :func:`~gpulinalg.decomp.cholesky`, :func:`~gpulinalg.decomp.cho_factor`,
:func:`~gpulinalg.decomp.cho_solve` or :func:`~gpulinalg.decomp.solve_triangular` whose arrays
are all CuPy arrays is keyed by everything its validation and the dispatcher's decision depend
on: the operation, each array's shape, strides, dtype and device, and the options. The first
call of a key validates and dispatches as usual and leaves the dispatcher's
:class:`~gpulinalg._runtime.dispatch.Decision` and the engine's validated arguments here; a
repeat skips the validation and goes through :func:`~gpulinalg._runtime.dispatch.again` (the
engine at once while the GPU decision holds; the dispatcher decides afresh otherwise). A key
holds no array, so the memo keeps no memory alive. Any other input takes the full path.
"""

import sys

from .._runtime.memo import CallMemo

__all__ = ["call_key", "lookup", "remember", "clear", "MAX_CALLS"]

#: Calls remembered per thread; the memo starts afresh when it is full.
MAX_CALLS = 128


_memo = CallMemo(MAX_CALLS)
#: What was kept for a key, or ``None``; keep one; forget the calling thread's calls.
lookup, remember, clear = _memo.lookup, _memo.remember, _memo.clear


def call_key(op, a, b, options):
    """The memo key of a call with arrays ``a`` and ``b`` (``b`` may be ``None``) and the
    hashable ``options``, or ``None`` when an array is not a CuPy array."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    nd = cupy.ndarray
    if type(a) is not nd or (b is not None and type(b) is not nd):
        return None
    if b is None:
        return (op, a.shape, a.strides, a.dtype, a.data.device_id, options)
    return (op, a.shape, a.strides, a.dtype, a.data.device_id,
            b.shape, b.strides, b.dtype, b.data.device_id, options)
