"""A per-thread, bounded memo of validated calls: the per-call hot paths of ``dense`` and
``decomp`` keep there what a call's validation and the dispatcher's decision worked out, under a
key of the call's layout and options (never an array), for its repeats.
"""

import threading
from typing import Any

__all__ = ["CallMemo"]


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
