"""CPU engine of least squares and the pseudo-inverse: SciPy's ``lstsq`` and ``pinv`` over the
broadcast batch; the twin of :mod:`._lstsq_cuda`."""

import numpy as np

from ..._runtime.validation import check_finite
from .._checks import broadcast_batch, over_batch, sub, writable
from .._results import LstsqResult

__all__ = ["lstsq", "pinv", "stack_lstsq"]


def lstsq(a, b, cond, driver, dtype, overwrite_a=False, overwrite_b=False, finite=False):
    """SciPy's ``lstsq`` with LAPACK ``driver`` of every matrix of ``a`` against ``b`` ((m,):
    one right-hand side for every matrix; else (..., m, k)); ``finite``: ``check_finite``."""
    import scipy.linalg
    if finite:
        check_finite(a, "a")
        check_finite(b, "b")
    a, b = np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)
    vec = b.ndim == 1
    batch = broadcast_batch(a.shape[:-2], () if vec else b.shape[:-2])
    if not batch:
        return LstsqResult(*scipy.linalg.lstsq(
            a, b, cond, overwrite_a=writable(a, overwrite_a), check_finite=False,
            overwrite_b=writable(b, overwrite_b), lapack_driver=driver))
    items = [scipy.linalg.lstsq(sub(a, idx, 2), b if vec else sub(b, idx, 2), cond,
                                check_finite=False, lapack_driver=driver)
             for idx in np.ndindex(*batch)]
    return stack_lstsq(items, batch)


def stack_lstsq(items, batch):
    """One ``LstsqResult`` of a batch's: ``x`` and ``s`` stacked, ``rank`` an integer array,
    ``residues`` stacked where every matrix has them (full rank, ``m > n``), else empty."""
    x = np.stack([it[0] for it in items]).reshape(batch + items[0][0].shape)
    res = [np.asarray(it[1]) for it in items]
    if all(r.size and r.shape == res[0].shape for r in res):
        residues = np.stack(res).reshape(batch + res[0].shape)
    else:
        residues = np.empty(batch + (0,), dtype=x.dtype)
    rank = np.array([int(it[2]) for it in items], dtype=np.int32).reshape(batch)
    s = None if items[0][3] is None else np.stack([it[3] for it in items]).reshape(
        batch + items[0][3].shape)
    return LstsqResult(x, residues, rank, s)


def pinv(a, atol, rtol, return_rank, dtype, finite=False):
    """SciPy's ``pinv`` of every matrix of ``a`` with the thresholds resolved by the api."""
    import scipy.linalg
    if finite:
        check_finite(a, "a")
    a = np.asarray(a, dtype=dtype)
    return over_batch(lambda x: scipy.linalg.pinv(x, atol=atol, rtol=rtol,
                                                  return_rank=return_rank, check_finite=False), a)
