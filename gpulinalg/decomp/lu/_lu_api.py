"""The LU family, as SciPy's ``solve``, ``lu_factor``, ``lu_solve``, ``lu``, ``det``, ``inv`` and
NumPy's ``slogdet``: validation and one dispatch each to :mod:`._lu_cuda` (cuSOLVER
``Xgetrf``/``Xgetrs``, cuBLAS ``getrfBatched``/``getrsBatched``) or :mod:`._lu_host` (SciPy)."""

import math
import sys
from typing import Any, Literal

import numpy as np

from ..._runtime import arrays as _arrays
from ..._runtime import dispatch as _dispatch
from ..._runtime import validation as _v
from ..._runtime.budget import nbytes_of
from ..._runtime.errors import LinAlgError
from ..._runtime.gradients import differentiable
from .._checks import broadcast_batch, empty_result, flag, flops_scale, prepare
from .._results import SlogdetResult
from . import _lu_cuda, _lu_dask, _lu_host
from . import _lu_grad  # noqa: F401  (registers the gradient rules)
from ._lu_input import (atleast, flops_lu, lu_bytes, lu_host_bytes, lu_pair, memo_key, scalar,
                        square)
from ._lu_rules import INV_STRUCTURES, SOLVE_STRUCTURES, UnknownStructure, structure
from ._lu_xp import scalar_solve

__all__ = ["solve", "lu_factor", "lu_solve", "lu", "det", "slogdet", "inv"]


@differentiable("decomp.solve")
@_dispatch.front_door("decomp.solve")
def solve(a: Any, b: Any, lower: bool = False, overwrite_a: bool = False,
          overwrite_b: bool = False, check_finite: bool = True, assume_a: str | None = None,
          transposed: bool = False, *, precision: Literal["full", "mixed"] = "full") -> Any:
    """Solve ``a @ x = b`` for a square ``a`` (or a batch), as ``scipy.linalg.solve``.

    Parameters
    ----------
    a : (..., n, n) array_like
    b : (n,) or (..., n, k) array_like
        A 1-D ``b`` is one right-hand side for every matrix; otherwise the batch dimensions
        of ``a`` and ``b`` broadcast (SciPy's rule).
    lower : bool, default False
        For ``assume_a`` "sym", "her" and "pos": read the lower triangle, else the upper one.
    overwrite_a, overwrite_b : bool, default False
        Allow the solver to reuse the inputs' memory (never a read-only array's).
    check_finite : bool, default True
        Raise ``ValueError`` if ``a`` or ``b`` holds NaN or Inf.
    assume_a : str, optional
        "general"/"gen", "diagonal", "tridiagonal", "banded", "upper triangular",
        "lower triangular", "symmetric"/"sym", "hermitian"/"her", "positive definite"/"pos";
        ``None``: SciPy detects the structure (the GPU runs LU).
    transposed : bool, default False
        Solve ``a.T @ x = b`` (real ``a`` only: ``NotImplementedError`` for complex, as SciPy).
    precision : {"full", "mixed"}, default "full"
        "mixed" (not in SciPy): a float64 or complex128 system (general, "sym", "her" or
        "pos") is factored in single precision and refined to double-precision accuracy, as
        LAPACK's ``dsgesv``/``dsposv``; when the single-precision factor's condition estimate
        says refinement cannot converge (``cond_1(a) * 2**-24 > 0.1``), or a step leaves more
        than a quarter of the residual, the double-precision solve answers instead. On a GPU
        whose single precision is at most twice as fast as its double (A100, H100, H200) a
        general system solves in double precision at once; an SPD one of order 16384 or more
        is factored with its trailing updates on tensor cores (TF32). Single-precision
        systems and other structures solve as with "full". ``last_run().details`` has
        ``precision`` (which one answered), ``mixed_fallback`` (why not mixed), the condition
        estimate, ``refinement_steps`` and ``residual_history``.

    Returns
    -------
    x : array of ``b``'s shape (with the broadcast batch), in ``b``'s package

    Raises
    ------
    gpulinalg.SingularMatrixError
        ``a`` is singular (an exactly zero pivot, or a reciprocal condition number of zero);
        a ``numpy.linalg.LinAlgError``, as SciPy raises. Also for "pos" when ``a`` is not
        positive definite (SciPy's ``LinAlgError`` there).
    ValueError
        Shapes that do not match, NaN or Inf with ``check_finite``, an unknown ``assume_a``.

    Warns
    -----
    scipy.linalg.LinAlgWarning
        The reciprocal condition number is below ``lamch("E")`` (SciPy's rule). The GPU's
        warning is :class:`gpulinalg.IllConditionedWarning` as well.

    See Also
    --------
    lu_factor, lu_solve : factor once, solve many times.
    scipy.linalg.solve : the CPU engine.

    Notes
    -----
    The GPU engine factors ``a`` with cuSOLVER ``Xgetrf`` and solves with ``Xgetrs`` (stacks
    of small matrices: cuBLAS ``getrfBatched``/``getrsBatched``), then estimates ``||A^-1||_1``
    with three solves through the factor (Hager and Higham's estimator, LAPACK's ``?gecon``
    on the CPU) for SciPy's ill-conditioning warning. Unlike SciPy's, it detects no structure
    for ``assume_a=None``, and solves "sym", "her", "tridiagonal" and "banded" systems by LU
    of the matrix SciPy's solver reads (the named triangle mirrored; the three diagonals),
    not with ``?sysv``/``?hesv``/``?gttrs``/``?gbsv``: the same solution, LU's cost. "pos"
    runs the Cholesky engine of :func:`cho_factor` and :func:`cho_solve`, the triangles
    :func:`solve_triangular`'s engine (their conditioning rule, which warns
    :class:`gpulinalg.IllConditionedWarning` only). Dask arrays: ``assume_a="pos"``, by the
    blocked Cholesky on the cluster, lazy (``docs/dask.md``).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import solve
    >>> a = np.array([[3.0, 2.0, 0.0], [1.0, -1.0, 0.0], [0.0, 5.0, 1.0]])
    >>> x = solve(a, np.array([2.0, 4.0, -1.0]))
    >>> bool(np.allclose(x, [2.0, -2.0, 9.0]))
    True
    """
    overwrite_a, overwrite_b = flag(overwrite_a, "overwrite_a"), flag(overwrite_b, "overwrite_b")
    if precision not in ("full", "mixed"):
        raise ValueError(f"precision must be 'full' or 'mixed', got {precision!r}")
    options = (bool(lower), bool(check_finite), assume_a, bool(transposed), precision)
    key = None if overwrite_a or overwrite_b else memo_key("decomp.solve", a, b, options)
    return _dispatch.dispatch(_plan_solve, a, b, lower, overwrite_a, overwrite_b, check_finite,
                              assume_a, transposed, key is not None, precision, key=key,
                              lead=(a, b))


def _plan_solve(a, b, lower, overwrite_a, overwrite_b, check_finite, assume_a, transposed,
                cupy_only, precision="full"):
    if assume_a not in SOLVE_STRUCTURES:
        raise ValueError(f"{assume_a} is not a recognized matrix structure")
    if _v.is_dask(a, b):
        return _dask_solve_op(a, b, lower, assume_a, transposed)
    defer = bool(check_finite) and (_arrays.on_gpu(a) or _arrays.on_gpu(b))
    a, dtype_a = prepare(atleast(a, 2), square=True,
                         check_finite=bool(check_finite) and not defer)
    b, dtype_b = prepare(atleast(b, 1), "b", min_ndim=1,
                         check_finite=bool(check_finite) and not defer)
    dtype = _v.float_dtype(dtype_a, dtype_b)
    kind = structure(assume_a, SOLVE_STRUCTURES, dtype)
    if transposed and dtype.kind == "c":
        raise NotImplementedError("scipy.linalg.solve can currently not solve a^T x = b or "
                                  "a^H x = b for complex matrices.")
    vec = b.ndim == 1
    bshape = tuple(b.shape) + ((1,) if vec else ())
    n = a.shape[-1]
    scalar = math.prod(a.shape) == 1
    if bshape[-2] != n and not scalar:
        raise ValueError(f"incompatible shapes: a.shape={tuple(a.shape)} and "
                         f"b.shape={tuple(b.shape)}")
    batch = broadcast_batch(a.shape[:-2], bshape[:-2])
    shape = batch + (bshape[-2:-1] if vec else bshape[-2:])
    if math.prod(a.shape) == 0 or math.prod(bshape) == 0:
        return _dispatch.shortcut("decomp.solve", empty_result(b, (shape, dtype))[0])
    if scalar:  # SciPy's b / a: any b goes
        if defer:
            _v.check_finite(a, "a")
            _v.check_finite(b, "b")
        return _dispatch.Op("decomp.solve", scalar_solve, scalar_solve, (a, b, vec, dtype),
                            nbytes=2 * nbytes_of((bshape, dtype)), flops=math.prod(bshape),
                            like=b)
    k = bshape[-1]
    flops = flops_lu(batch + (n, n), dtype) + 2 * math.prod(batch) * n * n * k
    mixed = precision == "mixed"
    return _dispatch.Op("decomp.solve", _lu_cuda.solve_mixed if mixed else _lu_cuda.solve,
                        _lu_host.solve_mixed if mixed else _lu_host.solve,
                        (a, b, kind, bool(lower), overwrite_a, overwrite_b, bool(transposed),
                         dtype, defer),
                        nbytes=lu_bytes(batch + (n, n), (bshape, shape, batch + (n, 4)), dtype),
                        host_nbytes=lu_host_bytes(batch + (n, n), (bshape, shape), dtype, mixed),
                        flops=flops, like=b, same_package=cupy_only)


def _dask_solve_op(a, b, lower, assume_a, transposed):
    """The :class:`~gpulinalg._runtime.dispatch.Op` of :func:`solve`'s Dask route:
    ``assume_a="pos"`` only (the blocked Cholesky); an operand that is not a Dask array is
    wrapped as one, tiled as the other."""
    from .._tiles._graph_dask import pair_tiled, work_dtype
    a, b = (x if _v.is_dask(x) else _v.as_array(x, nm) for x, nm in ((a, "a"), (b, "b")))
    if len(a.shape) == 2 and len(b.shape) in (1, 2) and b.shape[0] != a.shape[-1]:
        raise ValueError(f"incompatible shapes: a.shape={tuple(a.shape)} and "
                         f"b.shape={tuple(b.shape)}")
    a, b = pair_tiled(a, b, a_square=True)
    _v.check_dask(a, "a", square=True)
    _v.check_dask(b, "b", ndim=(1, 2))
    if SOLVE_STRUCTURES[assume_a] != "pos":
        raise NotImplementedError(
            f"solve of a Dask array supports assume_a='pos' (a Hermitian positive-definite "
            f"matrix, by the blocked Cholesky factorization), got assume_a={assume_a!r}; a "
            "general matrix: dask.array.linalg.solve, or a NumPy or CuPy array")
    if transposed and work_dtype(a).kind == "c":
        raise NotImplementedError("scipy.linalg.solve can currently not solve a^T x = b or "
                                  "a^H x = b for complex matrices.")
    return _dispatch.Op("decomp.solve", _lu_cuda.solve, _lu_host.solve, (a, b, bool(lower)),
                        dask_fn=_lu_dask.solve_pos)


@differentiable("decomp.lu_factor")
@_dispatch.front_door("decomp.lu_factor")
def lu_factor(a: Any, overwrite_a: bool = False, check_finite: bool = True) -> tuple[Any, Any]:
    """LU factorization with partial pivoting, ``P A = L U``, as ``scipy.linalg.lu_factor``.

    Parameters
    ----------
    a : (..., m, n) array_like
    overwrite_a : bool, default False
    check_finite : bool, default True

    Returns
    -------
    lu : (..., m, n) array
        U in the upper triangle, L (unit diagonal, not stored) below it.
    piv : (..., min(m, n)) int32 array
        0-based pivots: row ``i`` was interchanged with row ``piv[i]``.

    Warns
    -----
    scipy.linalg.LinAlgWarning
        A diagonal entry of U is exactly zero (the factor is returned all the same).

    See Also
    --------
    lu_solve : solve with the factor.
    lu : the factors as separate matrices.

    Notes
    -----
    The GPU engine runs cuSOLVER ``Xgetrf`` (cuBLAS ``getrfBatched`` for stacks of square
    matrices below order 512); the factor comes back column-major.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import lu_factor, lu_solve
    >>> a = np.array([[2.0, 5.0, 8.0], [5.0, 2.0, 2.0], [7.0, 5.0, 6.0]])
    >>> lu, piv = lu_factor(a)
    >>> piv.dtype.name, bool(np.allclose(a @ lu_solve((lu, piv), np.ones(3)), 1.0))
    ('int32', True)
    """
    overwrite_a = flag(overwrite_a, "overwrite_a")
    key = None if overwrite_a else memo_key("decomp.lu_factor", a, None, (bool(check_finite),))
    return _dispatch.dispatch(_plan_lu_factor, a, overwrite_a, check_finite, key is not None,
                              key=key, lead=(a,))


def _plan_factor(a, check_finite):
    """``(a, dtype, defer)`` of a factorization's validation."""
    defer = bool(check_finite) and _arrays.on_gpu(a)
    a = atleast(a)
    if a.ndim < 2:
        raise ValueError("The input array must be at least two-dimensional, got shape "
                         f"{tuple(a.shape)}.")
    a, dtype = prepare(a, check_finite=bool(check_finite) and not defer)
    return a, dtype, defer


def _plan_lu_factor(a, overwrite_a, check_finite, cupy_only):
    a, dtype, defer = _plan_factor(a, check_finite)
    m, n = a.shape[-2:]
    if math.prod(a.shape) == 0:
        piv = (tuple(a.shape[:-2]) + (min(m, n),), np.int32)
        return _dispatch.shortcut("decomp.lu_factor", tuple(empty_result(
            a, (tuple(a.shape), _v.np_dtype(a)), piv)))
    return _dispatch.Op("decomp.lu_factor", _lu_cuda.lu_factor, _lu_host.lu_factor,
                        (a, overwrite_a, dtype, defer), nbytes=lu_bytes(a.shape, (), dtype),
                        host_nbytes=lu_host_bytes(a.shape, (), dtype),
                        flops=flops_lu(a.shape, dtype), same_package=cupy_only)


@differentiable("decomp.lu_solve")
@_dispatch.front_door("decomp.lu_solve")
def lu_solve(lu_and_piv: tuple[Any, Any], b: Any, trans: Literal[0, 1, 2] = 0,
             overwrite_b: bool = False, check_finite: bool = True) -> Any:
    """Solve ``a @ x = b`` (``a.T``, ``a.H``) from the factor of :func:`lu_factor`, as SciPy's.

    Parameters
    ----------
    lu_and_piv : tuple of ((..., n, n) array, (..., n) int array)
        The output of :func:`lu_factor` (0-based pivots).
    b : (n,) or (..., n, k) array_like
        The batches of ``lu``, ``piv`` and ``b`` broadcast.
    trans : {0, 1, 2}, default 0
        Solve ``a x = b``, ``a^T x = b`` or ``a^H x = b``.
    overwrite_b : bool, default False
    check_finite : bool, default True

    Returns
    -------
    x : array of ``b``'s shape (with the broadcast batch)

    Raises
    ------
    ValueError
        Shapes that do not match, NaN or Inf with ``check_finite``, or (GPU) pivots out of
        range.

    See Also
    --------
    lu_factor : the factor this solves with.

    Notes
    -----
    The GPU engine runs cuSOLVER ``Xgetrs`` on a column-major copy of the factor (cuBLAS
    ``getrsBatched`` for stacks of small ones); one factor with a batch of right-hand sides
    is one solve with all their columns. As SciPy's, it checks no conditioning.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import lu_factor, lu_solve
    >>> a = np.array([[4.0, 3.0], [6.0, 3.0]]); b = np.array([1.0, 2.0])
    >>> x = lu_solve(lu_factor(a), b, trans=1)
    >>> bool(np.allclose(a.T @ x, b))
    True
    """
    lu, piv = lu_pair(lu_and_piv)
    overwrite_b = flag(overwrite_b, "overwrite_b")
    key = None
    cupy = sys.modules.get("cupy")
    if cupy is not None and type(piv) is cupy.ndarray and not overwrite_b:
        key = memo_key("decomp.lu_solve", lu, b, (trans, bool(check_finite), piv.shape,
                                              piv.strides, piv.dtype, piv.data.device_id))
    return _dispatch.dispatch(_plan_lu_solve, lu, piv, b, trans, overwrite_b, check_finite,
                              key is not None, key=key, lead=(lu, piv, b))


def _plan_lu_solve(lu, piv, b, trans, overwrite_b, check_finite, cupy_only):
    if not isinstance(trans, (int, np.integer)) or isinstance(trans, bool) \
            or int(trans) not in (0, 1, 2):
        raise ValueError(f"trans must be 0, 1 or 2, got {trans!r}")
    defer = bool(check_finite) and any(_arrays.on_gpu(x) for x in (lu, piv, b))
    lu, dtype_lu = prepare(atleast(lu, 0, "lu"), "lu", square=True,
                           check_finite=bool(check_finite) and not defer)
    b, dtype_b = prepare(atleast(b, 1), "b", min_ndim=1,
                         check_finite=bool(check_finite) and not defer)
    piv = _v.as_array(piv, "piv", min_ndim=1)
    dtype = _v.float_dtype(dtype_lu, dtype_b)
    n = lu.shape[-1]
    vec = b.ndim == 1
    bshape = tuple(b.shape) + ((1,) if vec else ())
    if bshape[-2] != n:
        raise ValueError(f"Shapes of lu {tuple(lu.shape)} and b {tuple(b.shape)} are "
                         "incompatible")
    if piv.shape[-1] != n:
        raise ValueError(f"piv must hold {n} pivots per matrix, got shape {tuple(piv.shape)}")
    batch = broadcast_batch(lu.shape[:-2], piv.shape[:-1], bshape[:-2])
    shape = batch + (bshape[-2:-1] if vec else bshape[-2:])
    if math.prod(bshape) == 0 or n == 0:
        return _dispatch.shortcut("decomp.lu_solve", empty_result(b, (shape, dtype))[0])
    nb = math.prod(batch)
    nbytes = nbytes_of((lu.shape, dtype), (bshape, dtype), (shape, dtype), (piv.shape, np.int64))
    return _dispatch.Op("decomp.lu_solve", _lu_cuda.lu_solve, _lu_host.lu_solve,
                        (lu, piv, b, int(trans), overwrite_b, dtype, defer), nbytes=nbytes,
                        host_nbytes=nbytes,
                        flops=2 * nb * n * n * bshape[-1] * flops_scale(dtype), like=b,
                        same_package=cupy_only)


@differentiable("decomp.lu")
@_dispatch.front_door("decomp.lu")
def lu(a: Any, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True,
       p_indices: bool = False) -> tuple[Any, ...]:
    """LU decomposition ``A = P @ L @ U`` with partial pivoting, as ``scipy.linalg.lu``.

    Parameters
    ----------
    a : (..., m, n) array_like
    permute_l : bool, default False
        Return ``(P @ L, U)`` instead of ``(P, L, U)``.
    overwrite_a : bool, default False
    check_finite : bool, default True
    p_indices : bool, default False
        Return the permutation as int32 row indices ``p`` (``A = L[p] @ U``).

    Returns
    -------
    (p, l, u) or (pl, u)
        ``p`` (..., m, m) permutation matrices in ``a``'s real dtype, or (..., m) indices;
        ``l`` (..., m, k) unit lower trapezoidal; ``u`` (..., k, n) upper trapezoidal;
        ``k = min(m, n)``.

    See Also
    --------
    lu_factor : the packed factor and pivots.

    Notes
    -----
    The GPU engine factors with cuSOLVER ``Xgetrf`` (or cuBLAS ``getrfBatched``), splits the
    packed factor on the device and turns the pivots into the permutation on the host (one
    read-back of the pivots).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import lu
    >>> a = np.array([[2.0, 5.0, 8.0, 7.0], [5.0, 2.0, 2.0, 8.0], [7.0, 5.0, 6.0, 6.0]])
    >>> p, l, u = lu(a, p_indices=True)
    >>> bool(np.allclose(a, l[p] @ u)), l.shape, u.shape
    (True, (3, 3), (3, 4))
    """
    overwrite_a = flag(overwrite_a, "overwrite_a")
    key = None if overwrite_a else memo_key("decomp.lu", a, None, (bool(permute_l),
                                                               bool(check_finite),
                                                               bool(p_indices)))
    return _dispatch.dispatch(_plan_lu, a, permute_l, overwrite_a, check_finite, p_indices,
                              key is not None, key=key, lead=(a,))


def _plan_lu(a, permute_l, overwrite_a, check_finite, p_indices, cupy_only):
    a, dtype, defer = _plan_factor(a, check_finite)
    *nd, m, n = a.shape
    nd, k = tuple(nd), min(m, n)
    if min(a.shape) == 0:
        real = np.empty(0, dtype).real.dtype
        parts = [(nd + (m, k), dtype), (nd + (k, n), dtype)]
        if not permute_l:
            parts.insert(0, (nd + (0,), np.int32) if p_indices else (nd + (0, 0), real))
        return _dispatch.shortcut("decomp.lu", tuple(empty_result(a, *parts)))
    return _dispatch.Op("decomp.lu", _lu_cuda.lu, _lu_host.lu,
                        (a, bool(permute_l), overwrite_a, bool(p_indices), dtype, defer),
                        nbytes=lu_bytes(a.shape, (nd + (m, m), nd + (m, m)), dtype),
                        host_nbytes=lu_host_bytes(a.shape, (nd + (m, m), nd + (m, m)), dtype),
                        flops=flops_lu(a.shape, dtype), same_package=cupy_only)


@differentiable("decomp.det")
@_dispatch.front_door("decomp.det")
def det(a: Any, overwrite_a: bool = False, check_finite: bool = True) -> Any:
    """Determinant of a square matrix (or of each of a batch), as ``scipy.linalg.det``.

    Parameters
    ----------
    a : (..., n, n) array_like
    overwrite_a : bool, default False
    check_finite : bool, default True

    Returns
    -------
    det : float or complex, or (...) array for a batch
        float64 or complex128 also for single-precision input (SciPy's rule); zero for a
        singular matrix. NumPy input gives a NumPy scalar for one matrix; CuPy and torch
        input a 0-d array of their package.

    See Also
    --------
    slogdet : sign and log of the determinant (no overflow).

    Notes
    -----
    The GPU engine multiplies the diagonal of the ``Xgetrf`` factor (``getrfBatched`` for
    stacks) in double precision and applies the pivots' sign.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import det
    >>> float(det(np.array([[1.0, 2.0], [3.0, 4.0]])))
    -2.0
    """
    overwrite_a = flag(overwrite_a, "overwrite_a")
    key = None if overwrite_a else memo_key("decomp.det", a, None, (bool(check_finite),))
    res = _dispatch.dispatch(_plan_det, a, overwrite_a, check_finite, key is not None, key=key,
                             lead=(a,))
    return scalar(res)


def _plan_det(a, overwrite_a, check_finite, cupy_only):
    defer = bool(check_finite) and _arrays.on_gpu(a)
    raw = a if _arrays.kind_of(a) is not None else np.asarray(a)
    dt = _v.np_dtype(raw)
    if dt.kind == "V" and (dt.name == "bfloat16" or _arrays.kind_of(raw) is _arrays.Kind.TORCH):
        _v.float_dtype(dt)  # bfloat16: the shared refusal, not NumPy's name for its stand-in
    if dt.kind not in "biufc":
        raise TypeError(f"The dtype {dt} cannot be cast to float(32, 64).")
    a = square(raw, "array")
    a, dtype = prepare(a, "array", square=True, check_finite=bool(check_finite) and not defer)
    wide = np.dtype(np.complex128 if dtype.kind == "c" else np.float64)
    if a.shape[-1] == 0:
        one = _arrays.to_kind(np.ones(tuple(a.shape[:-2]), wide),
                              _arrays.kind_of(a) or _arrays.Kind.NUMPY, a)
        return _dispatch.shortcut("decomp.det", one)
    return _dispatch.Op("decomp.det", _lu_cuda.det, _lu_host.det,
                        (a, overwrite_a, dtype, defer), nbytes=lu_bytes(a.shape, (), dtype),
                        host_nbytes=lu_host_bytes(a.shape, (), dtype),
                        flops=flops_lu(a.shape, dtype), same_package=cupy_only)


@differentiable("decomp.slogdet")
@_dispatch.front_door("decomp.slogdet")
def slogdet(a: Any) -> SlogdetResult:
    """Sign and natural log of the absolute determinant, as ``numpy.linalg.slogdet``.

    Parameters
    ----------
    a : (..., n, n) array_like

    Returns
    -------
    SlogdetResult(sign, logabsdet)
        ``sign`` (in ``a``'s dtype: +-1, a unit complex number, or 0 for a singular matrix)
        and ``logabsdet`` (its real dtype; ``-inf`` for a singular matrix), each of the batch
        shape; NumPy scalars for one NumPy matrix.

    Raises
    ------
    gpulinalg.LinAlgError
        ``a`` is not a (stack of) square matrices, as NumPy raises.

    See Also
    --------
    det : the determinant itself.
    logdet_cholesky : the log-determinant from a Cholesky factor.

    Notes
    -----
    Both engines factor with LU (the GPU: cuSOLVER ``Xgetrf`` or cuBLAS ``getrfBatched``);
    NaN or Inf in ``a`` give NaN, as NumPy's (no ``check_finite``).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import slogdet
    >>> sign, logabsdet = slogdet(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> float(sign), bool(np.isclose(logabsdet, np.log(2.0)))
    (-1.0, True)
    """
    key = memo_key("decomp.slogdet", a, None, ())
    sign, logabs = _dispatch.dispatch(_plan_slogdet, a, key is not None, key=key, lead=(a,))
    return SlogdetResult(scalar(sign), scalar(logabs))


def _plan_slogdet(a, cupy_only):
    a, dtype = prepare(square(a, error=LinAlgError), square=True, check_finite=False)
    real = np.empty(0, dtype).real.dtype
    if a.shape[-1] == 0:
        batch = tuple(a.shape[:-2])
        sign = _arrays.to_kind(np.ones(batch, dtype), _arrays.kind_of(a) or _arrays.Kind.NUMPY,
                               a)
        return _dispatch.shortcut("decomp.slogdet", (sign, empty_result(a, (batch, real))[0]))
    return _dispatch.Op("decomp.slogdet", _lu_cuda.slogdet, _lu_host.slogdet, (a, dtype),
                        nbytes=lu_bytes(a.shape, (), dtype), flops=flops_lu(a.shape, dtype),
                        host_nbytes=lu_host_bytes(a.shape, (), dtype), same_package=cupy_only)


@differentiable("decomp.inv")
@_dispatch.front_door("decomp.inv")
def inv(a: Any, overwrite_a: bool = False, check_finite: bool = True, *,
        assume_a: str | None = None, lower: bool = False) -> Any:
    """Inverse of a square matrix (or of each of a batch), as ``scipy.linalg.inv``.

    Parameters
    ----------
    a : (..., n, n) array_like
    overwrite_a : bool, default False
    check_finite : bool, default True
    assume_a : {None, "general", "gen", "diagonal", "upper triangular", "lower triangular", \
"pos", "sym", "her"}, optional
        The structure to assume (SciPy's names); ``None``: SciPy detects it (the GPU runs LU).
    lower : bool, default False
        For "pos", "sym" and "her": read the lower triangle, else the upper one.

    Returns
    -------
    ainv : (..., n, n) array

    Raises
    ------
    gpulinalg.SingularMatrixError
        ``a`` is singular (a ``numpy.linalg.LinAlgError``, as SciPy raises).
    ValueError
        Not square, NaN or Inf with ``check_finite``, an unknown ``assume_a`` (SciPy raises
        ``KeyError`` there).

    Warns
    -----
    scipy.linalg.LinAlgWarning
        ``1 / (||A||_1 ||A^-1||_1)`` below ``lamch("E")``, as SciPy.

    See Also
    --------
    solve : solve without forming the inverse (cheaper and more accurate).

    Notes
    -----
    The GPU engine solves ``A X = I`` with the ``Xgetrf`` factor (cuBLAS ``getrfBatched`` and
    ``getrsBatched`` for stacks), and takes its reciprocal condition number from ``X`` itself
    (exact, not estimated). "pos" runs the Cholesky engine, the triangles the triangular one;
    "sym" and "her" are inverted by LU of the mirrored triangle.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import inv
    >>> a = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> bool(np.allclose(inv(a) @ a, np.eye(2)))
    True
    """
    overwrite_a = flag(overwrite_a, "overwrite_a")
    options = (bool(check_finite), assume_a, bool(lower))
    key = None if overwrite_a else memo_key("decomp.inv", a, None, options)
    return _dispatch.dispatch(_plan_inv, a, overwrite_a, check_finite, assume_a, lower,
                              key is not None, key=key, lead=(a,))


def _plan_inv(a, overwrite_a, check_finite, assume_a, lower, cupy_only):
    if assume_a not in INV_STRUCTURES:
        raise UnknownStructure(f"{assume_a} is not a recognized matrix structure for inv: "
                               f"{sorted(k for k in INV_STRUCTURES if k)}")
    defer = bool(check_finite) and _arrays.on_gpu(a)
    a = atleast(a)
    if a.ndim < 2:
        raise ValueError(f"Expected at least ndim=2, got a1.ndim={a.ndim}")
    if a.shape[-1] != a.shape[-2]:
        raise ValueError(f"Expected square matrix, got a1.shape={tuple(a.shape)}")
    a, dtype = prepare(a, square=True, check_finite=bool(check_finite) and not defer)
    kind = structure(assume_a, INV_STRUCTURES, dtype)
    if a.shape[-1] == 0:
        return _dispatch.shortcut("decomp.inv", empty_result(a, (tuple(a.shape), dtype))[0])
    n = a.shape[-1]
    return _dispatch.Op("decomp.inv", _lu_cuda.inv, _lu_host.inv,
                        (a, kind, bool(lower), overwrite_a, dtype, defer),
                        nbytes=lu_bytes(a.shape, (a.shape, a.shape), dtype),
                        host_nbytes=lu_host_bytes(a.shape, (a.shape,), dtype),
                        flops=flops_lu(a.shape, dtype) + 2 * math.prod(a.shape) * n,
                        same_package=cupy_only)
