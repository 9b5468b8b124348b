"""CPU engine of QR: SciPy's LAPACK wrappers, looped over batches; the twin of :mod:`._qr_cuda`."""

import numpy as np

from ..._runtime.validation import check_finite
from .._checks import over_batch, writable
from .._results import QRResult

__all__ = ["qr", "tile_qr"]


def qr(a, mode, pivoting, lwork, overwrite_a, dtype, finite=False):
    """SciPy's ``qr`` of each matrix of ``a``; ``mode`` is ``"full"``, ``"economic"``, ``"r"``
    or ``"raw"``; results as SciPy's (``QRResult`` for ``(Q, R)``). ``finite``: SciPy's
    ``check_finite`` of ``a`` (left to the engine by the api for GPU input, which reaches
    this engine only on a fallback)."""
    import scipy.linalg
    if finite:
        check_finite(a, "a")
    a = np.asarray(a, dtype=dtype)
    overwrite = writable(a, overwrite_a) and a.ndim == 2

    def one(x):
        given = {} if lwork is None else {"lwork": lwork}  # SciPy >= 1.18 warns on any lwork
        out = scipy.linalg.qr(x, overwrite_a=overwrite, mode=mode, pivoting=pivoting,
                              check_finite=False, **given)
        if mode in ("full", "economic"):
            return QRResult(*out) if not pivoting else tuple(out)
        return tuple(out)
    return over_batch(one, a)


def tile_qr(x):
    """Dask tile task: reduced QR of the block ``x`` (m, n): ``(Q (m, k), R (k, n))``,
    ``k = min(m, n)``."""
    m, n = x.shape
    k = min(m, n)
    if k == 0:
        return np.zeros((m, k), x.dtype), np.zeros((k, n), x.dtype)
    import scipy.linalg
    q, r = scipy.linalg.qr(x, mode="economic", check_finite=False)
    return q, r
