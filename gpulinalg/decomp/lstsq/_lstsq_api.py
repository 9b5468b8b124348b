"""Least squares and the pseudo-inverse, as ``scipy.linalg.lstsq`` and ``pinv``: validation and
one dispatch to :mod:`._lstsq_cuda` (cuSOLVER QR, the triangular and SVD engines) or
:mod:`._lstsq_host` (SciPy)."""

import math
from typing import Any, Literal

import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime.arrays import on_gpu
from ..._runtime.budget import nbytes_of
from ..._runtime.validation import as_array
from ..._runtime.gradients import differentiable
from . import _lstsq_cuda, _lstsq_dask, _lstsq_host
from . import _lstsq_grad  # noqa: F401  (registers the gradient rules)
from .._checks import (broadcast_batch, check_dask, cupy_key, demote_long, empty_result, flag,
                       flops_scale, is_dask, prepare, real_dtype)
from .._gpu._cusolver_cuda import workspace_bytes
from .._results import LstsqResult

__all__ = ["lstsq", "pinv"]

LAPACK_DRIVERS = ("gelsd", "gelsy", "gelss")


@differentiable("decomp.lstsq")
@_dispatch.front_door("decomp.lstsq")
def lstsq(a: Any, b: Any, cond: float | None = None, overwrite_a: bool = False,
          overwrite_b: bool = False, check_finite: bool = True,
          lapack_driver: Literal["gelsd", "gelsy", "gelss"] | None = None) -> LstsqResult:
    """Least-squares solution of ``a @ x = b`` (minimum norm where ``a`` is rank deficient),
    as SciPy's.

    Parameters
    ----------
    a : (..., M, N) array_like
    b : (M,) or (..., M, K) array_like
        A 1-D ``b`` is one right-hand side for every matrix; otherwise the batch dimensions
        of ``a`` and ``b`` broadcast (SciPy's rule).
    cond : float, optional
        Singular values ``<= cond * s_max`` count as zero (``gelsd``, ``gelss``); the
        condition bound of ``gelsy``. Default: the dtype's epsilon.
    overwrite_a, overwrite_b : bool, default False
        Allow the CPU engine to reuse the inputs' memory (a read-only array is never
        written; the GPU engine always works on copies).
    check_finite : bool, default True
        Raise ``ValueError`` if an input holds NaN or Inf.
    lapack_driver : {"gelsd", "gelsy", "gelss"}, optional
        LAPACK routine of the CPU engine (default ``"gelsd"``); it also picks the GPU route
        (see Notes).

    Returns
    -------
    LstsqResult(x, residues, rank, s)
        ``x`` (..., N) or (..., N, K). ``residues``: the squared 2-norms of the columns of
        ``b - a @ x`` when ``M > N`` and ``rank == N`` (``gelsd``, ``gelss``), else an
        empty array. ``rank``: an int (an integer array of the batch shape for a batch).
        ``s``: singular values of ``a``, descending (``None`` for ``gelsy``). A tuple:
        ``x, res, rank, s = lstsq(a, b)`` works as with SciPy.

    Raises
    ------
    gpulinalg.LinAlgError
        The SVD did not converge.
    ValueError
        Bad shapes (SciPy's messages) or driver.

    See Also
    --------
    pinv : the pseudo-inverse.
    scipy.linalg.lstsq : the LAPACK routines behind the CPU engine.

    Notes
    -----
    The GPU engine reduces a matrix with ``M >= N`` by Householder QR (``Xgeqrf``, then
    ``Q^H b`` by ``ormqr``). For ``gelsd`` and ``gelss`` it then takes the SVD of the
    ``N x N`` factor R (the singular values of ``a``): the rank is LAPACK's rule on them
    exactly, and the solution the minimum-norm one, so a rank-deficient ``a`` is answered as
    SciPy's ``gelsd`` answers it. For ``gelsy`` it solves with R (cuBLAS ``trsm``) when R
    passes a full-rank check (``min |r_ii| > max(cond, N eps) max |r_ii|``), and takes the SVD
    of R otherwise; without column pivoting (cuSOLVER has none) that check can miss a rank
    deficiency R's diagonal hides, where LAPACK's pivoted ``gelsy`` would see it. A matrix
    with ``M < N`` goes through the SVD of ``a``. In a batch, ``residues`` are returned when
    every matrix has them. A tall Dask ``a`` (``M >= N``) is reduced by one TSQR of
    ``[a | b]`` on the cluster, results lazy (``docs/dask.md``).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import lstsq
    >>> a = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]]); b = np.array([1.0, 2.0, 2.0])
    >>> x, res, rank, s = lstsq(a, b)
    >>> bool(np.allclose(x, np.linalg.lstsq(a, b, rcond=None)[0])), int(rank)
    (True, 2)
    >>> bool(np.isclose(res, np.sum((b - a @ x) ** 2)))
    True
    """
    key = cupy_key("decomp.lstsq", a, b, (_hashable(cond), bool(overwrite_a), bool(overwrite_b),
                                          bool(check_finite), lapack_driver))
    return _dispatch.dispatch(_plan, a, b, cond, overwrite_a, overwrite_b, check_finite,
                              lapack_driver, key=key, lead=(a, b))


def _hashable(x):
    return x if x is None or isinstance(x, (int, float)) else repr(x)


def _plan(a, b, cond, overwrite_a, overwrite_b, check_finite, lapack_driver):
    """Validate a :func:`lstsq` call in SciPy's order; its
    :class:`~gpulinalg._runtime.dispatch.Op`."""
    overwrite_a, overwrite_b = flag(overwrite_a, "overwrite_a"), flag(overwrite_b, "overwrite_b")
    if is_dask(a, b):
        return _dask_op(a, b, cond, lapack_driver)
    defer = bool(check_finite) and (on_gpu(a) or on_gpu(b))
    a, dtype_a = prepare(demote_long(a), check_finite=bool(check_finite) and not defer)
    b, dtype_b = prepare(demote_long(b), "b", min_ndim=1,
                         check_finite=bool(check_finite) and not defer)
    m, n = a.shape[-2:]
    vec = b.ndim == 1
    rows = b.shape[0] if vec else b.shape[-2]
    if m != rows:
        raise ValueError("Shape mismatch: a and b should have the same number"
                         f" of rows ({m} != {rows}).")
    batch = broadcast_batch(a.shape[:-2], () if vec else b.shape[:-2])
    dtype = np.result_type(dtype_a, dtype_b)
    k = 1 if vec else b.shape[-1]
    xshape = batch + ((n,) if vec else (n, k))
    if m == 0 or n == 0 or k == 0 or math.prod(batch) == 0:
        return _dispatch.shortcut("decomp.lstsq", _empty(a, b, xshape, batch, n, vec, dtype))
    driver = "gelsd" if lapack_driver is None else lapack_driver
    if driver not in LAPACK_DRIVERS:
        raise ValueError(f'LAPACK driver "{driver}" is not found')
    nb, p = math.prod(batch), min(m, n)
    flops = nb * (2 * m * n * p + 2 * m * n * k + 22 * p ** 3) * flops_scale(dtype)
    arrays = nbytes_of((batch + (m, n), dtype), (batch + (m, k), dtype), (batch + (p, p), dtype),
                       (batch + (p, max(m, n)), dtype), (batch + (p, p), dtype),
                       (xshape, dtype))
    return _dispatch.Op(
        "decomp.lstsq", _lstsq_cuda.lstsq, _lstsq_host.lstsq,
        (a, b, cond, driver, dtype, overwrite_a, overwrite_b, defer), flops=flops,
        host_nbytes=arrays, nbytes=lambda: arrays + workspace_bytes("geqrf", max(m, n), p, dtype)
        + workspace_bytes("gesvd", p, p, dtype))


def _dask_op(a, b, cond, lapack_driver):
    """The :class:`~gpulinalg._runtime.dispatch.Op` of the Dask route (a tall ``a``, ``m >= n``:
    one TSQR of ``[a | b]``); an operand that is not a Dask array is wrapped as one."""
    from .._tiles._graph_dask import pair_tiled
    a, b = (x if is_dask(x) else as_array(x, nm) for x, nm in ((a, "a"), (b, "b")))
    if len(a.shape) == 2 and len(b.shape) in (1, 2) and a.shape[0] != b.shape[0]:
        raise ValueError("Shape mismatch: a and b should have the same number"
                         f" of rows ({a.shape[0]} != {b.shape[0]}).")
    a, b = pair_tiled(a, b, a_square=False)
    check_dask(a, "a")
    check_dask(b, "b", ndim=(1, 2))
    m, n = (int(d) for d in a.shape)
    driver = "gelsd" if lapack_driver is None else lapack_driver
    if driver not in LAPACK_DRIVERS:
        raise ValueError(f'LAPACK driver "{driver}" is not found')
    if m < n:
        raise ValueError(f"lstsq of a Dask array needs a tall a (m >= n, reduced by TSQR); got "
                         f"shape {(m, n)}: for a short-and-fat system use a NumPy or CuPy array")
    if n == 0 or (b.ndim == 2 and b.shape[1] == 0):
        raise ValueError(f"lstsq of a Dask array needs n >= 1 and k >= 1; got a {(m, n)} and "
                         f"b {tuple(b.shape)}")
    return _dispatch.Op("decomp.lstsq", _lstsq_cuda.lstsq, _lstsq_host.lstsq,
                        (a, b, cond, driver), dask_fn=_lstsq_dask.lstsq)


def _empty(a, b, xshape, batch, n, vec, dtype):
    """SciPy's answer to an empty problem: ``x`` zeros; ``residues`` the squared norms of
    ``b``'s columns when ``N == 0``, else empty; rank 0; ``s`` empty."""
    x, s = empty_result(a, (xshape, dtype), (batch + (0,), real_dtype(dtype)))
    if n == 0:
        residues = (abs(b) ** 2).sum(-1 if vec else -2)
    else:
        residues = empty_result(a, (batch + (0,), dtype))[0]
    return LstsqResult(x, residues, 0, s)


@differentiable("decomp.pinv")
@_dispatch.front_door("decomp.pinv")
def pinv(a: Any, *, atol: float | None = None, rtol: float | None = None,
         return_rank: bool = False, check_finite: bool = True) -> Any:
    """Moore-Penrose pseudo-inverse of a matrix or batch from its SVD, as SciPy's.

    Parameters
    ----------
    a : (..., M, N) array_like
    atol : float, optional
        Absolute threshold term, default 0.
    rtol : float, optional
        Relative threshold term, default ``max(M, N) * eps`` of ``a``'s dtype. Singular
        values ``<= atol + rtol * s_max`` count as zero.
    return_rank : bool, default False
        Also return the effective rank (an integer array of the batch shape for a batch).
    check_finite : bool, default True
        Raise ``ValueError`` if ``a`` holds NaN or Inf.

    Returns
    -------
    B : (..., N, M) array, in ``a``'s package
    rank : int or integer array
        With ``return_rank``.

    Raises
    ------
    gpulinalg.LinAlgError
        The SVD did not converge.
    ValueError
        ``atol`` or ``rtol`` negative.

    See Also
    --------
    lstsq : least squares without forming the inverse.
    scipy.linalg.pinv : the CPU engine.

    Notes
    -----
    The GPU engine takes the SVD through :func:`svd`'s engine, then ``V diag(1/s) U^H`` over
    the kept singular values in one product.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import pinv
    >>> a = np.random.default_rng(0).standard_normal((6, 4))
    >>> p = pinv(a)
    >>> p.shape, bool(np.allclose(a @ p @ a, a)), bool(np.allclose(p, np.linalg.pinv(a)))
    ((4, 6), True, True)
    """
    key = cupy_key("decomp.pinv", a, None, (_hashable(atol), _hashable(rtol), bool(return_rank),
                                            bool(check_finite)))
    return _dispatch.dispatch(_plan_pinv, a, atol, rtol, return_rank, check_finite, key=key,
                              lead=(a,))


def _plan_pinv(a, atol, rtol, return_rank, check_finite):
    """Validate a :func:`pinv` call; its :class:`~gpulinalg._runtime.dispatch.Op`."""
    defer = bool(check_finite) and on_gpu(a)
    a, dtype = prepare(demote_long(a), check_finite=bool(check_finite) and not defer)
    m, n = a.shape[-2:]
    batch = tuple(a.shape[:-2])
    atol = 0.0 if atol is None else atol
    rtol = max(m, n) * float(np.finfo(real_dtype(dtype)).eps) if rtol is None else rtol
    if atol < 0.0 or rtol < 0.0:
        raise ValueError("atol and rtol values must be positive.")
    if a.size == 0:
        out = empty_result(a, (batch + (n, m), dtype))[0]
        return _dispatch.shortcut("decomp.pinv", (out, 0) if return_rank else out)
    nb, p = math.prod(batch), min(m, n)
    flops = nb * (4 * max(m, n) * p * p + 22 * p ** 3 + 2 * m * n * p) * flops_scale(dtype)
    arrays = nbytes_of((a.shape, dtype), (batch + (m, p), dtype), (batch + (p, n), dtype),
                       (batch + (n, m), dtype), (batch + (max(m, n), p), dtype))
    return _dispatch.Op(
        "decomp.pinv", _lstsq_cuda.pinv, _lstsq_host.pinv,
        (a, float(atol), float(rtol), bool(return_rank), dtype, defer), flops=flops,
        host_nbytes=arrays, nbytes=lambda: arrays + workspace_bytes("gesvd", max(m, n), p, dtype)
        + workspace_bytes("geqrf", max(m, n), p, dtype))
