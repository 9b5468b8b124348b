"""Public API: :func:`solve`, :func:`factorize` and :class:`SparseFactorization`.

Each public call validates its arguments, then makes one dispatch between a GPU function
(:mod:`._engine_cuda`: cuDSS or cuSOLVER-Sp) and a CPU function (:mod:`._superlu_host`:
SuperLU) of the same signature, and hands the result back in the caller's package.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .._runtime import dispatch as _dispatch
from .._runtime.dispatch import Op, front_door
from .._runtime import arrays as _arrays
from .._runtime.config import config_context
from .._runtime.dispatch import dispatch, note, shortcut
from .._runtime.validation import np_dtype, as_array, check_finite, float_dtype
from . import _engine_cuda, _factor_xp, _superlu_host
from ._input_xp import as_csr, check_values
from ._policy import check_method, emit, validate_policy, warn_fallback
from ._results import LogDetResult, NotPositiveDefiniteWarning, describe

_factor_xp.use_host_lu(_superlu_host.host_twin)  # re-checks perturbed GPU factors

__all__ = ["solve", "factorize", "SparseFactorization", "LogDetResult",
           "NotPositiveDefiniteWarning"]

#: Fill-in the byte estimate assumes (factor entries per matrix entry) before cuDSS's analysis.
FILL_FACTOR = 30
#: Work the host-input cost model assumes for a sparse factorization of order n: 200 n^1.5.
FLOPS_PER_N15 = 200.0

Method = Literal["auto", "cholesky", "ldlt", "lu", "qr"]
Check = Literal["raise", "warn", "ignore"]
Refine = Literal["auto"] | bool | int
Trans = Literal["N", "T", "H"]
TRANS = ("N", "T", "H")


def _rhs(b, n):
    b = as_array(b, "b", min_ndim=1, max_ndim=2)
    if b.shape[0] != n:
        raise ValueError(f"b has shape {tuple(b.shape)}; A is {n}x{n}, so b needs {n} rows")
    check_finite(b, "b")
    return b


def _empty_result(op, b, dtype):
    """The answer for an empty system, recorded through :func:`dispatch.shortcut`."""
    out = np.zeros(tuple(b.shape), dtype=dtype)
    return shortcut(op, _arrays.to_kind(out, _arrays.kind_of(b), b))


def _nbytes(nnz, n, nrhs, dtype):
    item = np.dtype(dtype).itemsize
    return _host_nbytes(nnz, n, nrhs, dtype) + int(FILL_FACTOR * nnz * item)


def _host_nbytes(nnz, n, nrhs, dtype):
    """Host bytes of a SciPy factorization that can be known up front: the matrix's copies and
    the vectors. Its factors' fill is not known before the analysis, so it is not counted (a
    guess could refuse a problem that fits)."""
    item = np.dtype(dtype).itemsize
    return int(nnz * (item + 4) * 2 + (n + 1) * 8 + 4 * n * max(nrhs, 1) * item)


@_dispatch.front_door("sparse.solve")
def solve(A: Any, b: Any, *, method: Method = "auto", check: Check = "raise",
          tol: float | None = None, refine: Refine = "auto") -> Any:
    """Solve the sparse system ``A x = b`` with a direct method, checking the answer.

    Parameters
    ----------
    A : sparse matrix, shape (n, n)
        CSR or COO from SciPy, CuPy (``cupyx.scipy.sparse``) or torch (``sparse_coo`` /
        ``sparse_csr``); int32 or int64 indices; unsorted or duplicate entries are summed as
        SciPy does. Other SciPy/CuPy sparse formats are converted to CSR.
    b : array, shape (n,) or (n, nrhs)
        NumPy, CuPy or torch. ``x`` comes back in ``b``'s package and on its device.
    method : {"auto", "cholesky", "ldlt", "lu", "qr"}
        ``auto``: Cholesky for a symmetric (Hermitian) matrix with a positive diagonal, falling
        back to LDLᵀ with a :class:`NotPositiveDefiniteWarning` if it is not positive definite;
        LDLᵀ for other symmetric matrices; LU otherwise.
    check : {"raise", "warn", "ignore"}
        What to do when the backward error stays above ``tol`` after refinement (raise
        :class:`ResidualError`, warn :class:`~gpulinalg.ResidualWarning`, or nothing), and
        when the matrix is numerically singular, its estimated reciprocal condition number
        below ``eps`` (raise :class:`~gpulinalg.SingularMatrixError`, warn
        :class:`~gpulinalg.IllConditionedWarning`, or nothing). A pivot the engine finds zero
        raises :class:`~gpulinalg.SingularMatrixError` whatever ``check`` says.
    tol : float, optional
        Backward-error tolerance; default ``max(100, 10 sqrt(n)) * eps(dtype)``.
    refine : "auto", bool or int
        Iterative-refinement steps allowed when the backward error is above ``tol``
        (``"auto"``/``True``: up to 5, ``False``/0: none).

    Returns
    -------
    x : array, shape like ``b``
        In the promoted dtype of ``A`` and ``b`` (float32, float64, complex64 or complex128).

    Raises
    ------
    NotPositiveDefiniteError
        ``method="cholesky"`` on a matrix that is not positive definite.
    SingularMatrixError
        The matrix is singular (a zero pivot), or numerically singular (estimated reciprocal
        condition number below ``eps``) and ``check="raise"``.
    ResidualError
        ``check="raise"`` and the backward error stays above ``tol``.

    Warns
    -----
    IllConditionedWarning
        ``check="warn"`` and the matrix is numerically singular.
    ResidualWarning
        ``check="warn"`` and the backward error stays above ``tol``.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, gpulinalg
    >>> A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr")
    >>> b = np.ones(50)
    >>> x = gpulinalg.sparse.solve(A, b)
    >>> bool(np.allclose(A @ x, b))
    True
    >>> gpulinalg.last_run().details["method"]
    'cholesky'

    See Also
    --------
    scipy.sparse.linalg.spsolve : SciPy's sparse direct solve.
    factorize : Factorize once, then solve many times and refactorize.

    Notes
    -----
    The dispatcher runs the solve on the GPU with cuDSS (``nvmath.sparse.advanced``), or
    cuSOLVER-Sp when cuDSS is not installed or ``method="qr"`` (pick one with
    ``gpulinalg.set_config(sparse_gpu_solver=...)``), and on the CPU with SciPy's SuperLU. Every
    solve measures its normwise backward error and refines iteratively while it is above
    ``tol``; ``gpulinalg.last_run().details`` holds the method, library, backward errors and
    refinement steps. Singular and ill-conditioned matrices are detected by one rule on every
    engine (``docs/sparse.md``): the engine's zero pivots, then, when the growth
    ``||A|| ||x|| / ||b||`` or a tiny pivot points at trouble, a 1-norm condition estimate
    through the factorization's solves (``last_run().details["rcond"]``).
    """
    check_method(method)
    steps = validate_policy(check, tol, refine)
    csr = as_csr(A)
    b = _rhs(b, csr.n)
    dtype = float_dtype(np.dtype(csr.data.dtype), np_dtype(b))
    check_values(csr.data)
    if csr.n == 0 or b.size == 0:
        return _empty_result("sparse.solve", b, dtype)
    nrhs = 1 if b.ndim == 1 else b.shape[1]
    x, report = dispatch(Op(
        "sparse.solve", _engine_cuda.solve_once, _superlu_host.solve_once,
        args=(csr.indptr, csr.indices, csr.data.astype(dtype, copy=False), b),
        kwargs=dict(n=csr.n, method=method, check=check, tol=tol, max_steps=steps),
        nbytes=_nbytes(csr.indices.size, csr.n, nrhs, dtype),
        host_nbytes=_host_nbytes(csr.indices.size, csr.n, nrhs, dtype),
        flops=FLOPS_PER_N15 * csr.n ** 1.5, like=b))
    warn_fallback(report.get("method_fallback"))
    emit(report)
    return x


@_dispatch.front_door("sparse.factorize")
def factorize(A: Any, *, method: Method = "auto",
              reordering: str | None = None) -> SparseFactorization:
    """Analyse and factorize sparse ``A`` once, for many solves and refactorizations.

    The dispatcher picks the GPU (cuDSS, or cuSOLVER-Sp without cuDSS) or the CPU (SciPy
    SuperLU) here, once: the returned factorization keeps its backend.

    Parameters
    ----------
    A : sparse matrix, shape (n, n)
        As for :func:`solve`.
    method : {"auto", "cholesky", "ldlt", "lu", "qr"}
        As for :func:`solve`.
    reordering : str, optional
        Fill-reducing ordering, backend specific: cuDSS ``"default"`` (nested dissection),
        ``"amd"``, ``"colamd"``, ``"btf_colamd"``; cuSOLVER-Sp ``"metis"`` (default),
        ``"symamd"``, ``"symrcm"``, ``"none"``; SuperLU ``"MMD_AT_PLUS_A"``, ``"COLAMD"``,
        ``"MMD_ATA"``, ``"NATURAL"``. ``None``: the backend's choice for the method.

    Returns
    -------
    SparseFactorization

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, gpulinalg
    >>> A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(40, 40), format="csr")
    >>> with gpulinalg.sparse.factorize(A) as fac:
    ...     x = fac.solve(np.ones(40))
    ...     fac.refactorize(2 * A)
    ...     y = fac.solve(np.ones(40))
    ...     ld = fac.logdet()
    >>> ref = np.linalg.slogdet(2 * A.toarray())
    >>> bool(np.allclose(y, x / 2)), bool(np.isclose(ld.logabsdet, ref.logabsdet))
    (True, True)

    See Also
    --------
    scipy.sparse.linalg.splu : SciPy's sparse LU factorization.
    scipy.sparse.linalg.factorized : SciPy's factorize-once solve function.
    solve : One-shot solve.

    Notes
    -----
    The GPU library follows ``gpulinalg.set_config(sparse_gpu_solver=...)`` (``"auto"``: cuDSS when
    installed, else cuSOLVER-Sp; ``method="qr"`` always cuSOLVER-Sp). cuDSS keeps its analysis
    for :meth:`SparseFactorization.refactorize`; cuSOLVER-Sp keeps no factor (it factors again
    for every solve and has no :meth:`SparseFactorization.logdet`).
    """
    check_method(method)
    csr = as_csr(A)
    check_values(csr.data)
    dtype = float_dtype(np.dtype(csr.data.dtype))
    if csr.n == 0:
        return shortcut("sparse.factorize",
                        SparseFactorization(_superlu_host.EmptyFactor(dtype, method)))
    fac = SparseFactorization._create(csr, csr.data.astype(dtype, copy=False), method,
                                      reordering)
    warn_fallback(fac._fallback)
    return fac


class SparseFactorization:
    """A sparse matrix factorized once: solve many times, refactorize with new values.

    Made by :func:`factorize`; it lives where the dispatcher put it (GPU or CPU) until
    :meth:`free` (or the end of a ``with`` block).
    """

    def __init__(self, factor: Any, fallback: str | None = None) -> None:
        self._factor, self._twin, self._fallback = factor, None, fallback
        self._counts = {"solves": 0, "refactorizations": 0}
        self._last: dict[str, Any] = {}

    @classmethod
    def _create(cls, csr, data, method, reordering):
        n = csr.n

        def run(engine_factorize):
            def fn(indptr, indices, data, dest):
                factor, why = engine_factorize(indptr, indices, data, n=n, method=method,
                                               reordering=reordering)
                factor.dest, factor.input_nnz = dest, csr.input_nnz
                note(**describe(factor))
                return cls(factor, why)
            return fn
        return dispatch(Op("sparse.factorize", run(_engine_cuda.factorize),
                           run(_superlu_host.factorize),
                           args=(csr.indptr, csr.indices, data, csr.dest),
                           nbytes=_nbytes(csr.indices.size, n, 1, data.dtype),
                           host_nbytes=_host_nbytes(csr.indices.size, n, 1, data.dtype),
                           flops=FLOPS_PER_N15 * n ** 1.5))

    # -- helpers -------------------------------------------------------------------------
    def _alive(self):
        if self._factor is None:
            raise ValueError("this SparseFactorization has been freed")
        return self._factor

    def _route(self):
        return "cpu" if self._alive().device == "cpu" else "gpu"

    def _cpu_factor(self):
        """The factor to use on the CPU: itself, or (after a GPU failure) a host twin."""
        factor = self._alive()
        if factor.device == "cpu":
            return factor
        if self._twin is None:
            self._twin = _superlu_host.host_twin(factor)
        return self._twin

    def _dispatch(self, op, gpu_fn, cpu_fn, args=(), kwargs=None, **kw):
        with config_context(backend=self._route()):  # the factorization keeps its backend
            return dispatch(Op(f"sparse.SparseFactorization.{op}", gpu_fn, cpu_fn, args, kwargs,
                               **kw))

    # -- public --------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Order of the factorized matrix."""
        return self._alive().n

    @property
    def method(self) -> str:
        """The method used: ``"cholesky"``, ``"ldlt"``, ``"lu"`` or ``"qr"``."""
        return self._alive().method

    @property
    def dtype(self) -> np.dtype:
        """dtype of the factors (float32, float64, complex64 or complex128)."""
        return self._alive().dtype

    @property
    def info(self) -> dict[str, Any]:
        """What this factorization is and did: a dict.

        ``backend`` (``"gpu"``/``"cpu"``), ``library`` (``"cudss"``, ``"cusolversp"``,
        ``"superlu"``), ``device``, ``method``, ``reordering``, ``factor_nnz``, ``n``, ``nnz``,
        ``dtype``, ``analysis_seconds``, ``factorization_seconds``, ``solve_seconds`` (last
        solve), ``solves``, ``refactorizations``, ``method_fallback``, and the last solve's
        ``backward_error``, ``backward_error_initial``, ``refinement_steps``, ``tol``.
        """
        factor = self._alive()
        return {"backend": self._route(), **describe(factor), **self._counts,
                "method_fallback": self._fallback, **self._last}

    @property
    def shape(self) -> tuple[int, int]:
        """``(n, n)``: with :attr:`dtype` and :meth:`matvec`, what
        :func:`scipy.sparse.linalg.aslinearoperator` needs to wrap the factorization."""
        n = self.n
        return (n, n)

    @front_door("sparse.SparseFactorization.solve")
    def solve(self, b: Any, trans: Trans = "N", *, check: Check = "raise",
              tol: float | None = None, refine: Refine = "auto") -> Any:
        """Solve ``A x = b``, ``Aᵀ x = b`` or ``Aᴴ x = b`` with the factors.

        Parameters
        ----------
        b : array, shape (n,) or (n, nrhs)
            NumPy, CuPy or torch; ``x`` comes back in ``b``'s package and device.
        trans : {"N", "T", "H"}
            The system to solve, as :meth:`scipy.sparse.linalg.SuperLU.solve`: ``A``,
            ``Aᵀ`` or ``Aᴴ``. SuperLU solves the transposes natively; a Cholesky or LDLᵀ
            factorization uses ``Aᴴ = A``; a GPU LU factorizes ``Aᵀ`` on its first
            transposed solve and keeps it (refactorized with the factorization).
        check, tol, refine
            Residual check, refinement and the singularity rule, as in :func:`solve`.

        Returns
        -------
        x : array, shape like ``b``

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, gpulinalg
        >>> A = sp.csr_matrix(np.array([[4.0, 1.0, 0.0], [2.0, 5.0, 1.0], [0.0, 3.0, 6.0]]))
        >>> fac = gpulinalg.sparse.factorize(A)
        >>> x = fac.solve(np.ones(3), trans="T")
        >>> bool(np.allclose(A.T @ x, np.ones(3)))
        True
        """
        factor = self._alive()
        if trans not in TRANS:
            raise ValueError(f"trans must be one of {TRANS}, got {trans!r}")
        steps = validate_policy(check, tol, refine)
        b = _rhs(b, factor.n)
        dtype = float_dtype(factor.dtype, np_dtype(b))
        if factor.n == 0 or b.size == 0:
            return _empty_result("sparse.SparseFactorization.solve", b, dtype)
        op = {"N": "", "T": "ᵀ", "H": "ᴴ"}[trans]
        kwargs = dict(check=check, tol=tol, max_steps=steps, trans=trans,
                      what=f"SparseFactorization.solve ({factor.method}, A{op} x = b)")
        nrhs = 1 if b.ndim == 1 else b.shape[1]
        x, report = self._dispatch(
            "solve", lambda b, **kw: _factor_xp.checked_solve(self._factor, b, **kw),
            lambda b, **kw: _factor_xp.checked_solve(self._cpu_factor(), b, **kw),
            (b,), kwargs, nbytes=6 * factor.n * nrhs * dtype.itemsize, like=b)
        self._counts["solves"] += 1
        self._last = {k: v for k, v in report.items()
                      if k not in ("warning", "ill_conditioned")}
        emit(report)
        return x

    def matvec(self, x: Any) -> Any:
        """``A⁻¹ x``: the factorization as an operator that approximates ``A⁻¹``, as a
        preconditioner ``M`` of :func:`scipy.sparse.linalg.cg` / ``gmres`` expects.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, scipy.sparse.linalg as spla, gpulinalg
        >>> A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(30, 30), format="csr")
        >>> M = spla.aslinearoperator(gpulinalg.sparse.factorize(A))
        >>> x, info = spla.cg(A, np.ones(30), M=M)
        >>> info, bool(np.allclose(A @ x, np.ones(30)))
        (0, True)
        """
        return self.solve(x)

    def rmatvec(self, x: Any) -> Any:
        """``A⁻ᴴ x`` (the adjoint of :meth:`matvec`)."""
        return self.solve(x, trans="H")

    def matmat(self, x: Any) -> Any:
        """``A⁻¹ X`` for ``X`` of shape (n, k)."""
        return self.solve(x)

    def rmatmat(self, x: Any) -> Any:
        """``A⁻ᴴ X`` for ``X`` of shape (n, k)."""
        return self.solve(x, trans="H")

    def rcond(self) -> float:
        """Estimated reciprocal condition number ``1 / (||A||_1 ||A⁻¹||_1)``.

        Hager and Higham's 1-norm estimator (LAPACK ``xGECON``'s) through this
        factorization's solves with ``A`` and ``Aᴴ``: a few solves, kept until the next
        :meth:`refactorize`. Solves apply the singularity rule with it (``docs/sparse.md``).

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, gpulinalg
        >>> A = sp.diags([1.0, 10.0, 100.0], format="csr")
        >>> float(gpulinalg.sparse.factorize(A).rcond())
        0.01
        """
        factor = self._alive()
        if factor.n == 0:
            return float("inf")
        return self._dispatch("rcond", lambda: _factor_xp.rcond(self._factor),
                              lambda: _factor_xp.rcond(self._cpu_factor()), convert=False)

    def refactorize(self, values: Any) -> None:
        """Factorize new values on the same sparsity pattern, reusing the analysis.

        Parameters
        ----------
        values : sparse matrix or array
            A sparse matrix with the factorized matrix's pattern, or a 1-D array of the stored
            values in the order of the matrix given to :func:`factorize` (duplicates summed
            again).
        """
        factor = self._alive()

        def cpu(values):  # a GPU factorization that ran out of memory moves to the CPU
            twin = self._cpu_factor()
            _factor_xp.refactorize(twin, values)
            if twin is not factor:
                _factor_xp.release(factor)
                self._factor, self._twin = twin, None
        self._dispatch("refactorize", lambda values: _factor_xp.refactorize(factor, values),
                       cpu, (values,),
                       nbytes=_nbytes(factor.m.nnz, factor.n, 1, factor.dtype),
                       host_nbytes=_host_nbytes(factor.m.nnz, factor.n, 1, factor.dtype))
        self._counts["refactorizations"] += 1

    def logdet(self) -> LogDetResult:
        """``(sign, logabsdet)`` of the factorized matrix, as :func:`numpy.linalg.slogdet`.

        From the factors' diagonal: L's for Cholesky (``sign`` 1), D's for LDLᵀ, U's with the
        row and column permutations' parities for LU (``sign`` complex of modulus 1 for a
        complex matrix). A singular factor gives ``(0, -inf)``.

        Examples
        --------
        >>> import numpy as np, scipy.sparse as sp, gpulinalg
        >>> A = sp.csr_matrix(np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 1.0], [0.0, 1.0, 4.0]]))
        >>> sign, logabsdet = gpulinalg.sparse.factorize(A, method="lu").logdet()
        >>> ref = np.linalg.slogdet(A.toarray())
        >>> bool(sign == ref.sign), bool(np.isclose(logabsdet, ref.logabsdet))
        (True, True)
        """
        self._alive()

        def gpu():
            sign, logabs = self._factor.slogdet()
            if sign is None:  # the engine does not report its pivoting: the sign from SuperLU
                sign = self._cpu_factor().slogdet()[0]
                note(logdet_sign="superlu")
            return _factor_xp.checked_slogdet(self._factor, sign, logabs)

        def cpu():
            twin = self._cpu_factor()
            return _factor_xp.checked_slogdet(twin, *twin.slogdet())
        sign, logabs = self._dispatch("logdet", gpu, cpu, convert=False)
        return LogDetResult(sign, logabs)

    def free(self) -> None:
        """Release the factors (device memory, cuDSS objects); the object is unusable after."""
        for f in (self._factor, self._twin):
            if f is not None:
                _factor_xp.release(f)
        self._factor = self._twin = None

    def __enter__(self) -> SparseFactorization:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.free()
        return False

    def __repr__(self) -> str:
        if self._factor is None:
            return "<SparseFactorization (freed)>"
        f = self._factor
        return (f"<SparseFactorization {f.method} n={f.n} {f.dtype} on {self._route()} "
                f"({f.backend})>")
