"""CPU pieces of the row-panel randomized SVD / PCA on Dask (:mod:`._randomized_dask`): how a
task walks a NumPy row panel. The graph builder takes them for NumPy chunks and passes them to
the generic tasks of :mod:`._rowpass_xp` (the twin of :mod:`._rowpass_cuda`, same names).

* A fused task walks its panel in row steps of :data:`STEP_BYTES` (:func:`fused_step`): each
  step of the block is still in the core's cache for its second product (``A_s^H Y_s`` after
  ``Y_s = A_s Z``), so the block is read from memory once for both.
* The basis pass's panel QR (:func:`panel_qr`) is a TSQR of row steps of :data:`QR_STEP_BYTES`
  done in place by LAPACK (:func:`._tiles_host.tall_qr`): one Householder QR of the whole panel
  sweeps its memory once per column.
* ``Q_i = q_i S_i`` is formed a step of ``q_i`` at a time into its result (:func:`block_step`),
  and the fused task sums ``T_i`` in place: a large array made per step would cost more than it
  saves on a Dask worker, whose allocator maps and faults in every large array (the nanny sets
  ``MALLOC_TRIM_THRESHOLD_``).
"""

import numpy as np

from .._tiles._tiles_host import tall_qr

__all__ = ["STEP_BYTES", "QR_STEP_BYTES", "fused_step", "block_step", "panel_qr"]

#: Bytes of a row panel (all its column chunks) per step of a fused task: a step stays in the
#: core's cache between its two products.
STEP_BYTES = 2 << 20
#: Bytes of a panel's double precision ``Y_i`` (or ``q_i``) per step of the basis pass: a
#: step's Householder sweeps run in the core's L2 cache.
QR_STEP_BYTES = 512 << 10


def fused_step(row_bytes, l):
    """Rows per step of a fused task over a panel of ``row_bytes`` bytes a row whose thin
    factor has ``l`` columns: :data:`STEP_BYTES` worth, at least ``4 l``.

    >>> fused_step(800 * 4, 30)
    655
    >>> fused_step(10 ** 9, 30)
    120
    """
    return max(STEP_BYTES // max(int(row_bytes), 1), 4 * int(l), 1)


def block_step(cols, itemsize):
    """Rows of ``q_i`` (``cols`` columns of ``itemsize`` bytes) per step of
    :func:`._rowpass_xp.basis_block`: :data:`QR_STEP_BYTES` worth."""
    return max(QR_STEP_BYTES // max(int(cols) * int(itemsize), 1), 1)


def panel_qr(y, dtype):
    """``(q, r)``: the reduced Householder QR, in ``dtype``, of a panel's ``Y_i`` (rows, l):
    a TSQR of row steps of :data:`QR_STEP_BYTES` worth (at least ``4 l`` rows) when ``Y_i`` has
    more rows than one step, else one LAPACK QR.

    >>> y = np.random.default_rng(0).standard_normal((5000, 8)).astype(np.float32)
    >>> q, r = panel_qr(y, np.float64)
    >>> q.dtype, q.shape, r.shape, bool(np.allclose(q @ r, y, atol=1e-5))
    (dtype('float64'), (5000, 8), (8, 8), True)
    """
    dtype = np.dtype(dtype)
    rows, l = (int(v) for v in y.shape)
    step = max(block_step(l, dtype.itemsize), 4 * l)
    if rows > step:
        return tall_qr(y, dtype, step)
    return np.linalg.qr(y.astype(dtype), mode="reduced")
