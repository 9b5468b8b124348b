"""GPU engine of the triangular solves: cuBLAS ``<t>trsm`` and ``<t>trsmBatched``.

A C-ordered triangular matrix read column-major is its transpose, so it is solved in place
with the transposed operation and the other triangle; no transposing copy of ``a`` is made
(except for ``trans="C"`` on a C-ordered complex matrix). Part of decomp's internal layer:
CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.
"""

import numpy as np

from ._checks import broadcast_batch, matrix_order, sub
from ._batched_plan import route
from ._cusolver_cuda import pointer_array, routines
from ._triangular_xp import check_conditioning, check_nonsingular, rhs_scale

__all__ = ["solve_triangular", "rhs_copy", "finish_rhs", "stack_matrices", "trsm_batched"]


def solve_triangular(a, b, trans, lower, unit_diagonal, overwrite_b, dtype, check=False):
    """``op(a)^-1 b`` for CuPy ``a`` (..., n, n) and ``b`` ((n,) or (..., n, k)); ``trans``
    0, 1 or 2 (N, T, C). Raises :class:`gpulinalg.SingularMatrixError` on a zero diagonal
    entry unless ``unit_diagonal``. ``b`` is never written (a copy is solved in place).

    ``check``: the conditioning rule of :mod:`._triangular_xp`, after the solve, with the
    zero-diagonal check in the same single read-back (without ``check``, the zero check runs
    before the solve)."""
    import cupy
    if not unit_diagonal and not check:
        check_nonsingular(a, cupy)
    x = _solve(a, b, trans, lower, unit_diagonal, dtype)
    if check:
        check_conditioning(a, rhs_scale(b, cupy), x, unit_diagonal, cupy)
    return x


def _solve(a, b, trans, lower, unit_diagonal, dtype):
    x, batch, vec = rhs_copy(a, b, dtype)
    n = a.shape[-1]
    if route("trsm", n, len(x)) == "batched":
        trsm_batched(stack_matrices(a, batch, dtype), x, trans, lower, unit_diagonal)
    else:
        for i, idx in enumerate(np.ndindex(*batch)):
            _trsm(sub(a, idx, 2).astype(dtype, copy=False), x[i], trans, lower, unit_diagonal)
    return finish_rhs(x, batch, vec)


def rhs_copy(a, b, dtype):
    """``(x, batch, vec)``: ``b`` broadcast over the batch of ``a`` and copied to a new
    ``(B, n, k)`` array of column-major matrices (a 1-D ``b`` is one column)."""
    import cupy
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    batch = broadcast_batch(a.shape[:-2], b2.shape[:-2])
    n, k = b2.shape[-2:]
    nb = int(np.prod(batch, dtype=np.int64))
    x = cupy.empty((nb, k, n), dtype=dtype).transpose(0, 2, 1)
    x[...] = cupy.broadcast_to(b2, batch + (n, k)).reshape(nb, n, k)
    return x, batch, vec


def finish_rhs(x, batch, vec):
    x = x.reshape(batch + x.shape[1:])
    return x[..., 0] if vec else x


def stack_matrices(a, batch, dtype):
    """``a`` broadcast to ``batch`` as a ``(B, n, n)`` array whose matrices are contiguous in
    ``a``'s own order (C or column-major), with a uniform stride; no copy when ``a`` already
    is one."""
    import cupy
    n = a.shape[-1]
    nb = int(np.prod(batch, dtype=np.int64))
    order = matrix_order(a) or "F"
    if (order == "C" and a.flags.c_contiguous and a.dtype == dtype
            and tuple(a.shape[:-2]) == tuple(batch)):
        return a.reshape(nb, n, n)
    w = cupy.empty((nb, n, n), dtype=dtype)
    if order == "F":
        w = w.transpose(0, 2, 1)
    w[...] = cupy.broadcast_to(a, tuple(batch) + (n, n)).reshape(nb, n, n)
    return w


def _op(a, trans, lower):
    """``(a, trans, lower)`` for cuBLAS: a C-ordered ``a`` read column-major is ``a^T``, so
    N and T swap and so do the triangles; ``a^H`` of a C-ordered complex ``a`` needs a
    column-major copy."""
    import cupy
    order = matrix_order(a)
    if order is None or (order == "C" and trans == 2 and a.dtype.kind == "c"):
        a = cupy.asfortranarray(a) if a.ndim == 2 else _fortran_stack(a)
        order = "F"
    if order == "C":
        trans, lower = (1 if trans == 0 else 0), not lower
    return a, trans, lower


def _fortran_stack(a):
    import cupy
    w = cupy.empty((a.shape[0], a.shape[2], a.shape[1]), dtype=a.dtype).transpose(0, 2, 1)
    w[...] = a
    return w


def _cublas_args(a, trans, lower, unit_diagonal):
    from nvmath.bindings import cublas
    ops = (cublas.Operation.N, cublas.Operation.T, cublas.Operation.C)
    return (int(cublas.SideMode.LEFT),
            int(cublas.FillMode.LOWER if lower else cublas.FillMode.UPPER), int(ops[trans]),
            int(cublas.DiagType.UNIT if unit_diagonal else cublas.DiagType.NON_UNIT))


def _trsm(a, x, trans, lower, unit_diagonal):
    """``x <- op(a)^-1 x`` in place; ``x`` column-major."""
    from nvmath.bindings import cublas

    from .._runtime.streams import get_handle
    a, trans, lower = _op(a, trans, lower)
    one = np.ones(1, dtype=a.dtype)
    n, k = x.shape
    getattr(cublas, routines(a.dtype).prefix + "trsm")(
        get_handle("cublas"), *_cublas_args(a, trans, lower, unit_diagonal),
        n, k, one.ctypes.data, a.data.ptr, max(n, 1), x.data.ptr, max(n, 1))


def trsm_batched(a, x, trans, lower, unit_diagonal):
    """``x[i] <- op(a[i])^-1 x[i]`` for a stack, in one ``<t>trsmBatched`` call; ``a`` from
    :func:`stack_matrices`, ``x`` from :func:`rhs_copy`."""
    from nvmath.bindings import cublas

    from .._runtime.streams import get_handle
    a, trans, lower = _op(a, trans, lower)
    one = np.ones(1, dtype=a.dtype)
    nb, n, k = x.shape
    a_ptrs, x_ptrs = pointer_array(a), pointer_array(x)
    getattr(cublas, routines(a.dtype).prefix + "trsm_batched")(
        get_handle("cublas"), *_cublas_args(a, trans, lower, unit_diagonal),
        n, k, one.ctypes.data, a_ptrs.data.ptr, max(n, 1), x_ptrs.data.ptr, max(n, 1), nb)
