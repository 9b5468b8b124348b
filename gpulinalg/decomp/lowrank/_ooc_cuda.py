"""The GPU streamer of the out-of-core methods: two pinned host buffers and two device buffers,
the copy of panel ``i + 1`` on a copy stream overlapping the GEMMs of panel ``i`` on the compute
stream."""

import time

import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime.dispatch import note
from ..._runtime.staging import parallel_copy
from ._sketch_cuda import engine
from ._sketch_xp import high_precision

__all__ = ["CupyStreamer", "GPU_PANEL_MAX_BYTES", "BUDGET_FRACTION"]

#: Largest pinned buffer of the GPU streamer.
GPU_PANEL_MAX_BYTES = 512 << 20
#: Share of the GPU budget the streamer's panels take (the rest: sketch, accumulators).
BUDGET_FRACTION = 0.6


class CupyStreamer:
    """Row panels copied through pinned buffers on a copy stream, used on the compute stream
    (the streamer interface is described in ``_ooc_xp``)."""

    def __init__(self, matrix, *, panel_rows=None, check_finite=True):
        import cupy
        import cupyx
        self.xp = cupy
        self.engine = engine()
        self.matrix, self.check_finite = matrix, check_finite
        m, n = matrix.shape
        self.hi = high_precision(matrix.dtype)
        self.wire = _wire_dtype(matrix)
        # two device buffers, the float64 panel, its products with the sketch (l <= 256)
        row = max(n, 1) * (2 * self.wire.itemsize + self.hi.itemsize) + 2 * 256 * 8
        granted = _dispatch.granted_bytes()  # measured by the dispatcher for this run
        budget = GPU_PANEL_MAX_BYTES * 4 if granted is None else granted
        rows = panel_rows or int(budget * BUDGET_FRACTION) // row
        rows = min(rows, max(1, GPU_PANEL_MAX_BYTES // (max(n, 1) * self.wire.itemsize)))
        self.panel_rows = int(min(max(rows, 256), max(m, 1)))
        self.pinned = [cupyx.empty_pinned((self.panel_rows, n), self.wire) for _ in range(2)]
        self.device = [cupy.empty((self.panel_rows, n), self.wire) for _ in range(2)]
        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.compute = cupy.cuda.get_current_stream()
        self.bad = cupy.zeros((), dtype=cupy.bool_)
        self.bytes_moved, self.seconds = 0, 0.0

    def run_pass(self, consume, progress):
        m = self.matrix.shape[0]
        copied, computed = [None, None], [None, None]
        check, self.check_finite = self.check_finite, False  # the first pass checks the data
        t0 = time.perf_counter()
        for i, start in enumerate(range(0, m, self.panel_rows)):
            stop, b = min(m, start + self.panel_rows), i % 2
            rows = stop - start
            if copied[b] is not None:
                copied[b].synchronize()  # pinned buffer b is free again
            self._fill(self.pinned[b][:rows], start, stop)
            if computed[b] is not None:
                self.copy_stream.wait_event(computed[b])  # device buffer b is free again
            self.device[b][:rows].set(self.pinned[b][:rows], stream=self.copy_stream)
            copied[b] = self.copy_stream.record()
            self.compute.wait_event(copied[b])
            with self.compute:
                p = self.device[b][:rows].astype(self.hi, copy=False)
                if check:
                    self.bad |= ~self.xp.isfinite(p).all()
                consume(start, stop, p)
            computed[b] = self.compute.record()
            self.bytes_moved += rows * self.pinned[b].shape[1] * self.wire.itemsize
            progress.update(rows * self.pinned[b].shape[1] * self.wire.itemsize)
        self.compute.synchronize()
        self.seconds += time.perf_counter() - t0
        if check and bool(self.bad):
            raise ValueError(self.matrix.unchecked or "a must not contain infs or NaNs")

    def _fill(self, out, start, stop):
        """Copy rows ``start:stop`` into pinned ``out``; NumPy sources on several threads
        (:func:`~gpulinalg._runtime.staging.parallel_copy`), so the host side keeps up with
        PCIe."""
        src = self.matrix.source
        if not isinstance(src, np.ndarray):
            np.copyto(out, self.matrix.panel(start, stop), casting="unsafe")
            return
        parallel_copy(out, src[start:stop], casting="unsafe")

    def host_buffer(self, shape, dtype):
        """A pinned host array the rows of a result are gathered in (asynchronous copies)."""
        import cupyx
        return cupyx.empty_pinned(shape, dtype)

    def rows_to_host(self, y, out):
        """Copy the device block ``y`` into ``out`` (pinned) on the compute stream, async."""
        y.get(stream=self.compute, out=out, blocking=False)

    def detach(self, out):
        """The gathered pinned buffer as a plain NumPy array (the pinned one goes back)."""
        return np.array(out)

    def finish(self):
        note(streamed_bytes=self.bytes_moved, stream_seconds=self.seconds,
             h2d_gbps=self.bytes_moved / self.seconds / 1e9 if self.seconds else None,
             panel_rows=self.panel_rows)


def _wire_dtype(matrix):
    """What crosses PCIe: the source's own dtype when it is a float type, else the compute one."""
    src = np.dtype(matrix.source.dtype)
    return src if src.kind in "fc" and src.itemsize >= 4 else matrix.dtype
