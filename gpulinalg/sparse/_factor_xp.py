"""What the CPU and GPU engines share: choosing the method, building a factor, checked solves.

Written once for any engine: the engine's *factor class* and its ``csr_matrix(indptr, indices,
data, n)`` (SciPy's or CuPy's CSR matrix over the engine's arrays) are passed in by
:mod:`~gpulinalg.sparse._superlu_host` or :mod:`~gpulinalg.sparse._engine_cuda`, the two
functions the dispatcher chooses between; the arrays' module is found from the arrays.

A *factor* is an engine object (:class:`~gpulinalg.sparse._superlu_host.SuperLUFactor`,
:class:`~gpulinalg.sparse._cudss_cuda.CuDSSFactor`,
:class:`~gpulinalg.sparse._cusolversp_cuda.CuSolverSpFactor`) with ``m`` (the CSR matrix where
the factor lives), ``anorm``, ``method``, ``reordering``, ``timings``, ``factor_nnz``,
``perturbed``, ``solve_raw(b)``, ``refactor(data)``, ``slogdet()``, ``matrix()`` and ``free()``.
"""

from __future__ import annotations

from .._runtime.dispatch import note
from .._runtime.errors import NotPositiveDefiniteError, SingularMatrixError
from ._input_xp import CSRInput, check_values, pattern_values, structure, xp_of
from ._policy import default_tol
from ._residual_xp import solve_checked
from ._results import describe

__all__ = ["resolve_method", "build", "checked_solve", "factorize_with", "solve_once_with",
           "refactorize"]


def resolve_method(m, method):
    """``(method, may_fall_back)`` for CSR ``m``: ``auto`` looks at symmetry and the diagonal.

    ``auto``: Cholesky for a symmetric (Hermitian) matrix with a positive diagonal (falling back
    to LDLᵀ if it is not positive definite), LDLᵀ for other symmetric matrices, LU otherwise.
    """
    if method in ("lu", "qr"):
        return method, False
    symmetric, posdiag = structure(m)
    if method == "auto":
        if symmetric:
            return ("cholesky", True) if posdiag else ("ldlt", False)
        return "lu", False
    if not symmetric:
        raise ValueError(f"method={method!r} needs a symmetric (Hermitian for complex) matrix; "
                         "use method='lu' or 'auto'")
    if method == "cholesky" and not posdiag:
        d = m.diagonal()
        k = int(xp_of(d).flatnonzero(~(d.real > 0))[0])
        raise NotPositiveDefiniteError(
            k + 1, message=f"sparse cholesky: the matrix is not positive definite "
                           f"(diagonal entry A[{k}, {k}] = {complex(d[k]).real:.3g})")
    return method, False


def check_structure(m):
    """Raise :class:`~gpulinalg.SingularMatrixError` for an empty row or column."""
    xp = xp_of(m.data)
    n = m.shape[0]
    rows = xp.diff(m.indptr) > 0
    cols = xp.bincount(m.indices.astype(xp.int64), minlength=n) > 0
    for what, ok in (("row", rows), ("column", cols)):
        if not bool(ok.all()):
            k = int(xp.flatnonzero(~ok)[0])
            raise SingularMatrixError(f"the matrix is structurally singular: {what} {k} has no "
                                      "stored entries")


def build(factor_cls, csr_matrix, indptr, indices, data, n, method, reordering=None):
    """Factor with ``factor_cls`` (the method chosen on ``csr_matrix(...)``, the engine's CSR
    matrix over the arrays); returns ``(factor, fallback_message_or_None)``."""
    m = csr_matrix(indptr, indices, data, n)
    check_structure(m)
    chosen, may_fall_back = resolve_method(m, method)
    try:
        return factor_cls(indptr, indices, data, n, chosen, reordering=reordering), None
    except NotPositiveDefiniteError as exc:
        if not may_fall_back:
            raise
        why = (f"gpulinalg.sparse: method='auto' found the matrix symmetric with a positive "
               f"diagonal but not positive definite ({exc}); factorizing it as LDLᵀ instead")
    note(method_fallback=why)
    return factor_cls(indptr, indices, data, n, "ldlt", reordering=reordering), why


def checked_solve(factor, b, *, check, tol, max_steps, what):
    """Solve ``factor`` for ``b`` with residual check and refinement: ``(x, report)``."""
    tol = default_tol(factor.n, factor.dtype) if tol is None else float(tol)
    xp = xp_of(factor.m.data)
    b = xp.asarray(b)
    if b.dtype.kind == "c" and factor.dtype.kind != "c":
        xr, rep = checked_solve(factor, b.real.copy(), check=check, tol=tol,
                                max_steps=max_steps, what=what)
        xi, rep_i = checked_solve(factor, b.imag.copy(), check=check, tol=tol,
                                  max_steps=max_steps, what=what)
        rep["backward_error"] = max(rep["backward_error"], rep_i["backward_error"])
        rep["warning"] = rep.get("warning") or rep_i.get("warning")
        return xr + 1j * xi, rep
    b = b.astype(factor.dtype, copy=False)
    x, report = solve_checked(factor.solve_raw, factor.m, b, factor.anorm, tol=tol, check=check,
                              max_steps=max_steps, what=what, perturbed=factor.perturbed,
                              pivot_eps=getattr(factor, "pivot_eps", None))
    note(**describe(factor))
    return x, report


def factorize_with(factor_cls, csr_matrix, indptr, indices, data, *, n, method,
                   reordering=None):
    """Entry point of a backend's ``factorize``: ``(factor, fallback_message_or_None)``."""
    return build(factor_cls, csr_matrix, indptr, indices, data, n, method, reordering)


def solve_once_with(factor_cls, csr_matrix, indptr, indices, data, b, *, n, method,
                    reordering=None, check, tol, max_steps):
    """Entry point of a backend's one-shot solve: factor, checked solve, free: ``(x, report)``."""
    factor, why = build(factor_cls, csr_matrix, indptr, indices, data, n, method, reordering)
    try:
        x, report = checked_solve(factor, b, check=check, tol=tol, max_steps=max_steps,
                                  what=f"sparse.solve ({factor.method})")
    finally:
        factor.free()
    report["method_fallback"] = why
    return x, report


def refactorize(factor, values):
    """Factorize ``values`` (see :meth:`SparseFactorization.refactorize
    <gpulinalg.sparse.SparseFactorization.refactorize>`) on ``factor``'s pattern, in place."""
    m = factor.m
    csr = CSRInput(m.indptr, m.indices, m.data, factor.n, factor.dest, factor.input_nnz)
    data = pattern_values(csr, values)
    check_values(data, "values")
    factor.refactor(data.astype(factor.dtype, copy=False))
    note(**describe(factor))
