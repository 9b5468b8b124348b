"""Stream-parallel loops: the per-matrix cuSOLVER calls of a stack spread over a few streams.

Where no batched library routine exists for a stack of medium matrices (``orgqr``, ``gesvdj``
above 32, ``geqrf`` past the cuBLAS batched limit), one call per matrix on one stream leaves
the GPU mostly idle: each call is a chain of small kernels. :class:`fan` hands out ``lanes``
(a non-blocking stream and a cuSOLVER handle bound to it, made once per thread and device),
ordered after the work already queued on the caller's stream and joined back into it on exit,
so results are safe to use on the caller's stream at once, as with
:class:`gpulinalg._runtime.streams.op_stream`. How many lanes an op gets is the table's
(:func:`._batched_plan.lanes`).

Memory: anything a lane allocates is allocated inside ``with lane.stream`` (CuPy's pool
reuses freed blocks only on the stream they were allocated on); outputs written by lanes are
allocated by the caller before the fan and outlive it.
"""

import contextlib
import dataclasses
import threading

__all__ = ["Lane", "fan", "spread"]

_local = threading.local()


@dataclasses.dataclass(frozen=True)
class Lane:
    stream: object   # cupy.cuda.Stream
    handle: int      # cuSOLVER handle bound to ``stream``


def _lanes(count):
    """The first ``count`` lanes of this thread on the current device (made on first use;
    they live as long as the thread)."""
    import cupy
    from nvmath.bindings import cusolverDn
    dev = cupy.cuda.Device().id
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = {}
    lanes = pool.setdefault(dev, [])
    while len(lanes) < count:
        stream = cupy.cuda.Stream(non_blocking=True)
        handle = cusolverDn.create()
        cusolverDn.set_stream(handle, stream.ptr)
        lanes.append(Lane(stream, handle))
    return lanes[:count]


class fan:
    """``with fan(count) as lanes``: ``count`` lanes ordered after the caller's current
    stream, which waits for all of them on exit (also when the block raises, so that nothing
    freed afterwards is still in use). ``count <= 1`` gives ``[]``: run on the caller's stream."""

    def __init__(self, count):
        self.count = int(count)
        self.lanes = []
        self.caller = None

    def __enter__(self):
        if self.count <= 1:
            return []
        import cupy
        self.caller = cupy.cuda.get_current_stream()
        self.lanes = _lanes(self.count)
        start = self.caller.record()
        for lane in self.lanes:
            lane.stream.wait_event(start)
        return self.lanes

    def __exit__(self, *exc):
        for lane in self.lanes:
            self.caller.wait_event(lane.stream.record())
        return False


def spread(sv, lanes, count):
    """``[(solver, stream context), ...]`` for ``count`` items of a loop, round robin: item
    ``i`` runs with ``out[i % len(out)]``. Without lanes: ``sv`` on the caller's stream."""
    if not lanes:
        return [(sv, contextlib.nullcontext())]
    return [(sv.lane(lane.handle), lane.stream) for lane in lanes[:max(int(count), 1)]]
