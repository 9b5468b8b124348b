"""GPU engine of least squares and the pseudo-inverse.

``lstsq``: for ``m >= n``, Householder QR (``Xgeqrf``) and ``Q^H b`` (``ormqr``) on the
column-major copies, then either a triangular solve with R (``gelsy`` whose R passes the
full-rank check: cuBLAS ``trsm`` through the triangular engine) or the SVD of the small
``n x n`` R through the SVD engine (``gelsd``, ``gelss``: exactly LAPACK's rank rule on A's
singular values, and the minimum-norm solution); for ``m < n``, the SVD of A. ``pinv``: the
SVD engine, then one product.

CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.
"""


import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime.validation import check_finite
from .._checks import broadcast_batch, real_dtype
from .._gpu._cusolver_cuda import Solver, fortran_batch
from .._results import LstsqResult
from ..svd import _svd_cuda
from ..triangular import _triangular_cuda

__all__ = ["lstsq", "pinv", "full_rank"]


def full_rank(diag_abs, rcond, n, dtype):
    """gelsy's check of R without pivoting: ``min |r_ii| > max(rcond, n eps) max |r_ii|``
    for every matrix (``diag_abs``: (B, n) host array). A failed check sends the call to the
    SVD of R; a passed one cannot see a rank deficiency that R's diagonal hides."""
    tol = max(rcond, n * float(np.finfo(real_dtype(dtype)).eps))
    return bool(np.all(diag_abs.min(axis=-1) > tol * diag_abs.max(axis=-1)))


def lstsq(a, b, cond, driver, dtype, overwrite_a=False, overwrite_b=False, finite=False):
    """SciPy's ``(x, residues, rank, s)`` for the CuPy ``a`` (..., m, n) and ``b`` ((m,) or
    (..., m, k)); ``overwrite_a``/``overwrite_b`` are not read (the engine works on copies)."""
    import cupy
    if finite:
        check_finite(a, "a")
        check_finite(b, "b")
    m, n = a.shape[-2:]
    vec = b.ndim == 1
    batch = broadcast_batch(a.shape[:-2], () if vec else b.shape[:-2])
    k = 1 if vec else b.shape[-1]
    eps = float(np.finfo(real_dtype(dtype)).eps)
    rcond = eps if cond is None or cond < 0 else float(cond)  # LAPACK: negative means eps
    wa = fortran_batch(cupy.broadcast_to(a, batch + (m, n)), dtype)
    wb = fortran_batch(cupy.broadcast_to(b[:, None] if vec else b, batch + (m, k)), dtype)
    s = tail = None
    if m >= n:
        r, c, tail = _qr_reduce(wa, wb, dtype)
        way = "qr+trsm" if driver == "gelsy" and full_rank(
            cupy.abs(cupy.diagonal(r, axis1=-2, axis2=-1)).get(), rcond, n, dtype) else "qr+svd"
        if way == "qr+trsm":
            x = _triangular_cuda.solve_triangular(r, c, 0, False, False, False, dtype)
            rank = np.full(len(wa), n)
        else:
            x, rank, s = _from_svd(_svd(r, dtype), c, rcond)
    else:
        way = "svd"
        x, rank, s = _from_svd(_svd(wa, dtype), wb, rcond)
    _dispatch.note(route=way)
    residues = _residues(tail, rank, n, driver, x.dtype, batch, vec)
    x = x.reshape(batch + ((n,) if vec else (n, k)))
    if driver == "gelsy":
        s = None
    elif s is not None:
        s = s.reshape(batch + s.shape[-1:])
    rank = int(rank[0]) if not batch else cupy.asarray(rank.astype(np.int32).reshape(batch))
    return LstsqResult(x, residues, rank, s)


#: Up to this order the SVD runs cuSOLVER's Jacobi kernels (``gesvdj``, batched for stacks)
#: rather than the fused small-SVD kernel ``driver="auto"`` would take: on the emulator that
#: kernel returns NaN singular values for a rank-deficient complex triangular factor
#: (tests/decomp/lstsq: test_small_svd_route_rank_deficient_complex).
JACOBI_MAX = 32


def _svd(x, dtype, finite=False):
    """Economy SVD of the CuPy stack ``x`` through the SVD engine (signs deterministic)."""
    driver = "gesvdj" if min(x.shape[-2:]) <= JACOBI_MAX else "auto"
    return _svd_cuda.svd(x, False, True, driver, dtype, finite=finite)


def _qr_reduce(wa, wb, dtype):
    """QR of each column-major ``wa[i]`` (m x n, m >= n) in place and ``wb[i] <- Q^H wb[i]``:
    ``(R (B, n, n), (Q^H b)[:n], (Q^H b)[n:])``."""
    import cupy
    nb, m, n = wa.shape
    tau = cupy.empty((nb, n), dtype=dtype)
    with Solver(dtype, 2 * nb) as sv:
        for i in range(nb):
            sv.geqrf(wa[i], tau[i], 2 * i)
            sv.ormqr(wa[i], n, tau[i], wb[i], 2 * i + 1, adjoint=True)
        sv.done()  # QR cannot fail numerically: nothing to wait for
    return cupy.triu(wa[:, :n, :]), wb[:, :n, :], wb[:, n:, :]


def _from_svd(usv, c, rcond):
    """The minimum-norm solution ``V diag(1/s) U^H c`` over the singular values above
    ``rcond * s_max`` (LAPACK gelsd's rule); ``(x, rank (host), s)``."""
    import cupy
    u, s, vh = usv
    keep = s > rcond * s[..., :1]
    inv = cupy.where(keep, 1 / cupy.where(keep, s, 1), 0).astype(u.dtype)
    y = (u.conj().swapaxes(-1, -2) @ c) * inv[..., :, None]
    x = vh.conj().swapaxes(-1, -2) @ y
    return x, keep.sum(axis=-1).get(), s


def _residues(tail, rank, n, driver, dtype, batch, vec):
    """``||(Q^H b)[n:]||^2`` per column where SciPy reports it (gelsd, gelss: ``m > n`` and
    full rank in every matrix), else an empty array of ``x``'s dtype, as SciPy's."""
    import cupy
    if tail is None or tail.shape[1] == 0 or driver == "gelsy" or np.any(rank != n):
        return cupy.empty(batch + (0,), dtype=dtype)
    res = (cupy.abs(tail) ** 2).sum(axis=-2)
    return res.reshape(batch + (() if vec else res.shape[-1:]))


def pinv(a, atol, rtol, return_rank, dtype, finite=False):
    """The pseudo-inverse of the CuPy stack ``a`` (..., m, n) from its SVD, over the singular
    values above ``atol + rtol * s_max`` (SciPy's rule); ``(B, rank)`` with ``return_rank``."""
    import cupy
    u, s, vh = _svd(a, dtype, finite)
    keep = s > atol + rtol * s.max(axis=-1, keepdims=True)
    inv = cupy.where(keep, 1 / cupy.where(keep, s, 1), 0).astype(u.dtype)
    out = (vh.conj().swapaxes(-1, -2) * inv[..., None, :]) @ u.conj().swapaxes(-1, -2)
    if not return_rank:
        return out
    rank = keep.sum(axis=-1)
    return out, (int(rank) if rank.ndim == 0 else rank)
