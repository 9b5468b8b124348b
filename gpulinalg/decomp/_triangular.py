"""Triangular solves (cuBLAS ``<t>trsm``), as ``scipy.linalg.solve_triangular``.

A C-ordered triangular matrix read column-major is its transpose, so it is solved in place
with the transposed operation and the other triangle; no transposing copy of ``a`` is made
(except for ``trans="C"`` on a C-ordered complex matrix).
"""

import numpy as np

from .._runtime import dispatch as _dispatch
from .._runtime.budget import nbytes_of
from . import _cpu
from ._cholesky import _check_rhs, _matrix_order
from ._common import broadcast_batch, empty_result, flops_scale, prepare, sub
from ._cusolver import routines

__all__ = ["solve_triangular"]

_TRANS = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2, "n": 0, "t": 1, "c": 2}


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """Solve ``a @ x = b`` (or ``a.T``, ``a.H``) for triangular ``a``, as SciPy's.

    Parameters
    ----------
    a : (..., n, n) array_like
        Only the triangle named by ``lower`` is read.
    b : (n,) or (..., n, k) array_like
        A 1-D ``b`` is one right-hand side for every matrix; otherwise the batch dimensions
        of ``a`` and ``b`` broadcast (SciPy's rule).
    trans : {0, 1, 2, "N", "T", "C"}, default 0
        Solve ``a x = b``, ``a^T x = b`` or ``a^H x = b``.
    lower : bool, default False
    unit_diagonal : bool, default False
        Take the diagonal of ``a`` as ones without reading it.
    overwrite_b : bool, default False
    check_finite : bool, default True

    Returns
    -------
    x : array of ``b``'s shape (with the broadcast batch), in ``b``'s package

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import solve_triangular
    >>> L = np.array([[2.0, 0.0], [1.0, 4.0]]); b = np.array([2.0, 9.0])
    >>> x = solve_triangular(L, b, lower=True)
    >>> bool(np.allclose(L @ x, b)), bool(np.allclose(solve_triangular(L, b, trans="T",
    ...                                               lower=True), np.linalg.solve(L.T, b)))
    (True, True)
    """
    if trans not in _TRANS:
        raise ValueError(f"trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    a, dtype_a = prepare(a, square=True, check_finite=check_finite)
    b, dtype_b = prepare(b, "b", min_ndim=1, check_finite=check_finite)
    dtype = np.result_type(dtype_a, dtype_b)
    _check_rhs(a, b)
    vec = b.ndim == 1
    batch = broadcast_batch(a.shape[:-2], () if vec else b.shape[:-2])
    shape = batch + ((a.shape[-1],) if vec else tuple(b.shape[-2:]))
    if a.shape[-1] == 0 or 0 in shape:
        return empty_result(b, (shape, dtype))[0]
    nb = int(np.prod(batch, dtype=np.int64))
    k = 1 if vec else b.shape[-1]
    nbytes = nbytes_of((a.shape, dtype), (b.shape, dtype), (shape, dtype), (a.shape, dtype))
    flops = nb * a.shape[-1] ** 2 * k * flops_scale(dtype)
    return _dispatch.dispatch("decomp.solve_triangular", _gpu_solve, _cpu.solve_triangular,
                              (a, b, _TRANS[trans], bool(lower), bool(unit_diagonal),
                               bool(overwrite_b), dtype), nbytes=nbytes, flops=flops, like=b)


def _gpu_solve(a, b, trans, lower, unit_diagonal, overwrite_b, dtype):
    import cupy
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    batch = broadcast_batch(a.shape[:-2], b2.shape[:-2])
    n, k = b2.shape[-2:]
    nb = int(np.prod(batch, dtype=np.int64))
    x = cupy.empty((nb, k, n), dtype=dtype).transpose(0, 2, 1)
    x[...] = cupy.broadcast_to(b2, batch + (n, k)).reshape(nb, n, k)
    for i, idx in enumerate(np.ndindex(*batch)):
        _trsm(sub(a, idx, 2).astype(dtype, copy=False), x[i], trans, lower, unit_diagonal)
    x = x.reshape(batch + (n, k))
    return x[..., 0] if vec else x


def _trsm(a, x, trans, lower, unit_diagonal):
    """``x <- op(a)^-1 x`` in place; ``x`` column-major."""
    import cupy
    from nvmath.bindings import cublas

    from .._runtime.streams import get_handle
    order = _matrix_order(a)
    if order is None or (order == "C" and trans == 2 and a.dtype.kind == "c"):
        a, order = cupy.asfortranarray(a), "F"
    if order == "C":  # column-major view is a^T: swap N <-> T, and the triangle
        trans, lower = (1 if trans == 0 else 0), not lower
    r = routines(a.dtype)
    one = np.ones(1, dtype=a.dtype)
    n, k = x.shape
    ops = (cublas.Operation.N, cublas.Operation.T, cublas.Operation.C)
    getattr(cublas, r.prefix + "trsm")(
        get_handle("cublas"), int(cublas.SideMode.LEFT),
        int(cublas.FillMode.LOWER if lower else cublas.FillMode.UPPER), int(ops[trans]),
        int(cublas.DiagType.UNIT if unit_diagonal else cublas.DiagType.NON_UNIT),
        n, k, one.ctypes.data, a.data.ptr, max(n, 1), x.data.ptr, max(n, 1))
