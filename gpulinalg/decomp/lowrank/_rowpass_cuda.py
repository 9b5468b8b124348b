"""GPU pieces of the row-panel randomized SVD / PCA on Dask (:mod:`._randomized_dask`): the twin
of :mod:`._rowpass_host` (same names) for CuPy chunks, passed by the graph builder to the
generic tasks of :mod:`._rowpass_xp`.

A GPU streams a whole panel in one kernel per product, and a step per kernel launch would only
add launches: the tasks take their panels whole (the step functions answer ``None``), and the
basis pass's panel QR is CuPy's Householder QR of the whole ``Y_i``.
"""

__all__ = ["fused_step", "block_step", "panel_qr"]


def fused_step(row_bytes, l):
    """``None``: a fused task takes its CuPy panel in one step."""
    return None


def block_step(cols, itemsize):
    """``None``: ``Q_i = q_i S_i`` is one product."""
    return None


def panel_qr(y, dtype):
    """``(q, r)``: the reduced Householder QR of the CuPy ``Y_i`` in ``dtype``."""
    import cupy
    return cupy.linalg.qr(y.astype(dtype), mode="reduced")
