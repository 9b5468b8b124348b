"""CPU engine of the dense factorizations: SciPy's LAPACK wrappers, looped over batches.

Each function takes NumPy arrays and has the same signature and return types as its GPU twin
(:mod:`._qr_cuda`, :mod:`._svd_cuda`, :mod:`._cholesky_cuda`, :mod:`._triangular_cuda`). With
those modules this is decomp's internal layer: no validation, no dispatch (``gp`` calls it).
"""

import numpy as np

from .._runtime.errors import NotPositiveDefiniteError
from ._checks import batch_index, broadcast_batch, sub
from ._cholesky_xp import logdet
from ._results import QRResult, SVDResult
from ._svd_xp import flip_signs
from ._triangular_xp import check_nonsingular

__all__ = ["qr", "svd", "cholesky", "cho_solve", "logdet", "solve_triangular"]

_QR_MODES = {"reduced": "economic", "complete": "full", "r": "r"}
_SVD_DRIVERS = {"gesvd": "gesvd"}  # every other driver is GPU-only: LAPACK gesdd stands in


def _over_batch(fn, a, core_ndim=2):
    """Apply ``fn`` to each matrix of ``a`` and stack the results (tuples component-wise)."""
    if a.ndim == core_ndim:
        return fn(a)
    batch = a.shape[:a.ndim - core_ndim]
    items = [fn(a[idx]) for idx in np.ndindex(*batch)]
    if isinstance(items[0], tuple):
        parts = zip(*items)
        stacked = [np.stack(p).reshape(batch + p[0].shape) for p in parts]
        return type(items[0])(*stacked)
    return np.stack(items).reshape(batch + items[0].shape)


def qr(a, mode, dtype):
    import scipy.linalg
    a = np.asarray(a, dtype=dtype)
    k = min(a.shape[-2:])

    def one(x):
        out = scipy.linalg.qr(x, mode=_QR_MODES[mode], check_finite=False)
        return out[0][:k] if mode == "r" else QRResult(*out)
    return _over_batch(one, a)


def svd(a, full_matrices, compute_uv, driver, dtype):
    import scipy.linalg
    a = np.asarray(a, dtype=dtype)
    lapack = _SVD_DRIVERS.get(driver, "gesdd")

    def one(x):
        out = scipy.linalg.svd(x, full_matrices=full_matrices, compute_uv=compute_uv,
                               check_finite=False, lapack_driver=lapack)
        return SVDResult(*out) if compute_uv else out
    res = _over_batch(one, a)
    return SVDResult(*flip_signs(res.U, res.S, res.Vh, np)) if compute_uv else res


def cholesky(a, lower, overwrite_a, clean, dtype):
    from scipy.linalg import get_lapack_funcs
    a = np.asarray(a, dtype=dtype)
    if a.ndim == 2:
        potrf, = get_lapack_funcs(("potrf",), (a,))
        c, info = potrf(a, lower=lower, overwrite_a=overwrite_a, clean=clean)
        _check_potrf(info, c, None)
        return c
    out = a if overwrite_a and a.flags.writeable else np.empty_like(a)
    batch = a.shape[:-2]
    for flat, idx in enumerate(np.ndindex(*batch)):
        potrf, = get_lapack_funcs(("potrf",), (a[idx],))
        c, info = potrf(a[idx], lower=lower, overwrite_a=False, clean=clean)
        _check_potrf(info, c, batch_index(flat, batch))
        out[idx] = c
    return out


def _check_potrf(info, c, where):
    if info > 0:
        raise NotPositiveDefiniteError(info, where)
    if info < 0:
        raise ValueError(f"potrf rejected argument {-info}")
    bad = np.flatnonzero(~np.isfinite(np.diagonal(c)))
    if bad.size:  # NaN on the diagonal: never hand back a silent NaN factor
        raise NotPositiveDefiniteError(bad[0] + 1, where)


def cho_solve(c, lower, b, overwrite_b, dtype):
    from scipy.linalg import get_lapack_funcs
    c, b = np.asarray(c, dtype=dtype), np.asarray(b, dtype=dtype)
    if c.ndim == 2 and b.ndim <= 2:
        potrs, = get_lapack_funcs(("potrs",), (c, b))
        x, info = potrs(c, b, lower=lower, overwrite_b=overwrite_b)
        return x
    return _batched_solve(lambda cc, bb: cho_solve(cc, lower, bb, False, dtype), c, b)


def _batched_solve(solve_one, a, b):
    """Loop ``solve_one`` over the broadcast batch of ``a`` (..., n, n) and ``b`` (..., n, k);
    a 1-D ``b`` is one right-hand side for every matrix."""
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    batch = broadcast_batch(a.shape[:-2], b2.shape[:-2])
    out = np.empty(batch + b2.shape[-2:], dtype=np.result_type(a, b))
    for idx in np.ndindex(*batch):
        out[idx] = solve_one(sub(a, idx, 2), sub(b2, idx, 2))
    return out[..., 0] if vec else out


def solve_triangular(a, b, trans, lower, unit_diagonal, overwrite_b, dtype):
    import scipy.linalg
    a, b = np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)
    if not unit_diagonal:
        check_nonsingular(a, np)

    def one(aa, bb, overwrite=False):
        return scipy.linalg.solve_triangular(aa, bb, trans=trans, lower=lower,
                                             unit_diagonal=unit_diagonal,
                                             overwrite_b=overwrite, check_finite=False)
    if a.ndim == 2 and b.ndim <= 2:
        return one(a, b, overwrite_b)
    return _batched_solve(one, a, b)

