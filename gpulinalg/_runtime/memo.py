"""The dispatcher's memo of planned calls: what a repeat of a call may skip.

An ``_api`` function that hands :func:`~gpulinalg._runtime.dispatch.dispatch` a *key* (the
call's operation, its arrays' package, shapes, strides, dtypes, devices and alignments, and its
options: never an array) and its *lead* (the call's own leading arguments, arrays as given)
lets the front door keep, per thread, a :class:`Kept` entry for that key after the first call:

* the :class:`~gpulinalg._runtime.dispatch.Op` its planner (validation, estimates) made,
  without the call's arrays, and ``tail``, the validated arguments after the lead;
* the :class:`~gpulinalg._runtime.config.Settings` object it was planned under (an entry serves
  only calls under that same object: a plan may read the settings);
* while it holds, the GPU decision: the device and the reason of a GPU run on the arrays as
  given, of a job of at most ``budget.FREE_CACHE_FRACTION`` of the memory then available.

A repeat skips the planner; with a GPU decision kept (and no device provider installed, the
GPU not disabled) it also skips the decision and runs the GPU function at once.
"""

import threading
from typing import Any

__all__ = ["Kept", "CallMemo", "MAX_CALLS", "lookup", "remember", "clear"]

#: Calls remembered per thread; the memo starts afresh when it is full.
MAX_CALLS = 256


class Kept:
    """The memo's entry of one key (see the module's docstring). ``dev is None``: no GPU
    decision is kept (every repeat decides, without planning).

    Examples
    --------
    >>> from gpulinalg._runtime.dispatch import Op
    >>> k = Kept(op=Op("demo", None, abs), tail=(), like_at=None, settings=None)
    >>> k.dev is None, k.name
    (True, 'demo')
    """

    __slots__ = ("op", "tail", "like_at", "settings", "dev", "reason", "name", "gpu_fn",
                 "own_stream")

    def __init__(self, op, tail, like_at, settings):
        self.op, self.tail, self.like_at, self.settings = op, tail, like_at, settings
        self.dev = self.reason = None
        self.hold_op(op)

    def hold_op(self, op):
        """Keep ``op`` (its name, GPU function and stream choice read once: a repeat reads them
        from the entry itself)."""
        self.op, self.name, self.gpu_fn, self.own_stream = op, op.name, op.gpu_fn, op.own_stream

    def like(self, args):
        """The argument whose package and device results take (``None``: the first array)."""
        return None if self.like_at is None else args[self.like_at]


class CallMemo(threading.local):
    """``key -> entry`` for the calling thread, at most ``limit`` entries (a full memo starts
    afresh); a key that cannot be hashed (an unhashable option) is never remembered.

    Examples
    --------
    >>> memo = CallMemo(2)
    >>> memo.remember(("op", (3, 3)), "entry")
    >>> memo.lookup(("op", (3, 3))), memo.lookup(("op", [3, 3]))
    ('entry', None)
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls: dict[Any, Any] = {}

    def lookup(self, key):
        """What :meth:`remember` kept for ``key``, or ``None``."""
        try:
            return self.calls.get(key)
        except TypeError:  # an unhashable option: the full path reports it
            return None

    def remember(self, key, entry) -> None:
        """Keep ``entry`` for ``key``."""
        calls = self.calls
        if len(calls) >= self.limit:
            calls.clear()
        try:
            calls[key] = entry
        except TypeError:
            pass

    def clear(self) -> None:
        """Forget the calling thread's calls."""
        self.calls.clear()


_memo = CallMemo(MAX_CALLS)
#: The calling thread's entry of a key (or ``None``); keep one; forget the thread's calls.
lookup, remember, clear = _memo.lookup, _memo.remember, _memo.clear


def entries():
    """The calling thread's entries, ``{key: Kept}`` (for tests and benchmarks)."""
    return _memo.calls
