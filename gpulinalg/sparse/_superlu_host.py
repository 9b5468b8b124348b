"""CPU backend: SciPy's SuperLU (``scipy.sparse.linalg.splu``), factors kept for reuse.

Per method (one table, ``SUPERLU_OPTIONS``):

* ``cholesky`` and ``ldlt``: ``COLAMD`` ordering (``spsolve``'s), diagonal pivots only
  (``diag_pivot_thresh=0``; an off-diagonal pivot is taken only for an exact zero), so rows are
  permuted as the columns: a symmetric permutation ``P A Pᵀ``. For a symmetric matrix this is
  an LDLᵀ factorization stored as LU; for ``cholesky`` every pivot must be positive and no row
  may have been swapped, otherwise the matrix is not positive definite. (SuperLU's
  ``MMD_AT_PLUS_A`` with ``SymmetricMode`` is 2× faster on 3-D grids but up to 6× slower on
  unstructured 2-D meshes, so it is an option, ``reordering="MMD_AT_PLUS_A"``, not the
  default: without a GPU a call must cost what ``spsolve`` costs.)
* ``lu`` and ``qr``: ``COLAMD`` ordering with partial pivoting (SciPy has no sparse QR; on a
  square system LU with partial pivoting solves the same equations).

``refactor`` reuses the fill-reducing ordering, which depends on the pattern only: the new values
are gathered straight into the matrix permuted by the first factorization's column order
(rows too, for the symmetric methods) and factored with ``permc_spec="NATURAL"`` — the same
factor, without SuperLU ordering the matrix again (a quarter of the time on a 2-D Poisson matrix
of order 490 000).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

from .._runtime.arrays import to_host
from .._runtime.errors import NotPositiveDefiniteError, OutOfMemoryError, SingularMatrixError
from ._factor_xp import factorize_with, parity, solve_once_with
from ._input_xp import wrap_csr
from ._residual_xp import norm_inf
from ._results import new_timings

__all__ = ["SuperLUFactor", "SUPERLU_OPTIONS", "EmptyFactor", "csr_matrix", "factorize",
           "solve_once", "host_twin", "host_superlu", "triangular_solve", "matrix_rank_warning",
           "sparse_efficiency_warning", "csc_of_dense", "sparse_result"]

#: method -> (permc_spec, diag_pivot_thresh, SymmetricMode)
SUPERLU_OPTIONS = {
    "cholesky": ("COLAMD", 0.0, False),
    "ldlt": ("COLAMD", 0.0, False),
    "lu": ("COLAMD", 1.0, False),
    "qr": ("COLAMD", 1.0, False),
}


def csr_matrix(indptr, indices, data, n):
    """A ``scipy.sparse.csr_matrix`` over the given canonical NumPy arrays (no copy)."""
    import scipy.sparse
    return wrap_csr(scipy.sparse, indptr, indices, data, n)


class SuperLUFactor:
    """A SuperLU factorization of one canonical CSR matrix (NumPy arrays)."""

    backend = "superlu"
    lu: Any  # SciPy's SuperLU object once factored
    dest: Any = None  # the caller's output array (factors made by factorize())
    input_nnz: Any = None
    device = "cpu"

    def __init__(self, indptr, indices, data, n, method, *, reordering=None, superlu=None):
        self.n, self.method = int(n), method
        self._superlu = dict(superlu or {})  # splu's keywords, over the method's (scipy names)
        self.m = csr_matrix(indptr, indices, np.array(data, copy=True), self.n)
        self.dtype = self.m.dtype
        spec, self._thresh, self._symmetric = SUPERLU_OPTIONS[method]
        self.reordering = reordering or spec
        self.timings = new_timings()
        self.perturbed = 0
        self.lu = self._ratio = None
        self._order = None  # (q, permuted pattern, gather index): set by the first refactor
        self._q = None  # the permutation the current factor was made under, if any
        self._factor()

    @property
    def _symmetric_pivots(self):
        return self.method in ("cholesky", "ldlt")

    def _reordered(self):
        """The matrix permuted by the first factorization's order (symmetrically for the
        symmetric methods), new values gathered into a pattern worked out once."""
        import scipy.sparse as sp
        if self._order is None:
            q = np.argsort(self.lu.perm_c)  # A Pc = A[:, q]
            m = self.m
            tag = sp.csr_matrix((np.arange(1, m.nnz + 1, dtype=np.float64), m.indices,
                                 m.indptr), shape=m.shape)
            tag = (tag[q][:, q] if self._symmetric_pivots else tag[:, q]).tocsr()
            tag.sort_indices()
            self._order = (q, tag.indptr, tag.indices, tag.data.astype(np.int64) - 1)
        q, indptr, indices, gather = self._order
        return q, sp.csr_matrix((self.m.data[gather], indices, indptr), shape=self.m.shape)

    def _factor(self, reuse_order=False):
        import scipy.sparse.linalg as spla
        t0 = time.perf_counter()
        self.anorm = norm_inf(self.m)
        q, m, spec = None, self.m, self.reordering
        if reuse_order and self.lu is not None:
            q, m = self._reordered()
            spec = "NATURAL"
        # a real symmetric matrix's CSR arrays are its CSC arrays: skip the conversion
        symmetric = self._symmetric_pivots and self.dtype.kind != "c"
        csc = m.T if symmetric else m.tocsc()
        extra = {k: v for k, v in self._superlu.items() if v is not None}
        options = {"SymmetricMode": self._symmetric or self.reordering == "MMD_AT_PLUS_A",
                   **extra.pop("options", {})}
        kwargs = {"diag_pivot_thresh": self._thresh, **extra}
        try:
            self.lu = spla.splu(csc, permc_spec=spec, options=options, **kwargs)
        except (MemoryError, SystemError, RuntimeError) as exc:
            raise self._failure(exc) from exc
        self._q = q
        self._udiag = self._ratio = None
        if self.method == "cholesky":
            self._check_positive()
        # SuperLU orders and factors in one call: all of it counts as factorization.
        self.timings["factorization_seconds"] = time.perf_counter() - t0

    def _failure(self, exc):
        """What SciPy's ``splu`` raising ``exc`` means. SuperLU reports running out of memory
        three ways: ``MemoryError`` (gstrf's ``info`` > n), ``SystemError`` "called with invalid
        arguments" (``info`` < 0: the byte count it returns in ``info``, an ``int``, wrapped
        past 2 GiB; our arguments are valid) and ``RuntimeError`` with its own abort text
        ("SUPERLU_MALLOC fails for ..."). Only SciPy's "exactly singular" ``RuntimeError`` is a
        property of the matrix; the text is the one difference SciPy leaves between the two."""
        if isinstance(exc, RuntimeError) and str(exc) == _SUPERLU_SINGULAR:
            return SingularMatrixError(f"sparse {self.method}: the matrix is singular "
                                       f"(SuperLU: {exc})")
        peak = _peak_resident_bytes()
        reached = "" if peak is None else \
            f"; the process's resident memory peaked at {peak} B ({peak / 2 ** 30:.3g} GiB)"
        message = (
            f"sparse {self.method}: SuperLU ran out of host memory factoring the "
            f"{self.n} x {self.n} matrix ({self.m.nnz} stored entries, {self.m.data.nbytes} B of "
            f"values): its fill-in (the L and U factors) did not fit{reached}. The matrix was "
            f"not found singular. Options: a GPU (cuDSS), reordering=\"MMD_AT_PLUS_A\" (less "
            f"fill on 3-D grids), float32, or a smaller problem (SuperLU: "
            f"{type(exc).__name__}: {str(exc) or 'out of memory'})")
        return OutOfMemoryError(message, needed=peak or 0, where="host")  # a lower bound

    def _diagonal(self):
        """Diagonal of U (the pivots), built once per factorization (``lu.U`` costs O(nnz))."""
        if self._udiag is None:
            self._udiag = self.lu.U.diagonal()
        return self._udiag

    def _check_positive(self):
        d = self._diagonal()
        bad = (d.real <= 0) | (self.lu.perm_r != self.lu.perm_c)
        if d.dtype.kind == "c":
            bad |= abs(d.imag) > 1e3 * np.finfo(d.dtype).eps * abs(d.real)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise NotPositiveDefiniteError(
                k + 1, message=f"sparse cholesky: the matrix is not positive definite (pivot "
                               f"{k + 1} of {self.n} in elimination order is {d[k]:.3g})")

    @property
    def factor_nnz(self):
        return int(self.lu.nnz)

    #: SuperLU solves with Aᵀ and Aᴴ itself (``trans``)
    native_trans = True

    @property
    def pivot_ratio(self):
        """Smallest over largest pivot magnitude (U's diagonal), once per factorization."""
        if self._ratio is None:
            d = abs(self._diagonal())
            top = float(d.max()) if d.size else 0.0
            self._ratio = float(d.min()) / top if top > 0 else 0.0
        return self._ratio

    def solve_raw(self, b, trans="N"):
        t0 = time.perf_counter()
        b = np.asarray(b, dtype=self.dtype)
        q = self._q
        if q is None:
            x = self.lu.solve(b, trans=trans)
        elif self._symmetric_pivots:  # factored B = A[q][:, q]: op(A) x = b <=> op(B) x[q] = b[q]
            x = np.empty_like(b)
            x[q] = self.lu.solve(b[q], trans=trans)
        elif trans == "N":  # factored B = A[:, q]: x[q] = B⁻¹ b
            x = np.empty_like(b)
            x[q] = self.lu.solve(b, trans=trans)
        else:  # op(B) = op(A)[q]: op(A) x = b <=> op(B) x = b[q]
            x = self.lu.solve(b[q], trans=trans)
        self.timings["solve_seconds"] = time.perf_counter() - t0
        return x

    def refactor(self, data):
        self.m.data[...] = data
        self._factor(reuse_order=True)

    def slogdet(self):
        d = self._diagonal()
        if d.size and not d.all():
            return (0.0 if d.dtype.kind != "c" else 0j), -np.inf
        absd = abs(d)
        logabs = float(np.log(absd).sum())
        phase = np.prod(d / absd) * parity(self.lu.perm_r) * parity(self.lu.perm_c)
        if self._q is not None and not self._symmetric_pivots:
            phase = phase * parity(self._q)  # det(A[:, q]) = det(A) sign(q)
        sign = complex(phase) if d.dtype.kind == "c" else float(np.sign(phase.real))
        return sign, logabs

    def matrix(self):
        """The factorized matrix as a SciPy CSR matrix (host copy for a CPU twin)."""
        return self.m

    def free(self):
        self.lu = None


#: SciPy's text for SuperLU's zero pivot (``info`` in 1..n), the one failure of a singular matrix
_SUPERLU_SINGULAR = "Factor is exactly singular"


def _peak_resident_bytes():
    """The process's peak resident memory in bytes, ``None`` where ``resource`` is missing."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    import sys
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


def factorize(indptr, indices, data, *, superlu=None, **kwargs):
    """CPU twin of :func:`gpulinalg.sparse._engine_cuda.factorize`; ``superlu``: keywords of
    ``scipy.sparse.linalg.splu`` (``diag_pivot_thresh``, ``relax``, ``panel_size``,
    ``options``) over the method's own (the SciPy names' ``splu``)."""
    cls = functools.partial(SuperLUFactor, superlu=superlu) if superlu else SuperLUFactor
    return factorize_with(cls, csr_matrix, indptr, indices, data, **kwargs)


def host_superlu(indptr, indices, data, *, n, reordering=None, superlu=None):
    """SciPy's ``SuperLU`` object of the matrix (LU, partial pivoting unless ``superlu`` says
    otherwise): the factors ``L``, ``U``, ``perm_r``, ``perm_c`` of a GPU factorization, whose
    engine (cuDSS) does not expose its own."""
    return SuperLUFactor(indptr, indices, data, n, "lu", reordering=reordering,
                         superlu=superlu).lu


def triangular_solve(indptr, indices, data, b, *, n, lower, unit_diagonal):
    """``scipy.sparse.linalg.spsolve_triangular`` of the CSR matrix (SuperLU's ``gstrs``):
    CPU twin of :func:`gpulinalg.sparse._triangular_cuda.triangular_solve`."""
    import scipy.sparse.linalg as spla
    m = csr_matrix(indptr, indices, data, n)
    return spla.spsolve_triangular(m, np.asarray(b).astype(data.dtype, copy=False), lower=lower,
                                   unit_diagonal=unit_diagonal)


def matrix_rank_warning():
    """SciPy's ``MatrixRankWarning`` (what ``spsolve`` warns for an exactly singular matrix)."""
    from scipy.sparse.linalg import MatrixRankWarning
    return MatrixRankWarning


def solve_once(indptr, indices, data, b, **kwargs):
    """CPU twin of :func:`gpulinalg.sparse._engine_cuda.solve_once`."""
    return solve_once_with(SuperLUFactor, csr_matrix, indptr, indices, data, b, **kwargs)


def host_twin(factor, method=None):
    """A SuperLU factorization of a GPU factor's matrix (host copy), where its work moves
    when the GPU runs out of memory; ``method="lu"`` for the partial-pivoting LU that re-checks
    perturbed GPU factors (default: the factor's own method)."""
    m = factor.matrix()
    twin = SuperLUFactor(m.indptr, m.indices, m.data, factor.n, method or factor.method)
    dest = getattr(factor, "dest", None)  # set on factors made by factorize(), not one-shot
    twin.dest = None if dest is None else to_host(dest)
    twin.input_nnz = getattr(factor, "input_nnz", None)
    return twin


class EmptyFactor:
    """The factorization of a 0x0 matrix (nothing to put on any device)."""

    backend, device, reordering, factor_nnz, perturbed, n, anorm = "none", "cpu", None, 0, 0, 0, 0.0

    def __init__(self, dtype, method):
        import scipy.sparse
        self.dtype = np.dtype(dtype)
        self.method = "cholesky" if method == "auto" else method
        self.m = scipy.sparse.csr_matrix((0, 0), dtype=self.dtype)
        self.dest, self.input_nnz = None, 0
        self.timings = new_timings()

    def solve_raw(self, b):
        return np.array(b, dtype=self.dtype)

    def refactor(self, data):
        pass

    def slogdet(self):
        return 1.0, 0.0

    def matrix(self):
        return self.m

    def free(self):
        pass


def sparse_efficiency_warning():
    """SciPy's ``SparseEfficiencyWarning`` (what its solvers warn when they convert ``A``)."""
    from scipy.sparse import SparseEfficiencyWarning
    return SparseEfficiencyWarning


def csc_of_dense(a):
    """A dense matrix (NumPy, or anything ``numpy.asarray`` takes) as a ``csc_array``."""
    import scipy.sparse
    return scipy.sparse.csc_array(to_host(a) if hasattr(a, "shape") else np.asarray(a))


def sparse_result(A, rows, cols, vals, shape):
    """The SciPy sparse matrix of the given entries: ``A``'s class when ``A`` is a SciPy CSR or
    CSC matrix, else ``csc_array`` (``spsolve``'s rule for a sparse right-hand side)."""
    import scipy.sparse
    cls = type(A) if scipy.sparse.issparse(A) and A.format in ("csr", "csc") else \
        scipy.sparse.csc_array
    return cls((vals, (rows, cols)), shape=shape, dtype=vals.dtype)
