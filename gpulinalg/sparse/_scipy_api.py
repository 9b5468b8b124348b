"""SciPy's sparse solver names with SciPy's semantics: :func:`spsolve`, :func:`splu`,
:func:`factorized` and :func:`spsolve_triangular`.

Front ends only: each validates as ``scipy.sparse.linalg`` does (its errors, warnings and
return shapes), then makes one dispatch between the GPU engines (cuDSS or cuSOLVER-Sp,
cuSPARSE's triangular solve) and the CPU engine (SciPy's SuperLU), through the factorization
machinery :func:`gpulinalg.sparse.solve` uses. Where SciPy's semantics and gpulinalg's strict
contract differ (a singular matrix warns and gives NaN in ``spsolve`` instead of raising), the
SciPy names follow SciPy; :func:`gpulinalg.sparse.solve` keeps its own.
"""

from __future__ import annotations

import functools
import sys
from typing import Any
from collections.abc import Callable

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime.config import config_context
from .._runtime.dispatch import Op, dispatch, note, shortcut
from .._runtime.errors import SingularMatrixError, warn
from .._runtime.validation import np_dtype, as_array, check_finite
from . import _csr_cuda, _engine_cuda, _factor_xp, _superlu_host, _triangular_cuda
from ._input_xp import as_csr, check_values, xp_of
from ._policy import DEFAULT_REFINE_STEPS, emit
from ._results import describe
from ._solve_api import FLOPS_PER_N15, SparseFactorization, _host_nbytes, _nbytes

__all__ = ["spsolve", "splu", "factorized", "spsolve_triangular", "SparseLU"]

#: SuperLU's column orderings (``permc_spec``)
PERMC_SPECS = (None, "NATURAL", "MMD_ATA", "MMD_AT_PLUS_A", "COLAMD")
#: the solve policy of the SciPy names: SciPy never raises on accuracy, gpulinalg never stays
#: silent: refine, then warn (ResidualWarning, IllConditionedWarning) instead of raising
POLICY = dict(check="warn", tol=None, max_steps=DEFAULT_REFINE_STEPS)
SINGULAR = "Factor is exactly singular"  # SciPy's SuperLU message (RuntimeError)


# -- validation ---------------------------------------------------------------------------------
def _is_sparse(x) -> bool:
    if getattr(x, "layout", None) is not None and type(x).__module__.startswith("torch"):
        return str(x.layout) in ("torch.sparse_coo", "torch.sparse_csr")
    for name in ("scipy.sparse", "cupyx.scipy.sparse"):
        mod = sys.modules.get(name)
        if mod is not None and mod.issparse(x):
            return True
    return False


def _sparse_matrix(A, message):
    """``A`` if sparse, else (dense, as SciPy converts it) a CSC matrix of its package with a
    ``SparseEfficiencyWarning`` saying ``message``."""
    if _is_sparse(A):
        return A
    if _arrays.kind_of(A) is _arrays.Kind.CUPY:
        converted = _csr_cuda.csc_of_dense(A)
    else:
        converted = _superlu_host.csc_of_dense(A)
    warn(message, _superlu_host.sparse_efficiency_warning())
    return converted


def _fp_dtype(dtype) -> np.dtype:
    """SciPy's ``_asfptype``: the first of float32, float64, complex64, complex128 that
    ``dtype`` casts to safely."""
    for char in "fdFD":
        if np.can_cast(dtype, char):
            return np.dtype(char)
    raise TypeError(f"unsupported dtype {np.dtype(dtype)}; supported: float32, float64, "
                    "complex64, complex128")


def _check_permc(permc_spec):
    if permc_spec not in PERMC_SPECS:
        raise ValueError(f"permc_spec must be one of {PERMC_SPECS[1:]} or None, "
                         f"got {permc_spec!r}")


def _full(shape, value, dtype, like):
    """An array of ``value`` in ``like``'s package (and device)."""
    out = np.full(shape, value, dtype=dtype)
    return _arrays.to_kind(out, _arrays.kind_of(like), like)


# -- spsolve ------------------------------------------------------------------------------------
@_dispatch.front_door("sparse.spsolve")
def spsolve(A: Any, b: Any, permc_spec: str | None = None, use_umfpack: bool = True) -> Any:
    """Solve the sparse system ``A x = b``, as :func:`scipy.sparse.linalg.spsolve`.

    Parameters
    ----------
    A : sparse matrix, shape (n, n)
        SciPy, CuPy (``cupyx.scipy.sparse``) or torch sparse, any format. A dense array is
        converted to CSC with a ``SparseEfficiencyWarning``, as SciPy does.
    b : array or sparse matrix, shape (n,) or (n, k)
        ``(n,)`` and ``(n, 1)`` are vectors: ``x`` has shape ``(n,)``. A sparse ``b`` with
        ``k > 1`` columns gives a sparse ``x`` (the class of ``A``, CSC for other formats).
    permc_spec : {None, "COLAMD", "NATURAL", "MMD_ATA", "MMD_AT_PLUS_A"}
        SuperLU's column ordering on the CPU (default COLAMD); the GPU orders with cuDSS.
    use_umfpack : bool
        Accepted for SciPy's signature; UMFPACK is never used.

    Returns
    -------
    x : array or sparse matrix, shape (n,) or (n, k)
        In the dtype SciPy gives (``A``'s floating type promoted with ``b``'s), in ``b``'s
        package and device (CuPy in, CuPy out).

    Raises
    ------
    ValueError
        ``A`` not square, ``b``'s rows not ``n``, NaN or Inf in ``A`` or ``b``.
    RuntimeError
        Sparse ``b`` with ``k > 1`` and a singular ``A`` ("Factor is exactly singular", as
        SciPy, which factorizes for that case).

    Warns
    -----
    MatrixRankWarning
        ``A`` is singular (a zero pivot): ``x`` is all NaN, as SciPy's.
    IllConditionedWarning, ResidualWarning
        gpulinalg's checks (``docs/sparse.md``) found ``A`` numerically singular, or the
        backward error above tolerance after refinement; ``x`` is returned.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gpulinalg.sparse import spsolve
    >>> A = sp.csc_array([[3.0, 2, 0], [1, -1, 0], [0, 5, 1]])
    >>> x = spsolve(A, np.array([[2.0], [-1], [2]]))
    >>> x.shape, bool(np.allclose(A @ x, [2.0, -1, 2]))
    ((3,), True)

    Notes
    -----
    The GPU solves with cuDSS (Cholesky for a symmetric matrix with a positive diagonal, LDLᵀ
    or LU otherwise, as :func:`gpulinalg.sparse.solve` with ``method="auto"``) and ignores
    ``permc_spec``; the CPU with SuperLU. Differences from SciPy: NaN or Inf in the input raise
    ``ValueError``; the sparse formats are taken as they are (no ``SparseEfficiencyWarning``
    for CSR, COO or a sparse ``b`` that is not CSC); every solve is refined while its backward
    error is above tolerance and warns when it stays there or the matrix is numerically
    singular (SciPy says nothing). What ran is in ``gpulinalg.last_run()``.
    """
    A = _sparse_matrix(A, "spsolve requires A be CSC or CSR matrix format")
    sparse_b = _is_sparse(b)
    if not sparse_b:
        b = as_array(b, "b")
    if b.ndim > 2:
        raise ValueError("object too deep for desired array")
    if b.ndim == 0:
        raise ValueError("b must have 1 or 2 dimensions, got a scalar")
    M, N = A.shape
    if M != N:
        raise ValueError(f"matrix must be square (has shape {(M, N)})")
    if M != b.shape[0]:
        raise ValueError(f"matrix - rhs dimension mismatch ({tuple(A.shape)} - {b.shape[0]})")
    _check_permc(permc_spec)
    csr = as_csr(A)
    check_values(csr.data)
    dtype = _fp_dtype(np.promote_types(_fp_dtype(csr.data.dtype),
                                       b.dtype if sparse_b else np_dtype(b)))
    data = csr.data.astype(dtype, copy=False)
    vector = b.ndim == 1 or b.shape[1] == 1
    if sparse_b and not vector:
        return _spsolve_sparse(A, csr, data, b, dtype, permc_spec)
    if sparse_b:
        b = b.toarray()
    check_finite(b, "b")
    rhs = b.reshape(-1) if vector else b
    if csr.n == 0 or rhs.size == 0:
        return shortcut("sparse.spsolve", _full(rhs.shape, 0, dtype, b))
    nrhs = 1 if vector else rhs.shape[1]
    try:
        x, report = dispatch(Op(
            "sparse.spsolve", _engine_cuda.solve_once,
            functools.partial(_superlu_host.solve_once, reordering=permc_spec),
            args=(csr.indptr, csr.indices, data, rhs),
            kwargs=dict(n=csr.n, method="auto", **POLICY),
            nbytes=_nbytes(csr.indices.size, csr.n, nrhs, dtype),
            host_nbytes=_host_nbytes(csr.indices.size, csr.n, nrhs, dtype),
            flops=FLOPS_PER_N15 * csr.n ** 1.5, like=rhs))
    except SingularMatrixError:
        warn("Matrix is exactly singular", _superlu_host.matrix_rank_warning())
        return _full(rhs.shape, np.nan, dtype, rhs)
    emit(report)
    return x


def _spsolve_sparse(A, csr, data, b, dtype, permc_spec):
    """``spsolve`` with a sparse ``b`` of several columns: one factorization, the nonzeros of
    ``X`` as a sparse matrix (SciPy's rule: ``A``'s class, CSC for other formats)."""
    bc = b.tocsc()
    bc.sum_duplicates()
    k = int(b.shape[1])
    if csr.n == 0 or k == 0:
        none = bc.indices[:0]
        return shortcut("sparse.spsolve",
                        _sparse_result(A, bc, none, none, bc.data[:0], dtype))
    check_values(bc.data, "b")
    cpu = functools.partial(_factor_xp.solve_columns,
                            functools.partial(_superlu_host.factorize, reordering=permc_spec))
    try:
        rows, cols, vals, report = dispatch(Op(
            "sparse.spsolve", functools.partial(_factor_xp.solve_columns, _engine_cuda.factorize),
            cpu, args=(csr.indptr, csr.indices, data, bc.indptr, bc.indices,
                       bc.data.astype(dtype, copy=False)),
            kwargs=dict(n=csr.n, k=k, method="auto", **POLICY),
            nbytes=_nbytes(csr.indices.size, csr.n, min(k, 64), dtype),
            host_nbytes=_host_nbytes(csr.indices.size, csr.n, min(k, 64), dtype),
            flops=FLOPS_PER_N15 * csr.n ** 1.5, like=bc.data))
    except SingularMatrixError as exc:
        raise RuntimeError(SINGULAR) from exc
    emit(report)
    return _sparse_result(A, bc, rows, cols, vals, dtype)


def _sparse_result(A, b, rows, cols, vals, dtype):
    """The sparse ``X`` of shape ``b.shape``, in ``b``'s package: ``A``'s class when ``A`` is a
    CSR or CSC matrix of that package, else CSC (SciPy's rule)."""
    make = _csr_cuda.sparse_result if _arrays.kind_of(b.data) is _arrays.Kind.CUPY else \
        _superlu_host.sparse_result
    return make(A, rows, cols, vals.astype(dtype, copy=False), tuple(b.shape))


# -- splu and factorized ------------------------------------------------------------------------
class SparseLU:
    """A factorized sparse matrix with SciPy's ``SuperLU`` interface: ``solve(rhs, trans)``,
    ``shape``, ``nnz``, and the factors ``L``, ``U``, ``perm_r``, ``perm_c``.

    Made by :func:`splu` (and, for its ``solve``, :func:`factorized`).
    """

    def __init__(self, factorization: SparseFactorization, superlu: dict[str, Any]) -> None:
        self._fac, self._superlu = factorization, superlu
        self._host: Any = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(n, n)``."""
        return self._fac.shape

    @property
    def dtype(self) -> np.dtype:
        """dtype of the factors (float32, float64, complex64 or complex128)."""
        return self._fac.dtype

    @property
    def nnz(self) -> int:
        """Number of stored entries of the factors (the engine's count)."""
        return int(self._fac.info.get("factor_nnz") or 0)

    @property
    def factorization(self) -> SparseFactorization:
        """The underlying :class:`~gpulinalg.sparse.SparseFactorization` (``info``,
        ``logdet``, ``rcond``, ``refactorize``)."""
        return self._fac

    def solve(self, rhs: Any, trans: str = "N") -> Any:
        """Solve ``A x = rhs`` (``trans="N"``), ``Aᵀ x = rhs`` (``"T"``) or ``Aᴴ x = rhs``
        (``"H"``), as :meth:`scipy.sparse.linalg.SuperLU.solve`.

        Parameters
        ----------
        rhs : array, shape (n,) or (n, k)
            NumPy, CuPy or torch; it must cast safely to the factors' dtype (a complex ``rhs``
            for a real factorization is a ``TypeError``, as in SciPy).
        trans : {"N", "T", "H"}

        Returns
        -------
        x : array, shape like ``rhs``, in the factors' dtype and ``rhs``'s package
        """
        if trans not in ("N", "T", "H"):
            raise ValueError("trans must be N, T, or H")
        b = as_array(rhs, "rhs")
        dtype, bt = self.dtype, np_dtype(b)
        if not np.can_cast(bt, dtype, "safe"):  # SciPy's order: dtype, depth, size
            raise TypeError(f"Cannot cast array data from {bt!r} to {dtype!r} according to the "
                            "rule 'safe'")
        if b.ndim > 2:
            raise ValueError("object too deep for desired array")
        if b.ndim == 0 or b.shape[0] != self.shape[0]:
            raise ValueError("b is of incompatible size")
        if bt != dtype and hasattr(b, "astype"):
            b = b.astype(dtype)
        try:
            return self._fac.solve(b, trans, **_solve_policy())
        except SingularMatrixError as exc:
            raise RuntimeError(SINGULAR) from exc

    def _lu(self):
        """SciPy's ``SuperLU`` with the factors: the CPU factorization's own, or (for a GPU
        factorization: cuDSS does not expose its factors) one made on the host, once."""
        if self._host is None:
            factor = self._fac._alive()
            lu = getattr(factor, "lu", None)
            if factor.device == "cpu" and lu is not None and getattr(factor, "_q", 1) is None:
                self._host = lu
            else:
                m = factor.matrix()
                with config_context(backend="cpu"):  # the factors are SuperLU's by definition
                    self._host = dispatch(Op(
                        "sparse.SparseLU.factors", None, _superlu_host.host_superlu,
                        args=(m.indptr, m.indices, m.data),
                        kwargs=dict(n=factor.n, reordering=self._superlu.get("permc_spec"),
                                    superlu=_without_permc(self._superlu)),
                        no_gpu_reason="the GPU engine does not expose its factors: SciPy's "
                                      "SuperLU factors the same matrix on the host"))
        return self._host

    @property
    def L(self) -> Any:
        """Unit lower-triangular factor (SciPy CSC) with ``Pr A Pc = L U``."""
        return self._lu().L

    @property
    def U(self) -> Any:
        """Upper-triangular factor (SciPy CSC)."""
        return self._lu().U

    @property
    def perm_r(self) -> np.ndarray:
        """Row permutation: ``Pr[perm_r, arange(n)] = 1``."""
        return self._lu().perm_r

    @property
    def perm_c(self) -> np.ndarray:
        """Column permutation: ``Pc[arange(n), perm_c] = 1``."""
        return self._lu().perm_c

    def __repr__(self) -> str:
        return f"<SparseLU of {self._fac!r}>"


def _solve_policy():
    return {"check": POLICY["check"], "tol": POLICY["tol"], "refine": POLICY["max_steps"]}


def _without_permc(superlu):
    return {k: v for k, v in superlu.items() if k != "permc_spec"}


def _factorizer(engine_factorize, csr, method, **extra) -> Callable:
    """The dispatched function: ``engine_factorize`` (with ``extra``) made into a
    :class:`SparseFactorization`, as :func:`gpulinalg.sparse.factorize` makes it."""
    def fn(indptr, indices, data, dest):
        factor, why = engine_factorize(indptr, indices, data, n=csr.n, method=method, **extra)
        factor.dest, factor.input_nnz = dest, csr.input_nnz
        note(**describe(factor))
        return SparseFactorization(factor, why)
    return fn


def _factorize(A, method, name, superlu):
    """One dispatch: a :class:`SparseLU` of square sparse ``A`` (``superlu``: ``splu``'s
    keywords, for the CPU engine); a singular matrix raises SciPy's ``RuntimeError``."""
    csr = as_csr(A)
    check_values(csr.data)
    dtype = _fp_dtype(csr.data.dtype)
    if csr.n == 0:
        return SparseLU(shortcut(name, SparseFactorization(
            _superlu_host.EmptyFactor(dtype, method))), superlu)
    cpu = _factorizer(_superlu_host.factorize, csr, method,
                      reordering=superlu.get("permc_spec"), superlu=_without_permc(superlu))
    try:
        fac = dispatch(Op(name, _factorizer(_engine_cuda.factorize, csr, method), cpu,
                          args=(csr.indptr, csr.indices, csr.data.astype(dtype, copy=False),
                                csr.dest),
                          nbytes=_nbytes(csr.indices.size, csr.n, 1, dtype),
                          host_nbytes=_host_nbytes(csr.indices.size, csr.n, 1, dtype),
                          flops=FLOPS_PER_N15 * csr.n ** 1.5))
    except SingularMatrixError as exc:
        raise RuntimeError(SINGULAR) from exc
    return SparseLU(fac, superlu)


def _square_sparse(A, who):
    A = _sparse_matrix(A, f"{who} converted its input to CSC format")
    if len(A.shape) != 2 or A.shape[0] != A.shape[1]:
        raise ValueError("can only factor square matrices")
    return A


@_dispatch.front_door("sparse.splu")
def splu(A: Any, permc_spec: str | None = None, diag_pivot_thresh: float | None = None,
         relax: int | None = None, panel_size: int | None = None,
         options: dict | None = None) -> SparseLU:
    """LU-factorize sparse ``A``, as :func:`scipy.sparse.linalg.splu`.

    Parameters
    ----------
    A : sparse matrix, shape (n, n)
        SciPy, CuPy or torch sparse, any format (a dense array is converted to CSC with a
        ``SparseEfficiencyWarning``, as SciPy does).
    permc_spec, diag_pivot_thresh, relax, panel_size, options
        SuperLU's options, as SciPy's; they apply to the CPU engine (and to the factors ``L``,
        ``U``, ``perm_r``, ``perm_c`` of a GPU factorization, made by SuperLU); cuDSS orders
        and pivots its own way.

    Returns
    -------
    SparseLU
        ``solve(rhs, trans="N")``, ``shape``, ``nnz``, ``L``, ``U``, ``perm_r``, ``perm_c``.

    Raises
    ------
    ValueError
        ``A`` is not square ("can only factor square matrices").
    RuntimeError
        ``A`` is singular ("Factor is exactly singular", as SciPy).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gpulinalg.sparse import splu
    >>> A = sp.csc_array([[1.0, 0, 0], [5, 0, 2], [0, -1, 0]])
    >>> lu = splu(A)
    >>> x = lu.solve(np.array([1.0, 2, 3]))
    >>> bool(np.allclose(A @ x, [1.0, 2, 3]))
    True
    >>> Pr = sp.csc_array((np.ones(3), (lu.perm_r, np.arange(3))))
    >>> Pc = sp.csc_array((np.ones(3), (np.arange(3), lu.perm_c)))
    >>> bool(np.allclose((Pr @ A @ Pc).toarray(), (lu.L @ lu.U).toarray()))
    True

    Notes
    -----
    On the GPU the factorization is cuDSS's LU (cuSOLVER-Sp's without cuDSS), which keeps its
    factors to itself: ``L``, ``U``, ``perm_r`` and ``perm_c`` are then computed on first
    access by SciPy's SuperLU of the same matrix on the host (a second factorization, on the
    CPU, recorded in ``gpulinalg.last_run()``), and describe that factorization, not cuDSS's.
    ``nnz`` is the engine's factor size. A singular matrix that cuDSS factors with perturbed
    pivots is reported at the first ``solve`` (the same ``RuntimeError``). Solves are
    refined and checked as in :func:`spsolve`, and warn instead of raising.
    """
    A = _square_sparse(A, "splu")
    _check_permc(permc_spec)
    superlu = dict(permc_spec=permc_spec, diag_pivot_thresh=diag_pivot_thresh, relax=relax,
                   panel_size=panel_size,  # SciPy's SymmetricMode default, whatever the order
                   options={"SymmetricMode": False, **(options or {})})
    return _factorize(A, "lu", "sparse.splu", superlu)


@_dispatch.front_door("sparse.factorized")
def factorized(A: Any) -> Callable[..., Any]:
    """Factorize sparse ``A`` once and return a function solving with it, as
    :func:`scipy.sparse.linalg.factorized`.

    Parameters
    ----------
    A : sparse matrix, shape (n, n)
        As for :func:`splu`.

    Returns
    -------
    solve : callable
        ``solve(b, trans="N")`` for ``b`` of shape (n,) or (n, k): :meth:`SparseLU.solve`.

    Raises
    ------
    ValueError
        ``A`` is not square.
    RuntimeError
        ``A`` is singular ("Factor is exactly singular", as SciPy without UMFPACK).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gpulinalg.sparse import factorized
    >>> A = sp.csc_array([[3.0, 2, -1], [2, -2, 4], [-1, 0.5, -1]])
    >>> solve = factorized(A)
    >>> bool(np.allclose(solve(np.array([1.0, -2, 0])), [1.0, -2, -2]))
    True

    Notes
    -----
    The factorization is the one ``method="auto"`` of :func:`gpulinalg.sparse.factorize`
    picks (Cholesky for a symmetric matrix with a positive diagonal, LDLᵀ or LU otherwise), on
    the GPU or the CPU; UMFPACK is never used (SciPy's ``use_solver`` has no effect).
    """
    A = _square_sparse(A, "splu")
    return _factorize(A, "auto", "sparse.factorized", {}).solve


# -- spsolve_triangular -------------------------------------------------------------------------
def _zero_on_diagonal(csr) -> bool:
    """Whether the canonical CSR matrix has a zero (or missing) diagonal entry."""
    xp = xp_of(csr.data)
    nnz = int(csr.indices.size)
    rows = xp.searchsorted(csr.indptr[1:].astype(xp.int64), xp.arange(nnz), side="right")
    on = rows == csr.indices
    if int(on.sum()) < csr.n:
        return True
    return bool((csr.data[on] == 0).any())


@_dispatch.front_door("sparse.spsolve_triangular")
def spsolve_triangular(A: Any, b: Any, lower: bool = True, overwrite_A: bool = False,
                       overwrite_b: bool = False, unit_diagonal: bool = False) -> Any:
    """Solve ``A x = b`` for triangular sparse ``A``, as
    :func:`scipy.sparse.linalg.spsolve_triangular`.

    Parameters
    ----------
    A : sparse matrix, shape (n, n)
        Lower (``lower=True``) or upper triangular; SciPy, CuPy or torch sparse (a dense array
        is converted with a ``SparseEfficiencyWarning``, as SciPy does).
    b : array, shape (n,) or (n, k)
    lower : bool
    overwrite_A, overwrite_b : bool
        Accepted for SciPy's signature; inputs are never modified.
    unit_diagonal : bool
        Take the diagonal as ones (its stored entries are not read).

    Returns
    -------
    x : array, shape like ``b``
        dtype ``promote(A.dtype, float32, b.dtype)`` as SciPy's, in ``b``'s package.

    Raises
    ------
    LinAlgError
        A zero (or missing) diagonal entry without ``unit_diagonal``
        (:class:`gpulinalg.SingularMatrixError`, a ``numpy.linalg.LinAlgError``).
    ValueError
        ``A`` not square, ``b`` not 1-D or 2-D or of the wrong length, NaN or Inf in the input.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from gpulinalg.sparse import spsolve_triangular
    >>> A = sp.csr_array([[3.0, 0, 0], [1, -1, 0], [2, 0, 1]])
    >>> B = np.array([[2.0, 0], [-1, 0], [2, 0]])
    >>> bool(np.allclose(A @ spsolve_triangular(A, B), B))
    True

    Notes
    -----
    GPU: cuSPARSE's triangular solve through CuPy's
    ``cupyx.scipy.sparse.linalg.spsolve_triangular``; CPU: SciPy's. Host (NumPy) input stays
    on the CPU unless ``backend="gpu"``: a triangular solve does too little work per byte for
    the transfer to pay. The entries of the other triangle are not used by either engine.
    """
    A = _sparse_matrix(A, "CSC or CSR matrix format is required. Converting to CSC matrix.")
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square matrix but its shape is {tuple(A.shape)}.")
    csr = as_csr(A)
    check_values(csr.data)
    if not unit_diagonal and csr.n and _zero_on_diagonal(csr):
        raise SingularMatrixError("A is singular: zero entry on diagonal.")
    b = as_array(b, "b")
    if b.ndim not in (1, 2):
        raise ValueError(f"b must have 1 or 2 dims but its shape is {tuple(b.shape)}.")
    if b.shape[0] != csr.n:
        raise ValueError("The size of the dimensions of A must be equal to the size of the "
                         f"first dimension of b but the shape of A is {tuple(A.shape)} and the "
                         f"shape of b is {tuple(b.shape)}.")
    check_finite(b, "b")
    dtype = _fp_dtype(np.promote_types(np.promote_types(csr.data.dtype, np.float32),
                                       np_dtype(b)))
    if csr.n == 0 or b.size == 0:
        return shortcut("sparse.spsolve_triangular", _full(tuple(b.shape), 0, dtype, b))
    nrhs = 1 if b.ndim == 1 else b.shape[1]
    return dispatch(Op(
        "sparse.spsolve_triangular", _triangular_cuda.triangular_solve,
        _superlu_host.triangular_solve,
        args=(csr.indptr, csr.indices, csr.data.astype(dtype, copy=False), b),
        kwargs=dict(n=csr.n, lower=bool(lower), unit_diagonal=bool(unit_diagonal)),
        nbytes=int(csr.indices.size * (dtype.itemsize + 4) * 2 + (csr.n + 1) * 8
                   + 3 * csr.n * nrhs * dtype.itemsize),
        flops=2.0 * csr.indices.size * nrhs, like=b))
