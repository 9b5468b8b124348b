"""Chains of library launches replayed as CUDA graphs, one per thread and fixed layout.

A batched library routine launches a chain of small kernels: cuSOLVER's ``potrfBatched``
makes 22 launches over 512 matrices of order 128 and 46 over 64 of order 256. On such stacks
the host time of the launches, not the GPU's work, sets the time of a call (on the H200 the
call took 0.43-0.63 ms where its kernels ran 0.21-0.25 ms). Captured once into a CUDA graph,
the chain costs one graph launch.

A graph replays the device addresses it was captured with, so an :class:`Entry` owns the
buffers its chain reads and writes through (made once per thread and key: pointer arrays,
``info`` codes), and the caller fills and reads them around each launch. A chain that cannot
be captured (a routine that synchronizes, or a stream that cannot capture) runs directly on
every call, and its key is not tried again. Part of the runtime: CuPy only, the calling
thread's current stream.

>>> ENABLED
True
"""

import collections
import threading
from typing import Any

__all__ = ["ENABLED", "MAX_ENTRIES", "SLOTS", "Entry", "entry", "clear"]

#: Capture chains into graphs (``False``: every chain runs directly).
ENABLED = True
#: Entries kept per thread; the cache is emptied when it is full.
MAX_ENTRIES = 64

#: Entries kept per chain for different places of its stacks (:func:`entry`'s ``address``):
#: a caller that keeps its last result while it asks for the next one (``x = f(a)`` in a
#: loop) alternates between two blocks of CuPy's pool, and each block keeps its pointers.
SLOTS = 2

_local = threading.local()


class Entry:
    """The buffers of one chain and its captured graph (``None``: not captured yet;
    ``False``: cannot be captured, runs directly)."""

    __slots__ = ("buffers", "graph", "runs")

    def __init__(self, buffers):
        self.buffers = buffers
        self.graph: Any = None
        self.runs = 0  # direct runs before the capture

    def launch(self, record, warm=0):
        """Issue the chain: ``record(buffers)`` launches it on the current stream, touching
        device memory only through ``buffers`` and addresses fixed by the entry's key. The
        first call captures it (and launches the graph); later calls launch the graph.
        ``warm``: run directly that many times first (a chain whose key holds the address of
        its data is captured only when that address comes back; its first run also loads
        its kernels and library workspaces, which a capture does not allow)."""
        import cupy
        if self.graph is None and self.runs < warm:
            self.runs += 1
            record(self.buffers)
            return
        if self.graph is None:
            self.graph = _capture(cupy, record, self.buffers) if ENABLED else False
        if self.graph is False:
            record(self.buffers)
        else:
            self.graph.launch(cupy.cuda.get_current_stream())


def entry(key, make, address=None):
    """The calling thread's :class:`Entry` for ``key`` (it must name the device and every
    value the chain depends on); ``make()`` gives its buffers on first use.

    ``address`` (any hashable value: where the chain's stacks are): one of :data:`SLOTS`
    entries for ``key``, the one last used with that address when there is one, else the
    least recently used (whose buffers the caller then refills)."""
    cache = getattr(_local, "entries", None)
    if cache is None:
        cache = _local.entries = {}
    if address is not None:
        key = key + (_slot(cache, key, address),)
    got = cache.get(key)
    if got is None:
        if len(cache) >= MAX_ENTRIES:
            cache.clear()
        got = cache[key] = Entry(make())
    return got


def _slot(cache, key, address):
    """The slot of ``key`` for ``address``: its own, a free one, or the least recently used."""
    recent = cache.get(("slots", key))
    if recent is None:
        recent = cache[("slots", key)] = collections.OrderedDict()
    slot = recent.get(address)
    if slot is not None:
        recent.move_to_end(address)
        return slot
    if len(recent) < SLOTS:
        slot = len(recent)
    else:
        slot = recent.popitem(last=False)[1]
    recent[address] = slot
    return slot


def clear():
    """Drop the calling thread's entries (their graphs and buffers)."""
    _local.entries = {}


def _capture(cupy, record, buffers):
    """The graph of ``record(buffers)`` on the current stream, or ``False`` (the stream cannot
    capture, or the chain did something a capture does not allow: then nothing ran)."""
    stream = cupy.cuda.get_current_stream()
    try:
        if not stream.ptr or stream.is_capturing():
            return False  # the legacy default stream, or inside a caller's own capture
        stream.begin_capture()
    except Exception:  # noqa: BLE001 - no capture here: run the chain directly
        return False
    try:
        record(buffers)
    except Exception:  # noqa: BLE001 - the capture is abandoned; the chain runs directly
        try:
            stream.end_capture()
        except Exception:  # noqa: BLE001, S110 - an invalidated capture: nothing to keep
            pass
        return False
    try:
        return stream.end_capture()
    except Exception:  # noqa: BLE001 - the capture was invalidated: run the chain directly
        return False
