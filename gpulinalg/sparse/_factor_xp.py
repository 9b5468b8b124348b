"""What the CPU and GPU engines share: choosing the method, building a factor, checked solves.

Written once for any engine: the engine's *factor class* and its ``csr_matrix(indptr, indices,
data, n)`` (SciPy's or CuPy's CSR matrix over the engine's arrays) are passed in by
:mod:`~gpulinalg.sparse._superlu_host` or :mod:`~gpulinalg.sparse._engine_cuda`, the two
functions the dispatcher chooses between; the arrays' module is found from the arrays.

A *factor* is an engine object (:class:`~gpulinalg.sparse._superlu_host.SuperLUFactor`,
:class:`~gpulinalg.sparse._cudss_cuda.CuDSSFactor`,
:class:`~gpulinalg.sparse._cusolversp_cuda.CuSolverSpFactor`) with ``m`` (the CSR matrix where
the factor lives), ``anorm``, ``method``, ``reordering``, ``timings``, ``factor_nnz``,
``perturbed``, ``solve_raw(b)``, ``refactor(data)``, ``slogdet()``, ``matrix()`` and ``free()``;
optionally ``native_trans`` (``solve_raw(b, trans)`` solves with ``Aᵀ``/``Aᴴ`` itself) and
``pivot_ratio`` (smallest over largest pivot magnitude, where the engine holds the pivots).

Solves with ``Aᵀ`` or ``Aᴴ`` (:func:`solve_op`): SuperLU solves them natively; a symmetric
(Hermitian) factorization (Cholesky, LDLᵀ) uses ``Aᴴ = A`` and ``Aᵀ = conj(A)``; a GPU LU (or
QR) factorizes ``Aᵀ`` on the first such solve, with the same engine, keeps it next to the
factor, and refactorizes it with the factor's new values on the first such solve after a
refactorization.
"""

from __future__ import annotations

import math

import numpy as np

from .._runtime.dispatch import note
from .._runtime.errors import NotPositiveDefiniteError, SingularMatrixError
from ._condition_xp import GROWTH_TRIGGER, assess, norm1, rcond_of, triggered
from ._input_xp import CSRInput, check_values, pattern_values, structure, xp_of
from ._policy import default_tol
from ._residual_xp import solve_checked
from ._results import ResidualError, describe

__all__ = ["resolve_method", "build", "checked_slogdet", "checked_solve", "factorize_with",
           "solve_once_with", "solve_columns", "refactorize", "solve_op", "transposed", "release",
           "rcond", "parity", "SYMMETRIC_METHODS"]

#: methods whose factorization is of a symmetric (Hermitian for complex) matrix: A = Aᴴ
SYMMETRIC_METHODS = ("cholesky", "ldlt")


def parity(perm):
    """+1 or -1: the sign of permutation ``perm`` (a host integer array), from its cycles."""
    n = len(perm)
    seen = [False] * n
    cycles = 0
    for i in range(n):
        if not seen[i]:
            cycles += 1
            j = i
            while not seen[j]:
                seen[j] = True
                j = int(perm[j])
    return -1 if (n - cycles) % 2 else 1


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
    cols = xp.zeros(n, dtype=bool)
    cols[m.indices] = True  # (CuPy's bincount swallows an out-of-memory error of its CUB path)
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


def transposed(factor):
    """A factorization of ``Aᵀ`` by ``factor``'s engine, made on first use and kept on
    ``factor`` (its values follow ``factor``'s refactorizations)."""
    m = factor.m
    kept = getattr(factor, "transpose_factor", None)
    version = getattr(factor, "values_version", 0)
    if kept is None:
        xp = xp_of(m.data)
        tag = type(m)((xp.arange(1, m.nnz + 1, dtype=xp.float64), m.indices, m.indptr),
                      shape=m.shape)
        tt = tag.T.tocsr()
        tt.sort_indices()
        gather = tt.data.astype(xp.int64) - 1
        t = type(factor)(tt.indptr, tt.indices, m.data[gather], factor.n, factor.method)
        kept = factor.transpose_factor = [t, gather, version]
    elif kept[2] != version:
        kept[0].refactor(m.data[kept[1]])
        kept[2] = version
    return kept[0]


def solve_op(factor, b, trans="N"):
    """Solve ``op(A) x = b`` with ``factor``: ``op`` is ``A`` (``"N"``), ``Aᵀ`` (``"T"``) or
    ``Aᴴ`` (``"H"``); ``b`` of shape (n,) or (n, k) in the factor's dtype and package."""
    if trans == "N":
        return factor.solve_raw(b)
    if getattr(factor, "native_trans", False):
        return factor.solve_raw(b, trans)
    if factor.method in SYMMETRIC_METHODS:
        if trans == "H" or factor.dtype.kind != "c":
            return factor.solve_raw(b)
        return factor.solve_raw(b.conj()).conj()  # Aᵀ = conj(A) for Hermitian A
    t = transposed(factor)
    if trans == "T" or factor.dtype.kind != "c":
        return t.solve_raw(b)
    return t.solve_raw(b.conj()).conj()  # Aᴴ x = b  <=>  Aᵀ conj(x) = conj(b)


def rcond(factor):
    """Estimated reciprocal 1-norm condition number of ``factor``'s matrix (kept until the
    next refactorization; see :mod:`~gpulinalg.sparse._condition_xp`)."""
    return rcond_of(factor, lambda v: solve_op(factor, v),
                    lambda v: solve_op(factor, v, "H"))


def checked_slogdet(factor, sign, logabs):
    """``(sign, logabsdet)`` of ``factor``, or ``(0, -inf)`` when the condition rule finds it
    numerically singular: a pivot of rounding size gives a finite log-determinant that means
    nothing (the rcond estimate runs only when the pivots point at trouble). A determinant
    the engine took from a host LU (``logdet_from_host``) was checked on that LU."""
    if math.isinf(logabs) or getattr(factor, "logdet_from_host", None):
        return sign, logabs
    if not triggered(None, getattr(factor, "pivot_ratio", None) or 0.0, factor.dtype):
        return sign, logabs
    value = rcond(factor)
    note(rcond=value)
    limit = max(float(np.finfo(np.dtype(factor.dtype)).eps), getattr(factor, "rcond_floor", None)
                or 0.0)
    return (sign * 0, float("-inf")) if value < limit else (sign, logabs)


def _op_matrix(factor, trans):
    """``(op(A), ||op(A)||_inf)`` for the residual of a solve with ``op(A)``."""
    m = factor.m
    if trans == "N":
        return m, factor.anorm
    norm = getattr(factor, "anorm1", None)
    if norm is None:
        norm = factor.anorm1 = norm1(m)
    return (m.T if trans == "T" else m.conj().T), norm


def checked_solve(factor, b, *, check, tol, max_steps, what, trans="N"):
    """Solve ``op(A) x = b`` with ``factor`` (``trans`` as :func:`solve_op`), with residual
    check, refinement and the condition rule: ``(x, report)``."""
    tol = default_tol(factor.n, factor.dtype) if tol is None else float(tol)
    xp = xp_of(factor.m.data)
    b = xp.asarray(b)
    if b.dtype.kind == "c" and factor.dtype.kind != "c":
        kw = dict(check=check, tol=tol, max_steps=max_steps, what=what, trans=trans)
        xr, rep = checked_solve(factor, b.real.copy(), **kw)
        xi, rep_i = checked_solve(factor, b.imag.copy(), **kw)
        for key in ("backward_error", "growth"):
            rep[key] = max(rep[key], rep_i[key])
        for key in ("warning", "ill_conditioned"):
            rep[key] = rep.get(key) or rep_i.get(key)
        return xr + 1j * xi, rep
    b = b.astype(factor.dtype, copy=False)
    op, anorm = _op_matrix(factor, trans)
    recheck = _may_recheck(factor)
    try:
        x, report = solve_checked(lambda v: solve_op(factor, v, trans), op, b, anorm, tol=tol,
                                  check=check, max_steps=max_steps, what=what,
                                  perturbed=0 if recheck else factor.perturbed,
                                  pivot_eps=getattr(factor, "pivot_eps", None))
    except ResidualError:  # a perturbed factor that refinement cannot bring to tol: the host
        if not recheck or max_steps == 0:  # decides; refine=0 asked for the raw answer's check
            raise
        return _host_recheck(factor, b, xp, check=check, tol=tol, max_steps=max_steps,
                             what=what, trans=trans, growth=math.inf)
    if recheck and report["growth"] >= _recheck_growth(factor):
        return _host_recheck(factor, b, xp, check=check, tol=tol, max_steps=max_steps,
                             what=what, trans=trans, growth=report["growth"])
    message = assess(factor, report["growth"], check, what, lambda v: solve_op(factor, v),
                     lambda v: solve_op(factor, v, "H"))
    if message:
        report["ill_conditioned"] = message
    note(**describe(factor))
    return x, report


_HOST_LU: list = []  # the host twin maker, handed in by the api (see use_host_lu)


def host_lu():
    """``make(factor, method)``: a host (SuperLU) factorization of a GPU factor's matrix, as
    named by :func:`use_host_lu`."""
    return _HOST_LU[0]


def use_host_lu(make_twin):
    """Name the maker of host twins (``_superlu_host.host_twin``) whose LU re-checks suspicious
    GPU solves; the api, which holds both engines, hands it in, so this module imports neither
    engine."""
    _HOST_LU[:] = [make_twin]


def _may_recheck(factor):
    """Whether a suspicious solve with ``factor`` is re-done on the host: a GPU factor in which
    the engine (cuDSS) replaced pivots by its threshold, so that it is the factor of a nearby
    matrix and cannot tell a zero pivot from a small, genuine one (docs/sparse.md)."""
    return bool(factor.perturbed) and factor.device != "cpu" and bool(
        getattr(factor, "pivot_eps", None))


def _recheck_growth(factor):
    """Growth ``||A|| ||x|| / ||b||`` from which a perturbed GPU factor's solve is re-done on
    the host: the rcond estimate's trigger, or the perturbed-pivot singularity limit
    ``0.01 / pivot_eps`` where that is lower (float32)."""
    root = math.sqrt(float(np.finfo(factor.dtype).eps))
    return min(GROWTH_TRIGGER / root, 0.01 / factor.pivot_eps)


def _host_recheck(factor, b, xp, *, check, tol, max_steps, what, trans, growth):
    """Solve again with SuperLU LU (partial pivoting, no perturbed pivots) on a host copy of
    the matrix, and apply the CPU rule: a zero pivot raises, rcond below eps raises or warns;
    the answer goes back to the device. The host factor is kept with ``factor`` until it is
    refactorized or freed."""
    from .._runtime.arrays import to_host
    twin = getattr(factor, "recheck_twin", None)
    if twin is None:
        twin = host_lu()(factor, "lu")
        factor.recheck_twin = twin
    reason = (f"{factor.perturbed} pivot(s) perturbed by {factor.backend} and "
              f"||A|| ||x|| / ||b|| = {growth:.3g}")
    note(host_recheck=reason)
    x, report = checked_solve(twin, to_host(b), check=check, tol=tol, max_steps=max_steps,
                              what=what, trans=trans)
    report["host_recheck"] = reason
    note(**describe(factor), host_recheck=reason, solve_library=twin.backend)
    return xp.asarray(x), report


def release(factor):
    """Free ``factor`` and the ``Aᵀ`` factorization kept with it, if any."""
    twin = getattr(factor, "recheck_twin", None)
    if twin is not None:
        twin.free()
        factor.recheck_twin = None
    kept = getattr(factor, "transpose_factor", None)
    if kept is not None:
        kept[0].free()
        factor.transpose_factor = None
    factor.free()


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
        release(factor)
    assert report is not None  # at least one block of columns was solved
    report["method_fallback"] = why
    return x, report


#: bytes of dense right-hand-side columns :func:`solve_columns` makes at once
COLUMN_BLOCK_BYTES = 1 << 28


def solve_columns(factorize, indptr, indices, data, b_indptr, b_indices, b_data, *, n, k,
                  method, check, tol, max_steps):
    """Solve ``A X = B`` for a sparse ``B`` of ``k`` columns (canonical CSC arrays) with one
    factorization by the engine's ``factorize``, densifying ``B`` a block of columns at a time
    (``scipy.sparse.linalg.spsolve`` solves column by column): ``(rows, cols, values, report)``
    of the nonzeros of ``X`` and the worst block's report."""
    xp = xp_of(data)
    factor, why = factorize(indptr, indices, data, n=n, method=method)
    width = max(1, min(k, COLUMN_BLOCK_BYTES // max(1, n * factor.dtype.itemsize)))
    rows: list = []
    cols: list = []
    vals: list = []
    report: dict | None = None
    try:
        for j0 in range(0, k, width):
            j1 = min(k, j0 + width)
            lo, hi = int(b_indptr[j0]), int(b_indptr[j1])
            block = xp.zeros((n, j1 - j0), dtype=factor.dtype)
            at = xp.searchsorted(b_indptr[j0 + 1:j1 + 1], xp.arange(lo, hi), side="right")
            block[b_indices[lo:hi], at] = b_data[lo:hi]
            x, rep = checked_solve(factor, block, check=check, tol=tol, max_steps=max_steps,
                                   what=f"sparse.spsolve ({factor.method})")
            r, c = xp.nonzero(x)
            rows.append(r)
            cols.append(c + j0)
            vals.append(x[r, c])
            if report is None or rep["backward_error"] > report["backward_error"]:
                seen: dict = report or {}
                report = {**rep, "warning": seen.get("warning") or rep.get("warning"),
                          "ill_conditioned": seen.get("ill_conditioned")
                          or rep.get("ill_conditioned")}
    finally:
        release(factor)
    assert report is not None  # at least one block of columns was solved
    report["method_fallback"] = why
    return xp.concatenate(rows), xp.concatenate(cols), xp.concatenate(vals), report


def refactorize(factor, values):
    """Factorize ``values`` (see :meth:`SparseFactorization.refactorize
    <gpulinalg.sparse.SparseFactorization.refactorize>`) on ``factor``'s pattern, in place."""
    m = factor.m
    csr = CSRInput(m.indptr, m.indices, m.data, factor.n, factor.dest, factor.input_nnz)
    data = pattern_values(csr, values)
    check_values(data, "values")
    factor.values_version = getattr(factor, "values_version", 0) + 1
    factor.rcond_estimate = factor.anorm1 = None
    if getattr(factor, "recheck_twin", None) is not None:  # of the old values
        factor.recheck_twin.free()
        factor.recheck_twin = None
    factor.refactor(data.astype(factor.dtype, copy=False))
    note(**describe(factor))
