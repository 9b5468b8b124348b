"""A per-thread memo of validated ``matmul`` calls on CuPy arrays (the per-call hot path).

What ``matmul`` works out before it dispatches (packages, dtypes, shapes, bias form, options,
the dispatcher's size estimates: its :class:`~gpulinalg.dense._spec.Spec`) depends only on the
operands' types, shapes, strides, dtypes and the options. A repeat of a call with the same
key finds that work here instead of redoing it, and the GPU engine finds on the memoized spec the
cuBLASLt plan an earlier call left there (the key also holds the operands' pointer alignment and
device, so it is as strict as the plan cache's own key). Specs are per thread because plans are.

Only CuPy arrays are memoized (their layout is read in a few attribute lookups); anything else,
and any call whose options cannot be hashed, takes the full path.
"""

import sys
import threading

__all__ = ["call_key", "lookup", "remember", "clear", "MAX_CALLS"]

#: Calls remembered per thread; the memo starts afresh when it is full.
MAX_CALLS = 256


class _Memo(threading.local):
    def __init__(self):
        self.calls = {}


_memo = _Memo()
_ndarray: list = []  # [cupy.ndarray] once CuPy is imported


def _layout(x):
    """Everything of a CuPy array a plan depends on."""
    d = x.data
    return (x.shape, x.strides, x.dtype, d.ptr & 255, d.device_id)


def call_key(a, b, bias, c, activation, alpha, beta, return_aux, compute_type, autotune):
    """The memo key of a ``matmul`` call, or ``None`` when its arrays are not all CuPy arrays.

    ``alpha`` and ``beta`` enter with their types (``1`` and ``1.0`` validate alike, ``1+0j``
    does not).
    """
    if not _ndarray:
        cupy = sys.modules.get("cupy")
        if cupy is None:
            return None
        _ndarray.append(cupy.ndarray)
    nd = _ndarray[0]
    if type(a) is not nd or type(b) is not nd:
        return None
    if bias is not None and type(bias) is not nd or c is not None and type(c) is not nd:
        return None
    ad, bd = a.data, b.data  # a and b inline: this runs on every call
    return (a.shape, a.strides, a.dtype, ad.ptr & 255, ad.device_id,
            b.shape, b.strides, b.dtype, bd.ptr & 255, bd.device_id,
            None if bias is None else _layout(bias), None if c is None else _layout(c),
            activation, type(alpha), alpha, type(beta), beta, return_aux, compute_type, autotune)


def lookup(key):
    """The remembered ``(spec, nbytes, flops)`` of ``key``, or ``None``."""
    try:
        return _memo.calls.get(key)
    except TypeError:  # an unhashable option: the full path reports it
        return None


def remember(key, entry):
    calls = _memo.calls
    if len(calls) >= MAX_CALLS:
        calls.clear()
    try:
        calls[key] = entry
    except TypeError:
        pass


def clear():
    """Forget the calling thread's calls (the plan cache's clearing does this)."""
    _memo.calls.clear()
