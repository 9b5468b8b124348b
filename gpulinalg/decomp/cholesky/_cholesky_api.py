"""Cholesky factorization, solves with the factor, and the log-determinant, as SciPy's:
validation and one dispatch each to :mod:`._cholesky_cuda` (cuSOLVER ``Xpotrf``/``Xpotrs``) or
:mod:`._cholesky_host` (LAPACK through SciPy)."""

import math
from typing import Any

import numpy as np

from ..._runtime import arrays as _arrays
from ..._runtime import dispatch as _dispatch
from ..._runtime.budget import nbytes_of
from ..._runtime.gradients import differentiable
from . import _cholesky_cuda, _cholesky_dask, _cholesky_host
from . import _cholesky_grad  # noqa: F401  (registers the gradient rules)
from .._checks import (broadcast_batch, check_dask, check_rhs, cupy_key, empty_result, flag,
                       flops_scale, is_dask, prepare, real_dtype)
from ._cholesky_xp import logdet_checked
from .._gpu._cusolver_cuda import workspace_bytes

__all__ = ["cholesky", "cho_factor", "cho_solve", "logdet_cholesky"]


@differentiable("decomp.cholesky")
@_dispatch.front_door("decomp.cholesky")
def cholesky(a: Any, lower: bool = False, overwrite_a: bool = False,
             check_finite: bool = True) -> Any:
    """Cholesky factor of a Hermitian positive-definite matrix (or a batch of them), as SciPy's.

    Parameters
    ----------
    a : (..., n, n) array_like
        Only the triangle named by ``lower`` is read.
    lower : bool, default False
        Return the lower factor ``L`` (``a = L @ L^H``), else the upper ``U`` (``a = U^H @ U``,
        SciPy's default).
    overwrite_a : bool, default False
        Allow the factorization to reuse ``a``'s memory.
    check_finite : bool, default True
        Raise ``ValueError`` if ``a`` holds NaN or Inf.

    Returns
    -------
    c : (..., n, n) array
        The factor; the other triangle is zero. Same package (NumPy/CuPy/torch) as ``a``.

    Raises
    ------
    gpulinalg.NotPositiveDefiniteError
        With ``.minor`` (1-based order of the failing leading minor) and ``.batch_index``.
    ValueError
        ``a`` holds NaN or Inf: checked up front with ``check_finite=True``; with
        ``check_finite=False`` a factorization that fails is diagnosed (see Notes).

    See Also
    --------
    cho_factor : the factor for :func:`cho_solve` and :func:`logdet_cholesky`.
    scipy.linalg.cholesky : the LAPACK routine behind the CPU engine.

    Notes
    -----
    The GPU engine runs cuSOLVER ``Xpotrf`` (``potrfBatched`` for stacks of matrices up to
    order 1024: the table of ``decomp/_batched_plan.py``) on a working copy laid out for the
    faster lower-triangle kernel; with
    ``overwrite_a`` a GPU input is factored in place when it has that layout, or when the
    working copy would not fit in device memory.

    With ``check_finite=False`` nothing is checked before the factorization. When it fails
    (or leaves NaN on the factor's diagonal), the triangle that was read is checked then: NaN
    or Inf there raises ``ValueError`` instead of a misleading "leading minor not positive"
    (:class:`gpulinalg.LinAlgError` when ``a`` was factored in place and can no longer be
    checked). A successful factorization costs nothing extra.

    A Dask array (2-D, square, tiled alike along both axes) gives a lazy Dask array: a blocked
    right-looking Cholesky on the workers (docs/dask.md); a matrix that is not positive
    definite raises when the result is computed, and ``check_finite`` is not applied (it
    would compute the graph).

    gpulinalg 0.1 defaulted to ``lower=True``; the default is SciPy's ``lower=False`` now
    (docs/migration/decomp.md).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import cholesky
    >>> a = np.array([[4.0, 2.0], [2.0, 3.0]])
    >>> U = cholesky(a)
    >>> bool(np.allclose(U.T @ U, a)), bool(np.allclose(U, np.triu(U)))
    (True, True)
    >>> L = cholesky(a, lower=True)
    >>> bool(np.allclose(L @ L.T, a))
    True
    """
    return _factor("decomp.cholesky", a, lower, overwrite_a, check_finite, clean=True)


@differentiable("decomp.cho_factor")
@_dispatch.front_door("decomp.cho_factor")
def cho_factor(a: Any, lower: bool = False, overwrite_a: bool = False,
               check_finite: bool = True) -> tuple[Any, bool]:
    """Cholesky factor for :func:`cho_solve` and :func:`logdet_cholesky`, as SciPy's.

    Parameters
    ----------
    a : (..., n, n) array_like
    lower : bool, default False
        Factor in the lower triangle (``a = L L^H``), else the upper one (``a = U^H U``).
    overwrite_a : bool, default False
    check_finite : bool, default True

    Returns
    -------
    c : (..., n, n) array
        The factor in the triangle named by ``lower``; the other triangle keeps ``a``'s
        entries (as in SciPy: do not rely on them; for a Dask array it holds zeros).
    lower : bool

    Raises
    ------
    gpulinalg.NotPositiveDefiniteError, ValueError
        As :func:`cholesky`.

    See Also
    --------
    cho_solve : solve with the factor.
    logdet_cholesky : ``log |det a|`` from the factor.
    scipy.linalg.cho_factor : the same pair on the CPU.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import cho_factor, cho_solve, logdet_cholesky
    >>> a = np.array([[4.0, 2.0], [2.0, 3.0]])
    >>> cf = cho_factor(a)
    >>> cf[1]
    False
    >>> x = cho_solve(cf, np.array([1.0, 2.0]))
    >>> bool(np.allclose(a @ x, [1.0, 2.0]))
    True
    >>> bool(np.isclose(logdet_cholesky(cf), np.log(np.linalg.det(a))))
    True
    """
    c = _factor("decomp.cho_factor", a, lower, overwrite_a, check_finite, clean=False)
    return c, bool(lower)


def _factor(op, a, lower, overwrite_a, check_finite, clean):
    overwrite_a = flag(overwrite_a, "overwrite_a")
    # A repeat of a CuPy call (same layout and options) skips the planning below (the
    # dispatcher's memo). Not with overwrite_a: a failed in-place factor could not run again.
    key = None if overwrite_a else cupy_key(op, a, None, (bool(lower), bool(check_finite)))
    return _dispatch.dispatch(_plan_factor, op, a, lower, overwrite_a, check_finite, clean,
                              key is not None, key=key, lead=(a,))


def _plan_factor(op, a, lower, overwrite_a, check_finite, clean, cupy_only):
    if is_dask(a):
        check_dask(a, square=True)
        return _dispatch.Op(op, _cholesky_cuda.cholesky, _cholesky_host.cholesky,
                            (a, bool(lower)), dask_fn=_cholesky_dask.cholesky)
    # GPU input: the engine checks finiteness with the info codes (one read-back in all)
    defer = bool(check_finite) and _arrays.on_gpu(a)
    a, dtype = prepare(a, square=True, check_finite=bool(check_finite) and not defer)
    n = a.shape[-1]
    if a.size == 0:
        return _dispatch.shortcut(op, empty_result(a, (tuple(a.shape), dtype))[0])
    batch = math.prod(a.shape[:-2])
    flops = batch * n ** 3 / 3 * flops_scale(dtype)
    # The estimate holds the input and a working copy. An input already on the GPU that may be
    # overwritten has a second GPU route when that does not fit: factor it in place.
    in_place = _cholesky_cuda.cholesky_in_place if overwrite_a and _arrays.on_gpu(a) else None
    shape = tuple(a.shape)  # the estimate holds no array (a kept call outlives this one)

    def nbytes():
        return 2 * nbytes_of((shape, dtype)) + workspace_bytes("potrf", n, n, dtype)
    return _dispatch.Op(op, _cholesky_cuda.cholesky, _cholesky_host.cholesky,
                        (a, bool(lower), bool(overwrite_a), clean, dtype, defer), nbytes=nbytes,
                        host_nbytes=nbytes_of((shape, dtype)),  # LAPACK's potrf on one copy
                        flops=flops, oversize_fn=in_place, same_package=cupy_only)


@differentiable("decomp.cho_solve")
@_dispatch.front_door("decomp.cho_solve")
def cho_solve(c_and_lower: tuple[Any, bool], b: Any, overwrite_b: bool = False,
              check_finite: bool = True) -> Any:
    """Solve ``a @ x = b`` given the Cholesky factor of ``a`` from :func:`cho_factor`.

    Parameters
    ----------
    c_and_lower : tuple of ((..., n, n) array, bool)
        The output of :func:`cho_factor`.
    b : (n,) or (..., n, k) array_like
        A 1-D ``b`` is one right-hand side for every matrix; otherwise the batch dimensions
        of ``c`` and ``b`` broadcast (SciPy's rule).
    overwrite_b : bool, default False
    check_finite : bool, default True

    Returns
    -------
    x : array of ``b``'s shape (with the broadcast batch)

    Raises
    ------
    gpulinalg.SingularMatrixError
        A zero on the diagonal of ``c``.

    Warns
    -----
    gpulinalg.IllConditionedWarning
        The reciprocal condition number of ``a`` is below the dtype's epsilon, by the rule of
        :func:`solve_triangular` (with ``a = c^H c``, both bounds squared).

    See Also
    --------
    cho_factor : the factor this solves with.
    solve_triangular : the conditioning rule, described in its Notes.
    scipy.linalg.cho_solve : the same solve on the CPU.

    Notes
    -----
    The GPU engine runs cuSOLVER ``Xpotrs``, or two batched cuBLAS triangular solves for
    stacks (all but a few matrices of order above 2048: ``decomp/_batched_plan.py``). Unlike
    SciPy's, it checks the conditioning of the factor (a reduction over its diagonal and over
    ``b`` and ``x``: O(n k), one read-back on the GPU).

    With a Dask factor or right-hand side (the other one is wrapped as a Dask array) the
    result is a lazy Dask array: blocked substitutions on the workers, no conditioning check,
    no ``check_finite`` (docs/dask.md).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import cho_factor, cho_solve
    >>> a = np.array([[4.0, 2.0], [2.0, 3.0]]); b = np.eye(2)
    >>> bool(np.allclose(cho_solve(cho_factor(a), b), np.linalg.inv(a)))
    True
    """
    c, lower = _pair(c_and_lower)
    key = cupy_key("decomp.cho_solve", c, b, (bool(lower), bool(overwrite_b),
                                               bool(check_finite)))
    return _dispatch.dispatch(_plan_cho_solve, c, bool(lower), b, overwrite_b, check_finite,
                              key is not None, key=key, lead=(c, bool(lower), b))


def _plan_cho_solve(c, lower, b, overwrite_b, check_finite, cupy_only):
    if is_dask(c, b):
        return _dask_solve(c, lower, b)
    # GPU input: the engine checks finiteness with the conditioning figures (one read-back)
    defer = bool(check_finite) and (_arrays.on_gpu(c) or _arrays.on_gpu(b))
    c, dtype_c = prepare(c, "c", square=True, check_finite=bool(check_finite) and not defer)
    b, dtype_b = prepare(b, "b", min_ndim=1, check_finite=bool(check_finite) and not defer)
    dtype = np.result_type(dtype_c, dtype_b)
    check_rhs(c, b)
    vec = b.ndim == 1
    batch = broadcast_batch(c.shape[:-2], b.shape[:-2] if not vec else ())
    shape = batch + ((c.shape[-1],) if vec else tuple(b.shape[-2:]))
    if c.shape[-1] == 0 or 0 in shape:
        return _dispatch.shortcut("decomp.cho_solve", empty_result(b, (shape, dtype))[0])
    nb = math.prod(batch)
    nbytes = nbytes_of((c.shape, dtype), (b.shape, dtype), (shape, dtype))
    flops = 2 * nb * c.shape[-1] ** 2 * (1 if vec else b.shape[-1]) * flops_scale(dtype)
    return _dispatch.Op("decomp.cho_solve", _cholesky_cuda.cho_solve, _cholesky_host.cho_solve,
                        (c, lower, b, bool(overwrite_b), dtype, True, defer), nbytes=nbytes,
                        flops=flops, like=b, same_package=cupy_only, own_stream=False)


def _dask_solve(c, lower, b):
    """The :class:`~gpulinalg._runtime.dispatch.Op` of :func:`cho_solve`'s Dask route: a factor
    or right-hand side that is not a Dask array is wrapped as one (tiled as the other), then
    the blocked substitutions."""
    from .._tiles._graph_dask import pair_tiled
    c, b = pair_tiled(c, b, a_square=True)
    check_dask(c, "c", square=True)
    check_dask(b, "b", ndim=(1, 2))
    if b.shape[0] != c.shape[-1]:
        raise ValueError(f"incompatible dimensions: a is {tuple(c.shape)}, "
                         f"b is {tuple(b.shape)}")
    return _dispatch.Op("decomp.cho_solve", _cholesky_cuda.cho_solve, _cholesky_host.cho_solve,
                        (c, lower, b), dask_fn=_dask_cho_solve)


def _dask_cho_solve(c, lower, b):
    return _cholesky_dask.cho_solve((c, lower), b)


def _dask_logdet(c, lower):
    return _cholesky_dask.logdet_cholesky((c, lower))


def _pair(c_and_lower):
    """``(c, lower)`` of a :func:`cho_factor` result; SciPy's batched ``cho_factor`` gives
    ``lower`` as an array (one flag per matrix), taken here when its flags agree."""
    if not isinstance(c_and_lower, (tuple, list)) or len(c_and_lower) != 2:
        raise TypeError("c_and_lower must be the pair (c, lower) returned by cho_factor, "
                        f"got {type(c_and_lower).__name__}")
    c, lower = c_and_lower
    flags = np.asarray(lower)
    if flags.ndim:
        if flags.size == 0 or not (flags == flags.flat[0]).all():
            raise ValueError("lower must be one flag for every matrix of the stack, got "
                             f"{flags.tolist()}")
        lower = flags.flat[0]
    return c, bool(lower)


@differentiable("decomp.logdet_cholesky")
@_dispatch.front_door("decomp.logdet_cholesky")
def logdet_cholesky(c_and_lower: tuple[Any, bool]) -> Any:
    """``log |det a|`` from the Cholesky factor of ``a``: ``2 * sum(log(diag(c)))``.

    Parameters
    ----------
    c_and_lower : tuple of ((..., n, n) array, bool)
        The output of :func:`cho_factor` (or ``(cholesky(a), False)``).

    Returns
    -------
    logdet : float, or (...) array for a batch
        In the real dtype of ``c`` and ``c``'s package.

    Raises
    ------
    ValueError
        ``c``'s diagonal holds NaN or Inf (the result would be NaN or Inf): one flag per
        matrix is read back to check.

    See Also
    --------
    cho_factor : the factor this reads.

    Notes
    -----
    A Dask factor gives a lazy 0-d Dask array (not checked for NaN or Inf: that would compute
    it).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import cho_factor, logdet_cholesky
    >>> a = np.stack([np.eye(3) * 2, np.eye(3) * 3])
    >>> bool(np.allclose(logdet_cholesky(cho_factor(a)), [3 * np.log(2), 3 * np.log(3)]))
    True
    """
    c, _lower = _pair(c_and_lower)
    if is_dask(c):
        check_dask(c, "c", square=True)
        return _dispatch.dispatch(_dispatch.Op("decomp.logdet_cholesky", logdet_checked,
                                               logdet_checked, (c, bool(_lower)),
                                               dask_fn=_dask_logdet))
    c, dtype = prepare(c, "c", square=True, check_finite=False)
    if c.shape[-1] == 0:
        res = _dispatch.shortcut("decomp.logdet_cholesky",
                                 empty_result(c, (tuple(c.shape[:-2]), real_dtype(dtype)))[0])
    else:
        res = _dispatch.dispatch(_dispatch.Op("decomp.logdet_cholesky", logdet_checked,
                                              logdet_checked, (c, dtype),
                                              nbytes=nbytes_of((c.shape, dtype)),
                                              flops=c.shape[-1]))
    return res[()] if isinstance(res, np.ndarray) else res
