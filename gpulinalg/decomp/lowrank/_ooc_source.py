"""A host matrix read in row panels: what the out-of-core methods stream (no array code)."""

import numpy as np

__all__ = ["HostMatrix"]


class HostMatrix:
    """A 2-D matrix on the host, read in row panels (kept out of the dispatcher's conversion).

    Parameters
    ----------
    source : ndarray, np.memmap, or object with ``shape``, ``dtype`` and ``source[i:j]``
    dtype : dtype
        Compute dtype of the results (float32/float64/complex).
    unchecked : str, optional
        Set when the entries' finiteness is still to be checked, where the data are read
        (on the device after the upload, or by the first streamed pass): the ``ValueError``
        message to raise on a NaN or infinity.
    """

    def __init__(self, source, dtype, unchecked=None):
        self.source = source
        self.unchecked = unchecked
        self.shape = tuple(int(s) for s in source.shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = self.shape[0] * self.shape[1] * self.dtype.itemsize

    @property
    def in_memory(self):
        """True for a plain in-memory NumPy array (not a memmap, not a dataset)."""
        return isinstance(self.source, np.ndarray) and not isinstance(self.source, np.memmap)

    def panel(self, start, stop):
        return np.asarray(self.source[start:stop])

    def materialize(self):
        """The whole matrix as a NumPy array of the compute dtype (a view when possible)."""
        src = self.source if isinstance(self.source, np.ndarray) else self.panel(0, self.shape[0])
        return np.asarray(src, dtype=self.dtype)
