"""CPU engine of the dense factorizations: SciPy's LAPACK wrappers, looped over batches.

Each function takes NumPy arrays and has the same signature and return types as its GPU twin
(:mod:`._qr_cuda`, :mod:`._svd_cuda`, :mod:`._cholesky_cuda`, :mod:`._triangular_cuda`). With
those modules this is decomp's internal layer: no validation, no dispatch (``gp`` calls it).
"""

import numpy as np

from .._runtime.validation import check_finite
from ._checks import broadcast_batch, sub
from ._cholesky_xp import check_potrf, logdet
from ._results import QRResult, SVDResult
from ._svd_xp import flip_signs
from ._triangular_xp import check_conditioning, check_nonsingular, rhs_scale

__all__ = ["qr", "svd", "cholesky", "cho_solve", "logdet", "solve_triangular"]


def _over_batch(fn, a, core_ndim=2):
    """Apply ``fn`` to each matrix of ``a`` and stack the results (tuples component-wise,
    nested tuples too: ``((qr, tau), r)``)."""
    if a.ndim == core_ndim:
        return fn(a)
    batch = a.shape[:a.ndim - core_ndim]
    return _stack([fn(a[idx]) for idx in np.ndindex(*batch)], batch)


def _stack(items, batch):
    if isinstance(items[0], tuple):
        parts = [_stack(list(p), batch) for p in zip(*items)]
        return type(items[0])(*parts) if hasattr(items[0], "_fields") else tuple(parts)
    return np.stack(items).reshape(batch + items[0].shape)


def qr(a, mode, pivoting, lwork, overwrite_a, dtype, finite=False):
    """SciPy's ``qr`` of each matrix of ``a``; ``mode`` is ``"full"``, ``"economic"``, ``"r"``
    or ``"raw"``; results as SciPy's (``QRResult`` for ``(Q, R)``). ``finite``: SciPy's
    ``check_finite`` of ``a`` (left to the engine by the api for GPU input, which reaches
    this engine only on a fallback)."""
    import scipy.linalg
    if finite:
        check_finite(a, "a")
    a = np.asarray(a, dtype=dtype)
    overwrite = bool(overwrite_a) and a.ndim == 2

    def one(x):
        given = {} if lwork is None else {"lwork": lwork}  # SciPy >= 1.18 warns on any lwork
        out = scipy.linalg.qr(x, overwrite_a=overwrite, mode=mode, pivoting=pivoting,
                              check_finite=False, **given)
        if mode in ("full", "economic"):
            return QRResult(*out) if not pivoting else tuple(out)
        return tuple(out)
    return _over_batch(one, a)


def svd(a, full_matrices, compute_uv, driver, dtype, lapack_driver="gesdd", overwrite_a=False,
        finite=False):
    """SciPy's ``svd`` with LAPACK ``lapack_driver`` (``driver`` picks the GPU kernel and is
    not read here), with deterministic signs; ``finite``: SciPy's ``check_finite`` of ``a``."""
    import scipy.linalg
    if finite:
        check_finite(a, "a")
    a = np.asarray(a, dtype=dtype)
    overwrite = bool(overwrite_a) and a.ndim == 2

    def one(x):
        out = scipy.linalg.svd(x, full_matrices=full_matrices, compute_uv=compute_uv,
                               overwrite_a=overwrite, check_finite=False,
                               lapack_driver=lapack_driver)
        return SVDResult(*out) if compute_uv else out
    res = _over_batch(one, a)
    return SVDResult(*flip_signs(res.U, res.S, res.Vh, np)) if compute_uv else res


def cholesky(a, lower, overwrite_a, clean, dtype, finite=False):
    """LAPACK ``potrf`` of each matrix of ``a``; raises as :func:`._cholesky_xp.check_potrf`.
    ``finite``: SciPy's ``check_finite`` of ``a`` (left to the engine by the api for GPU
    input, which reaches this engine only on a fallback)."""
    from scipy.linalg import get_lapack_funcs
    if finite:
        check_finite(a, "a")
    a = np.asarray(a, dtype=dtype)
    if a.ndim == 2:
        potrf, = get_lapack_funcs(("potrf",), (a,))
        c, info = potrf(a, lower=lower, overwrite_a=overwrite_a, clean=clean)
        check_potrf(info, c, a, lower, np.may_share_memory(c, a), None, np, finite)
        return c
    out = a if overwrite_a and a.flags.writeable else np.empty_like(a)
    batch = a.shape[:-2]
    for flat, idx in enumerate(np.ndindex(*batch)):
        potrf, = get_lapack_funcs(("potrf",), (a[idx],))
        c, info = potrf(a[idx], lower=lower, overwrite_a=False, clean=clean)
        check_potrf(info, c, a[idx], lower, False, (flat, batch), np, finite)
        out[idx] = c
    return out


def cho_solve(c, lower, b, overwrite_b, dtype, check=False, finite=False):
    """LAPACK ``potrs`` with the factor ``c``; with ``check``, the conditioning rule of
    :func:`._triangular_xp.check_conditioning` (``a = c^H c`` squares ``c``'s bound);
    ``finite``: SciPy's ``check_finite`` of ``c`` and ``b``."""
    from scipy.linalg import get_lapack_funcs
    if finite:
        check_finite(c, "c")
        check_finite(b, "b")
    c, b = np.asarray(c, dtype=dtype), np.asarray(b, dtype=dtype)
    scale = rhs_scale(b, np) if check else None  # before overwrite_b may destroy b
    if c.ndim == 2 and b.ndim <= 2:
        potrs, = get_lapack_funcs(("potrs",), (c, b))
        x, info = potrs(c, b, lower=lower, overwrite_b=overwrite_b)
    else:
        x = _batched_solve(lambda cc, bb: cho_solve(cc, lower, bb, False, dtype), c, b)
    if check:
        check_conditioning(c, scale, x, False, np, squared=True)
    return x


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


def solve_triangular(a, b, trans, lower, unit_diagonal, overwrite_b, dtype, check=False,
                     finite=False):
    """SciPy's ``solve_triangular`` over the broadcast batch. A zero on the diagonal raises
    :class:`gpulinalg.SingularMatrixError`; with ``check``, also the conditioning rule of
    :func:`._triangular_xp.check_conditioning` (after the solve); ``finite``: SciPy's
    ``check_finite`` of ``a`` and ``b``."""
    import scipy.linalg
    if finite:
        check_finite(a, "a")
        check_finite(b, "b")
    a, b = np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)
    if not unit_diagonal:
        check_nonsingular(a, np)
    scale = rhs_scale(b, np) if check else None  # before overwrite_b may destroy b

    def one(aa, bb, overwrite=False):
        return scipy.linalg.solve_triangular(aa, bb, trans=trans, lower=lower,
                                             unit_diagonal=unit_diagonal,
                                             overwrite_b=overwrite, check_finite=False)
    if a.ndim == 2 and b.ndim <= 2:
        x = one(a, b, overwrite_b)
    else:
        x = _batched_solve(one, a, b)
    if check:
        check_conditioning(a, scale, x, unit_diagonal, np)
    return x
