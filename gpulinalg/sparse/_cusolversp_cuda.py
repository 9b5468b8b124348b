"""GPU backend when cuDSS is missing (and for ``method="qr"``): cuSOLVER-Sp.

``cusolverSp<t>csrlsvchol`` (Cholesky) and ``cusolverSp<t>csrlsvqr`` (QR), through
``nvmath.bindings.cusolverSp``, both with METIS nested-dissection reordering (``reorder=3``).
These routines factor and solve in one call for one right-hand side and keep no factor, so a
"factorization" here holds the matrix on the device, checks at creation that it factors
(one probe solve), and factors again for every right-hand side. ``slogdet`` is not available.

Singularity: both routines stop at the first pivot (``R(j,j)`` for QR, ``L(j,j)`` for
Cholesky) whose magnitude is at most ``tol`` and report its index in ``singularity``; ``tol`` is
``sqrt(n) eps ||A||_inf`` (:data:`SINGULAR_TOL_ULPS`), the size of a pivot that is zero up to
rounding. A report raises :class:`~gpulinalg.SingularMatrixError` (``NotPositiveDefiniteError``
for Cholesky). Solves with ``Aᵀ`` / ``Aᴴ`` of a QR factorization run on ``Aᵀ``
(:func:`~gpulinalg.sparse._factor_xp.solve_op`).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .._runtime.errors import NotPositiveDefiniteError, SingularMatrixError
from .._runtime.streams import get_handle
from ._csr_cuda import device_csr
from ._residual_xp import norm_inf
from ._results import new_timings

__all__ = ["CuSolverSpFactor", "REORDERINGS", "SINGULAR_TOL_ULPS", "as_memory_error"]

#: dtype -> routine prefix (one table instead of an s/d/c/z chain)
PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
          np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
#: reordering name -> cuSOLVER-Sp ``reorder`` argument
REORDERINGS = {"none": 0, "symrcm": 1, "symamd": 2, "metis": 3}
#: singularity threshold ``tol`` in units of ``sqrt(n) eps ||A||_inf``
SINGULAR_TOL_ULPS = 1.0

#: cuSOLVER-Sp's one-call solvers run one at a time per process. Called from several threads at
#: once (a handle and a stream each), their results differ from a lone call's in the last bits
#: (measured on an H200: 6 to 12 of 48 concurrent solves of a 500x500 tridiagonal system, for
#: every method; cuDSS's do not), so calls are serialized: gpulinalg promises the same bits on
#: any number of threads. cuDSS, the default library when installed, runs concurrently.
_SERIAL = threading.Lock()


def as_memory_error(exc):
    """cuSOLVER-Sp's ``ALLOC_FAILED`` (its workspace allocated inside the call) as the
    ``MemoryError`` the dispatcher falls back to the CPU on, visibly; ``None`` for anything
    else (an ``INTERNAL_ERROR`` is not taken for one: it says nothing about memory)."""
    from nvmath.bindings import cusolver
    if isinstance(exc, cusolver.cuSOLVERError) and \
            getattr(exc, "status", None) == cusolver.Status.ALLOC_FAILED:
        return MemoryError(f"cuSOLVER-Sp could not allocate device memory ({exc})")
    return None


class CuSolverSpFactor:
    """cuSOLVER-Sp one-call solves over one canonical CSR matrix (CuPy arrays)."""

    backend = "cusolversp"
    #: the one-call routines solve with A only: :func:`~._factor_xp.solve_op` uses Aᵀ
    native_trans = False

    def __init__(self, indptr, indices, data, n, method, *, reordering=None):
        from nvmath.bindings import cusolverSp, cusparse
        self.n, self.method = int(n), method
        self.m, self.device, self.reordering = device_csr(
            indptr, indices, data, n, reordering, REORDERINGS, "metis", "cuSOLVER-Sp")
        self.dtype = np.dtype(self.m.dtype)
        kind = "chol" if method == "cholesky" else "qr"
        self._fn = getattr(cusolverSp, f"{PREFIX[self.dtype]}csrlsv{kind}")
        self.matrix_type = f"csrlsv{kind}"
        self._descr = cusparse.create_mat_descr()
        self.timings = new_timings()
        self.perturbed = 0
        try:
            self._factor()
        except Exception:
            self.free()
            raise

    def _factor(self):
        import cupy
        t0 = time.perf_counter()
        self.anorm = norm_inf(self.m)
        self.solve_raw(self.m @ cupy.ones(self.n, dtype=self.dtype))  # raises if it cannot
        self.timings["factorization_seconds"] = time.perf_counter() - t0

    @property
    def factor_nnz(self):
        return None  # cuSOLVER-Sp does not report it

    def solve_raw(self, b):
        import cupy
        from nvmath.bindings import cusolverSp
        t0 = time.perf_counter()
        handle = get_handle("cusolverSp")
        stream = cupy.cuda.get_current_stream()
        cusolverSp.set_stream(handle, stream.ptr)
        bf = cupy.asfortranarray(b.astype(self.dtype, copy=False).reshape(self.n, -1))
        x = cupy.empty_like(bf, order="F")
        tol = float(SINGULAR_TOL_ULPS * np.sqrt(self.n) * np.finfo(self.dtype).eps
                    * max(self.anorm, 1e-300))
        sing = np.full(1, -1, dtype=np.int32)
        m = self.m
        with _SERIAL:
            try:
                self._solve_columns(handle, bf, x, tol, sing, m)
            except Exception as exc:
                mem = as_memory_error(exc)
                if mem is not None:
                    raise mem from exc
                raise
        self.timings["solve_seconds"] = time.perf_counter() - t0
        return x.reshape(b.shape) if b.ndim == 1 else x

    def _solve_columns(self, handle, bf, x, tol, sing, m):
        for j in range(bf.shape[1]):
            self._fn(handle, self.n, m.nnz, self._descr, m.data.data.ptr, m.indptr.data.ptr,
                     m.indices.data.ptr, bf[:, j].data.ptr, tol, REORDERINGS[self.reordering],
                     x[:, j].data.ptr, sing.ctypes.data)
            if sing[0] >= 0:
                self._raise(int(sing[0]))

    def _raise(self, k):
        if self.method == "cholesky":
            raise NotPositiveDefiniteError(
                k + 1, message=f"sparse cholesky: the matrix is not positive definite "
                               f"(cuSOLVER-Sp csrlsvchol: singularity at row {k})")
        raise SingularMatrixError(f"sparse {self.method}: the matrix is singular "
                                  f"(cuSOLVER-Sp csrlsvqr: singularity at row {k})")

    def refactor(self, data):
        self.m.data[...] = data
        self._factor()

    def slogdet(self):
        raise NotImplementedError("logdet() needs the factors, which cuSOLVER-Sp does not keep; "
                                  "install cuDSS (nvidia-cudss) or use backend='cpu'")

    def matrix(self):
        return self.m.get()

    def free(self):
        if self._descr is not None:
            from nvmath.bindings import cusparse
            cusparse.destroy_mat_descr(self._descr)
            self._descr = None
