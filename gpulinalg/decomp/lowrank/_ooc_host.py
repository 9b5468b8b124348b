"""The CPU streamer of the out-of-core methods: row panels as float64 (complex128) NumPy arrays."""

import numpy as np

from ._sketch_host import ENGINE
from ._sketch_xp import high_precision

__all__ = ["NumpyStreamer", "CPU_PANEL_BYTES"]

#: Panel size of the CPU streamer.
CPU_PANEL_BYTES = 64 << 20


class NumpyStreamer:
    """Row panels of a :class:`~gpulinalg.decomp.lowrank._ooc_source.HostMatrix` as float64
    (complex128) NumPy arrays (the streamer interface is described in ``_ooc_xp``)."""

    engine = ENGINE

    def __init__(self, matrix, *, panel_rows=None, check_finite=True):
        self.matrix, self.check_finite = matrix, check_finite
        m, n = matrix.shape
        row_bytes = max(n, 1) * 8
        self.panel_rows = int(panel_rows or max(1, min(m, CPU_PANEL_BYTES // row_bytes)))
        self.hi = high_precision(matrix.dtype)
        self.bytes_moved, self.seconds = 0, 0.0

    def run_pass(self, consume, progress):
        m = self.matrix.shape[0]
        check, self.check_finite = self.check_finite, False  # the first pass checks the data
        for start in range(0, m, self.panel_rows):
            stop = min(m, start + self.panel_rows)
            p = np.asarray(self.matrix.panel(start, stop), dtype=self.hi)
            if check and not np.isfinite(p).all():
                raise ValueError(self.matrix.unchecked or "a must not contain infs or NaNs")
            consume(start, stop, p)
            progress.update(p.shape[0] * p.shape[1] * self.matrix.dtype.itemsize)

    def host_buffer(self, shape, dtype):
        """A host array the rows of a result are gathered in."""
        return np.empty(shape, dtype)

    def rows_to_host(self, y, out):
        """Copy the block of rows ``y`` into ``out`` (a slice of a :meth:`host_buffer`)."""
        out[...] = y

    def detach(self, out):
        """The gathered :meth:`host_buffer` as the caller's array."""
        return out

    def finish(self):
        pass
