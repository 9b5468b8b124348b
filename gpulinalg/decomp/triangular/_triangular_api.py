"""Triangular solves, as ``scipy.linalg.solve_triangular``: validation and one dispatch to
:mod:`._triangular_cuda` (cuBLAS ``trsm``) or :mod:`._triangular_host` (SciPy)."""

import math
from typing import Any, Literal

import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime.arrays import on_gpu
from ..._runtime.budget import nbytes_of
from ..._runtime.gradients import differentiable
from . import _triangular_host
from . import _triangular_cuda
from ._triangular_grad import TRANS as _TRANS
from .._checks import broadcast_batch, check_rhs, cupy_key, empty_result, flops_scale, prepare

__all__ = ["solve_triangular"]



@differentiable("decomp.solve_triangular")
@_dispatch.front_door("decomp.solve_triangular")
def solve_triangular(a: Any, b: Any, trans: Literal[0, 1, 2, "N", "T", "C"] = 0,
                     lower: bool = False, unit_diagonal: bool = False,
                     overwrite_b: bool = False, check_finite: bool = True) -> Any:
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

    Raises
    ------
    gpulinalg.SingularMatrixError
        A zero on the diagonal (unless ``unit_diagonal``), on both backends.

    Warns
    -----
    gpulinalg.IllConditionedWarning
        The reciprocal condition number of ``op(a)`` is below the dtype's epsilon (see Notes).

    See Also
    --------
    cho_solve : two triangular solves with a Cholesky factor.
    scipy.linalg.solve_triangular : the same solve on the CPU.

    Notes
    -----
    The GPU engine solves a single matrix with at most 16 right-hand sides in one launch of
    its own kernel (a thread block per panel of 64 rows, up to order 16384), stacks in one
    launch of its fused or streamed kernels, and the rest with cuBLAS ``trsm`` /
    ``trsmBatched`` (``decomp/_batched_plan.py``), on ``a``'s own memory: a C-ordered matrix
    is read as the transposed column-major one.

    Unlike SciPy's, this solve checks the conditioning, by one rule on both backends:

    1. a zero on the diagonal raises :class:`gpulinalg.SingularMatrixError`;
    2. ``rcond = 1 / max(max|a_ii| / min|a_ii|, max|a_ii| * max_j ||x_j|| / ||b_j||)``
       (infinity norms; each term is a lower bound on the condition number of ``op(a)``)
       below ``numpy.finfo(dtype).eps`` warns :class:`gpulinalg.IllConditionedWarning`.

    The bound costs O(n + n k) (one read-back of three numbers on the GPU) and never warns
    falsely, but it can miss ill-conditioning that neither the diagonal nor ``b`` reveals;
    LAPACK's ``?trcon`` is sharper but costs 10 to 14 times the solve of one right-hand side.
    The bound is recorded as ``rcond_bound`` in :func:`gpulinalg.last_run` details.

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
    key = cupy_key("decomp.solve_triangular", a, b, (
        trans, bool(lower), bool(unit_diagonal), bool(overwrite_b), bool(check_finite)))
    return _dispatch.dispatch(_plan, a, b, trans, lower, unit_diagonal, overwrite_b,
                              check_finite, key is not None, key=key, lead=(a, b))


def _plan(a, b, trans, lower, unit_diagonal, overwrite_b, check_finite, cupy_only):
    """Validate a :func:`solve_triangular` call; its :class:`~gpulinalg._runtime.dispatch.Op`."""
    if trans not in _TRANS:
        raise ValueError(f"trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    # GPU input: the engine checks finiteness with the conditioning figures (one read-back)
    defer = bool(check_finite) and (on_gpu(a) or on_gpu(b))
    a, dtype_a = prepare(a, square=True, check_finite=bool(check_finite) and not defer)
    b, dtype_b = prepare(b, "b", min_ndim=1, check_finite=bool(check_finite) and not defer)
    dtype = np.result_type(dtype_a, dtype_b)
    check_rhs(a, b)
    vec = b.ndim == 1
    batch = broadcast_batch(a.shape[:-2], () if vec else b.shape[:-2])
    shape = batch + ((a.shape[-1],) if vec else tuple(b.shape[-2:]))
    if a.shape[-1] == 0 or 0 in shape:
        return _dispatch.shortcut("decomp.solve_triangular", empty_result(b, (shape, dtype))[0])
    nb = math.prod(batch)
    k = 1 if vec else b.shape[-1]
    nbytes = nbytes_of((a.shape, dtype), (b.shape, dtype), (shape, dtype), (a.shape, dtype))
    flops = nb * a.shape[-1] ** 2 * k * flops_scale(dtype)
    return _dispatch.Op("decomp.solve_triangular", _triangular_cuda.solve_triangular,
                        _triangular_host.solve_triangular,
                        (a, b, _TRANS[trans], bool(lower), bool(unit_diagonal), bool(overwrite_b),
                         dtype, True, defer),
                        nbytes=nbytes, flops=flops, like=b, same_package=cupy_only,
                        own_stream=False)
