"""Symmetric/Hermitian eigenproblems, as ``scipy.linalg.eigh`` and ``eigvalsh``: validation and
one dispatch to :mod:`._eigh_cuda` (cuSOLVER ``syevd``, ``syevdx``, ``sygvd``, ``sygvdx``,
``syevjBatched``) or :mod:`._eigh_host` (SciPy)."""

import math
from typing import Any, Literal

import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime.arrays import on_gpu
from ..._runtime.budget import nbytes_of
from ..._runtime.gradients import differentiable
from . import _eigh_cuda
from . import _eigh_host
from . import _eigh_grad  # noqa: F401  (registers the gradient rules)
from .._checks import (broadcast_batch, cupy_key, demote_long, empty_result, flag, flops_scale,
                       prepare, real_dtype)
from .._gpu._cusolver_cuda import workspace_bytes
from .._results import EighResult

__all__ = ["eigh", "eigvalsh"]

DRIVERS = (None, "ev", "evd", "evr", "evx", "gv", "gvd", "gvx")

Driver = Literal["ev", "evd", "evr", "evx", "gv", "gvd", "gvx"] | None


@differentiable("decomp.eigh")
@_dispatch.front_door("decomp.eigh")
def eigh(a: Any, b: Any = None, *, lower: bool = True, eigvals_only: bool = False,
         overwrite_a: bool = False, overwrite_b: bool = False, type: int = 1,
         check_finite: bool = True, subset_by_index: Any = None, subset_by_value: Any = None,
         driver: Driver = None) -> EighResult | Any:
    """Eigenvalues and eigenvectors of a Hermitian (real symmetric) matrix or batch, as SciPy's:
    ``a @ v = w * v``, or ``a @ v = w * b @ v`` with Hermitian positive definite ``b``.

    Parameters
    ----------
    a : (..., M, M) array_like
        Only the triangle named by ``lower`` is read.
    b : (..., M, M) array_like, optional
        Positive definite: the generalized problem of type ``type``. The batch dimensions
        of ``a`` and ``b`` broadcast.
    lower : bool, default True
        Read the lower (else the upper) triangle of ``a`` and ``b``.
    eigvals_only : bool, default False
        Return the eigenvalues alone.
    overwrite_a, overwrite_b : bool, default False
        Allow the CPU engine to reuse the inputs' memory (a read-only array is never
        written; the GPU engine always works on copies).
    type : {1, 2, 3}, default 1
        With ``b``: 1 ``a v = w b v``, 2 ``a b v = w v``, 3 ``b a v = w v``.
    check_finite : bool, default True
        Raise ``ValueError`` if an input holds NaN or Inf.
    subset_by_index : (int, int), optional
        The 0-based indices ``lo <= hi`` of the (ascending) eigenvalues wanted, inclusive.
    subset_by_value : (float, float), optional
        The eigenvalues in the half-open interval ``(lo, hi]``.
    driver : {None, "ev", "evd", "evr", "evx", "gv", "gvd", "gvx"}, default None
        LAPACK driver of the CPU engine, validated as SciPy does; the GPU engine has one
        cuSOLVER routine per problem and reads it for validation only (see Notes).

    Returns
    -------
    EighResult(eigenvalues, eigenvectors), or the eigenvalues alone with ``eigvals_only``
        ``eigenvalues`` (..., K) real, ascending; ``eigenvectors`` (..., M, K), column ``i``
        belongs to eigenvalue ``i`` (``K = M`` unless a subset was asked for). A tuple:
        ``w, v = eigh(a)`` works as with SciPy.

    Raises
    ------
    gpulinalg.LinAlgError
        The eigensolver did not converge, or ``b`` is not positive definite.
    ValueError
        Bad shapes or options (SciPy's checks); a subset by value that finds different
        numbers of eigenvalues in the matrices of a batch.

    See Also
    --------
    eigvalsh : the eigenvalues alone.
    scipy.linalg.eigh : the LAPACK routines behind the CPU engine.

    Notes
    -----
    A deliberate difference from SciPy: eigenvector signs are deterministic on both engines
    (the largest-magnitude entry of each eigenvector is real and positive, as ``svd`` makes
    the rows of ``Vh``); SciPy returns whatever phase LAPACK produced. ``w`` is the same.

    The GPU engine runs ``Xsyevd`` (divide and conquer) for the standard problem,
    ``Xsyevdx`` for a subset, ``sygvd`` / ``sygvdx`` (``hegvd`` / ``hegvdx`` for complex)
    for the generalized problem, and ``syevjBatched`` (Jacobi, one launch) for a stack of
    two or more standard problems of order at most 32; ``driver`` does not change that
    choice (SciPy's ``ev``, ``evd``, ``evr``, ``evx`` map to ``syevd`` / ``syevdx``, and
    ``gv``, ``gvd``, ``gvx`` to ``sygvd`` / ``sygvdx``). Infinite ends of
    ``subset_by_value`` reach cuSOLVER as the largest finite numbers of the type.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import eigh
    >>> a = np.array([[2.0, 1.0], [1.0, 2.0]])
    >>> w, v = eigh(a)
    >>> bool(np.allclose(w, [1.0, 3.0])), bool(np.allclose(a @ v, v * w))
    (True, True)
    >>> eigh(a, subset_by_index=[1, 1]).eigenvectors.shape
    (2, 1)
    """
    return _dispatched("decomp.eigh", a, b, lower, eigvals_only, overwrite_a, overwrite_b,
                       type, check_finite, subset_by_index, subset_by_value, driver)


@differentiable("decomp.eigvalsh")
@_dispatch.front_door("decomp.eigvalsh")
def eigvalsh(a: Any, b: Any = None, *, lower: bool = True, overwrite_a: bool = False,
             overwrite_b: bool = False, type: int = 1, check_finite: bool = True,
             subset_by_index: Any = None, subset_by_value: Any = None,
             driver: Driver = None) -> Any:
    """Eigenvalues of a Hermitian (real symmetric) matrix or batch, as SciPy's: :func:`eigh`
    with ``eigvals_only=True`` (same parameters, engines and errors).

    Returns
    -------
    w : (..., K) real array, ascending, in ``a``'s package

    See Also
    --------
    eigh : eigenvalues and eigenvectors.
    scipy.linalg.eigvalsh : the LAPACK routines behind the CPU engine.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import eigvalsh
    >>> bool(np.allclose(eigvalsh(np.diag([3.0, 1.0, 2.0])), [1.0, 2.0, 3.0]))
    True
    """
    return _dispatched("decomp.eigvalsh", a, b, lower, True, overwrite_a, overwrite_b, type,
                       check_finite, subset_by_index, subset_by_value, driver)


def _dispatched(op, a, b, *options):
    """One dispatch of ``op`` (``eigh``'s parameters after ``a`` and ``b``, in order)."""
    return _dispatch.dispatch(_plan, op, a, b, *options, key=_key(op, a, b, *options),
                              lead=(a,) if b is None else (a, b))


def _key(op, a, b, *options):
    """The memo key of a call on CuPy arrays, ``None`` when an option is not hashable."""
    try:
        opts = tuple(None if o is None else tuple(float(x) for x in o) if isinstance(
            o, (list, tuple)) else o for o in options)
        hash(opts)
    except (TypeError, ValueError):
        return None
    return cupy_key(op, a, b, opts)


def _plan(name, a, b, lower, eigvals_only, overwrite_a, overwrite_b, itype, check_finite,
          subset_by_index, subset_by_value, driver):
    """Validate an :func:`eigh` call in SciPy's order; its
    :class:`~gpulinalg._runtime.dispatch.Op`."""
    if driver not in DRIVERS:
        raise ValueError('"{}" is unknown. Possible values are "None", "{}".'.format(
            driver, '", "'.join(DRIVERS[1:])))
    overwrite_a, overwrite_b = flag(overwrite_a, "overwrite_a"), flag(overwrite_b, "overwrite_b")
    defer = bool(check_finite) and (on_gpu(a) or (b is not None and on_gpu(b)))
    a, dtype = prepare(demote_long(a), square=True,
                       check_finite=bool(check_finite) and not defer)
    n = a.shape[-1]
    batch = tuple(a.shape[:-2])
    if b is not None:
        b, dtype_b = prepare(demote_long(b), "b", square=True,
                             check_finite=bool(check_finite) and not defer)
        if b.shape[-2:] != a.shape[-2:]:
            raise ValueError(f"wrong b dimensions {tuple(b.shape[-2:])}, should be "
                             f"{tuple(a.shape[-2:])}")
        if itype not in (1, 2, 3):
            raise ValueError('"type" keyword only accepts 1, 2, and 3.')
        dtype = np.result_type(dtype, dtype_b)
        batch = broadcast_batch(batch, b.shape[:-2])
    if n == 0 or math.prod(batch) == 0:
        return _dispatch.shortcut(name, _empty(a, batch, n, eigvals_only, dtype))
    index, value = _subset(subset_by_index, subset_by_value, n)
    _check_driver(driver, b is not None, subset_by_index is not None
                  or subset_by_value is not None)
    nb = math.prod(batch)
    vecs = not eigvals_only
    flops = nb * n ** 3 * (9 if vecs else 4 / 3 + (10 / 3 if b is not None else 0)) \
        * flops_scale(dtype)
    arrays = nbytes_of((batch + (n, n), dtype), (batch + (n, n), dtype),
                       (batch + (n,), real_dtype(dtype)))
    if b is not None:
        arrays += nbytes_of((batch + (n, n), dtype))
    return _dispatch.Op(
        name, _eigh_cuda.eigh, _eigh_host.eigh,
        (a, b, bool(lower), bool(eigvals_only), int(itype), index, value, driver, dtype,
         overwrite_a, overwrite_b, defer),
        flops=flops, nbytes=lambda: arrays + workspace_bytes("syevd", n, n, dtype),
        host_nbytes=arrays + nbytes_of((batch + (n, n), dtype)))  # evd's 2 n^2 work at most


def _subset(subset_by_index, subset_by_value, n):
    """SciPy's checks of the subset options (its truthiness rules); ``(index, value)``."""
    if subset_by_index and subset_by_value:
        raise ValueError("Either index or value subset can be requested.")
    index = value = None
    if subset_by_index:
        lo, hi = (int(x) for x in subset_by_index)
        if not (0 <= lo <= hi < n):
            raise ValueError("Requested eigenvalue indices are not valid. "
                             f"Valid range is [0, {n - 1}] and start <= end, but "
                             f"start={lo}, end={hi} is given")
        index = (lo, hi)
    if subset_by_value:
        lo, hi = subset_by_value
        if not (-np.inf <= lo < hi <= np.inf):
            raise ValueError("Requested eigenvalue bounds are not valid. "
                             "Valid range is (-inf, inf) and low < high, but "
                             f"low={lo}, high={hi} is given")
        value = (float(lo), float(hi))
    return index, value


def _check_driver(driver, generalized, subset):
    """SciPy's refusals of a driver that does not fit the problem."""
    if driver is None:
        return
    if not generalized and driver in ("gv", "gvd", "gvx"):
        raise ValueError(f"{driver} requires input b array to be supplied "
                         "for generalized eigenvalue problems.")
    if generalized and driver in ("ev", "evd", "evr", "evx"):
        raise ValueError(f'"{driver}" does not accept input b array '
                         "for standard eigenvalue problems.")
    if subset and driver in ("ev", "evd", "gv", "gvd"):
        raise ValueError(f'"{driver}" cannot compute subsets of eigenvalues')


def _empty(a, batch, n, eigvals_only, dtype):
    """Empty results: no matrices in the batch, or matrices of order 0."""
    w, v = empty_result(a, (batch + (n,), real_dtype(dtype)), (batch + (n, n), dtype))
    return w if eigvals_only else EighResult(w, v)
