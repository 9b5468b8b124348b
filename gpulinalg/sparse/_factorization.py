"""Public API: :func:`solve`, :func:`factorize` and :class:`SparseFactorization`."""

import warnings
from typing import NamedTuple

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime.config import thread_config
from .._runtime.dispatch import dispatch, note
from .._runtime.validation import _np_dtype, as_array, check_finite, float_dtype
from . import _cpu, _gpu
from ._core import METHODS, checked_solve, describe
from ._input import CSRInput, as_csr, check_values, pattern_values
from ._residual import emit, validate_policy

__all__ = ["solve", "factorize", "SparseFactorization", "LogDetResult",
           "NotPositiveDefiniteWarning"]

#: Fill-in the byte estimate assumes (factor entries per matrix entry) before cuDSS's analysis.
FILL_FACTOR = 30
#: Work the host-input cost model assumes for a sparse factorization of order n: 200 n^1.5.
FLOPS_PER_N15 = 200.0


class NotPositiveDefiniteWarning(RuntimeWarning):
    """``method="auto"`` tried Cholesky, found the matrix indefinite, and used LDLᵀ instead."""


class LogDetResult(NamedTuple):
    """``sign * exp(logabsdet)`` is the determinant (as :func:`numpy.linalg.slogdet`)."""

    sign: float
    logabsdet: float


def _check_method(method):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def _rhs(b, n):
    b = as_array(b, "b", min_ndim=1, max_ndim=2)
    if b.shape[0] != n:
        raise ValueError(f"b has shape {tuple(b.shape)}; A is {n}x{n}, so b needs {n} rows")
    check_finite(b, "b")
    return b


def _empty_result(b, dtype):
    out = np.zeros(tuple(b.shape), dtype=dtype)
    return _arrays.to_kind(out, _arrays.kind_of(b), b)


def _nbytes(nnz, n, nrhs, dtype):
    item = np.dtype(dtype).itemsize
    return int(nnz * (item + 4) * 2 + (n + 1) * 8 + 4 * n * max(nrhs, 1) * item
               + FILL_FACTOR * nnz * item)


def _warn_fallback(message, stacklevel=3):
    if message:
        warnings.warn(message, NotPositiveDefiniteWarning, stacklevel=stacklevel)


def solve(A, b, *, method="auto", check="raise", tol=None, refine="auto"):
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
        What to do when the backward error stays above ``tol`` after refinement: raise
        :class:`ResidualError`, warn :class:`~gpulinalg.ResidualWarning`, or nothing.
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
        The matrix is singular.
    ResidualError
        ``check="raise"`` and the backward error stays above ``tol``.

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
    """
    _check_method(method)
    steps = validate_policy(check, tol, refine)
    csr = as_csr(A)
    b = _rhs(b, csr.n)
    dtype = float_dtype(np.dtype(csr.data.dtype), _np_dtype(b))
    check_values(csr.data)
    if csr.n == 0 or b.size == 0:
        return _empty_result(b, dtype)
    nrhs = 1 if b.ndim == 1 else b.shape[1]
    x, report = dispatch(
        "sparse.solve", _gpu.solve_once, _cpu.solve_once,
        args=(csr.indptr, csr.indices, csr.data.astype(dtype, copy=False), b),
        kwargs=dict(n=csr.n, method=method, check=check, tol=tol, max_steps=steps),
        nbytes=_nbytes(csr.indices.size, csr.n, nrhs, dtype),
        flops=FLOPS_PER_N15 * csr.n ** 1.5, like=b)
    _warn_fallback(report.get("method_fallback"))
    emit(report)
    return x


def factorize(A, *, method="auto", reordering=None):
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
    """
    _check_method(method)
    csr = as_csr(A)
    check_values(csr.data)
    dtype = float_dtype(np.dtype(csr.data.dtype))
    if csr.n == 0:
        return SparseFactorization(_cpu.EmptyFactor(dtype, method))
    fac = SparseFactorization._create(csr, csr.data.astype(dtype, copy=False), method,
                                      reordering)
    _warn_fallback(fac._fallback)
    return fac


class SparseFactorization:
    """A sparse matrix factorized once: solve many times, refactorize with new values.

    Made by :func:`factorize`; it lives where the dispatcher put it (GPU or CPU) until
    :meth:`free` (or the end of a ``with`` block).
    """

    def __init__(self, factor, fallback=None):
        self._factor, self._twin, self._fallback = factor, None, fallback
        self._counts = {"solves": 0, "refactorizations": 0}
        self._last = {}

    @classmethod
    def _create(cls, csr, data, method, reordering):
        n = csr.n

        def run(backend):
            def fn(indptr, indices, data, dest):
                factor, why = backend.factorize(indptr, indices, data, n=n, method=method,
                                                reordering=reordering)
                factor.dest, factor.input_nnz = dest, csr.input_nnz
                note(**describe(factor))
                return cls(factor, why)
            return fn
        return dispatch("sparse.factorize", run(_gpu), run(_cpu),
                        args=(csr.indptr, csr.indices, data, csr.dest),
                        nbytes=_nbytes(csr.indices.size, n, 1, data.dtype),
                        flops=FLOPS_PER_N15 * n ** 1.5)

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
            m = factor.matrix()
            self._twin = _cpu.SuperLUFactor(m.indptr, m.indices, m.data, factor.n,
                                            factor.method)
        return self._twin

    def _dispatch(self, op, gpu_fn, cpu_fn, args=(), kwargs=None, **kw):
        with thread_config(backend=self._route()):
            return dispatch(f"sparse.SparseFactorization.{op}", gpu_fn, cpu_fn, args, kwargs,
                            **kw)

    # -- public --------------------------------------------------------------------------
    @property
    def n(self):
        """Order of the factorized matrix."""
        return self._alive().n

    @property
    def method(self):
        """The method used: ``"cholesky"``, ``"ldlt"``, ``"lu"`` or ``"qr"``."""
        return self._alive().method

    @property
    def dtype(self):
        return self._alive().dtype

    @property
    def info(self):
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

    def solve(self, b, *, check="raise", tol=None, refine="auto"):
        """Solve ``A x = b`` with the factors; ``b`` of shape (n,) or (n, nrhs).

        Residual check and refinement as in :func:`solve`; ``x`` comes back in ``b``'s
        package and device.
        """
        factor = self._alive()
        steps = validate_policy(check, tol, refine)
        b = _rhs(b, factor.n)
        dtype = float_dtype(factor.dtype, _np_dtype(b))
        if factor.n == 0 or b.size == 0:
            return _empty_result(b, dtype)
        kwargs = dict(check=check, tol=tol, max_steps=steps,
                      what=f"SparseFactorization.solve ({factor.method})")
        nrhs = 1 if b.ndim == 1 else b.shape[1]
        x, report = self._dispatch(
            "solve", lambda b, **kw: checked_solve(self._factor, b, **kw),
            lambda b, **kw: checked_solve(self._cpu_factor(), b, **kw),
            (b,), kwargs, nbytes=6 * factor.n * nrhs * dtype.itemsize, like=b)
        self._counts["solves"] += 1
        self._last = {k: v for k, v in report.items() if k != "warning"}
        emit(report)
        return x

    def refactorize(self, values):
        """Factorize new values on the same sparsity pattern, reusing the analysis.

        Parameters
        ----------
        values : sparse matrix or array
            A sparse matrix with the factorized matrix's pattern, or a 1-D array of the stored
            values in the order of the matrix given to :func:`factorize` (duplicates summed
            again).
        """
        factor = self._alive()

        def run(f):
            def fn(values):
                csr = CSRInput(f.m.indptr, f.m.indices, f.m.data, f.n, f.dest, f.input_nnz)
                data = pattern_values(csr, values)
                check_values(data, "values")
                f.refactor(data.astype(f.dtype, copy=False))
                note(**describe(f))
            return fn

        def cpu(values):  # a GPU factorization that ran out of memory moves to the CPU
            twin = self._cpu_factor()
            twin.dest, twin.input_nnz = _arrays.to_host(factor.dest) if factor.dest is not None \
                else None, factor.input_nnz
            run(twin)(values)
            if twin is not factor:
                factor.free()
                self._factor, self._twin = twin, None
        self._dispatch("refactorize", run(factor), cpu, (values,),
                       nbytes=_nbytes(factor.m.nnz, factor.n, 1, factor.dtype))
        self._counts["refactorizations"] += 1

    def logdet(self):
        """``(sign, logabsdet)`` of the factorized matrix, as :func:`numpy.linalg.slogdet`.

        Available for Cholesky and LDLᵀ factorizations (for Cholesky ``sign`` is 1).
        """
        factor = self._alive()
        if factor.method not in ("cholesky", "ldlt"):
            raise ValueError(f"logdet() needs a cholesky or ldlt factorization, this one is "
                             f"{factor.method!r}")
        sign, logabs = self._dispatch("logdet", lambda: self._factor.slogdet(),
                                      lambda: self._cpu_factor().slogdet(), convert=False)
        return LogDetResult(sign, logabs)

    def free(self):
        """Release the factors (device memory, cuDSS objects); the object is unusable after."""
        for f in (self._factor, self._twin):
            if f is not None:
                f.free()
        self._factor = self._twin = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()
        return False

    def __repr__(self):
        if self._factor is None:
            return "<SparseFactorization (freed)>"
        f = self._factor
        return (f"<SparseFactorization {f.method} n={f.n} {f.dtype} on {self._route()} "
                f"({f.backend})>")
