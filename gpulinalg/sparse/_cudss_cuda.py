"""GPU backend: cuDSS through ``nvmath.sparse.advanced.DirectSolver``.

One :class:`CuDSSFactor` holds one ``DirectSolver``: the analysis (reordering + symbolic
factorization, cuDSS's CPU-heavy phase) runs once in ``plan()``; ``refactor`` writes new values
into the device CSR buffer the solver references and runs the numerical factorization only;
solves reuse the factors for any number of right-hand sides.

cuDSS's analysis is multi-threaded only when it is given its threading layer,
``libcudss_mtlayer_gomp.so.0``. :func:`mtlayer_path` finds it: ``$GPULINALG_CUDSS_MTLAYER``,
then ``$CUDSS_THREADING_LIB``, then next to the ``libcudss.so.0`` the process loaded (the
nvidia wheel's ``lib`` folder), then in the nvidia wheels on ``sys.path``.

cuDSS handles are cached per (thread, device, value type): creating one costs time a one-shot
solve should not pay, and cuDSS does not support reusing a handle across value types
(CUDSS-1019). The threading layer is set once, when the handle is made.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import logging
import os
import sys
import threading
import time
import weakref
from typing import Any

import numpy as np

from .._runtime.errors import NotPositiveDefiniteError, SingularMatrixError
from ._csr_cuda import device_csr
from ._factor_xp import parity
from ._residual_xp import norm_inf
from ._results import new_timings

__all__ = ["CuDSSFactor", "available", "mtlayer_path", "REORDERINGS"]

MTLAYER = "libcudss_mtlayer_gomp.so.0"

#: reordering name -> cuDSS ``REORDERING_ALG`` value (0: cuDSS's default nested dissection).
REORDERINGS = {"default": 0, "btf_colamd": 1, "colamd": 2, "amd": 3}

#: cuDSS's pivot epsilon for LU/LDLᵀ, in units of the dtype's eps (cuDSS's fp64 default ~1e-13)
PIVOT_EPS_ULPS = 500

#: with perturbed pivots, rcond below this many pivot_eps is numerically singular
RCOND_FLOOR_PIVOTS = 100

#: LU/LDLᵀ pivots larger than this times ||A||_inf mean element growth: their log-determinant
#: is then taken from SuperLU on the host (cuDSS pivots only within supernodes)
PIVOT_GROWTH_LIMIT = 1e3

#: (method, complex) -> cuDSS matrix type name
MATRIX_TYPES = {
    ("cholesky", False): "SPD", ("cholesky", True): "HPD",
    ("ldlt", False): "SYMMETRIC", ("ldlt", True): "HERMITIAN",
    ("lu", False): "GENERAL", ("lu", True): "GENERAL",
}

# nvmath logs every phase and warns about choices made on purpose here; keep that quiet.
_nvmath_log = logging.getLogger("gpulinalg.sparse.nvmath")
_nvmath_log.setLevel(logging.ERROR)


@functools.lru_cache(maxsize=1)
def available():
    """Whether cuDSS and nvmath's DirectSolver can be loaded (probed once per process)."""
    try:
        from nvmath.bindings import cudss
        from nvmath.sparse.advanced import DirectSolver  # noqa: F401
        handle = cudss.create()
        cudss.destroy(handle)
        return True
    except Exception:  # ImportError, a missing libcudss, or a driver problem: cuDSS unusable
        return False


def _loaded_dirs():
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libcudss.so" in line}
    except OSError:
        paths = set()
    yield from sorted({os.path.dirname(p) for p in paths})
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        yield os.path.dirname(load_nvidia_dynamic_lib("cudss").abs_path)
    except Exception:  # pathfinder absent or cuDSS not found by it
        pass
    for entry in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cu12/lib", "nvidia/cudss/lib"):
            yield os.path.join(entry, sub)


@functools.lru_cache(maxsize=1)
def mtlayer_path():
    """Path of cuDSS's GNU OpenMP threading layer, or ``None`` (analysis then single-threaded)."""
    for var in ("GPULINALG_CUDSS_MTLAYER", "CUDSS_THREADING_LIB"):
        path = os.environ.get(var)
        if path:
            return path if os.path.isfile(path) else None
    for d in _loaded_dirs():
        path = os.path.join(d, MTLAYER)
        if os.path.isfile(path):
            try:  # keep libgomp loaded for the process (cuDSS release notes, CUDSS-1079)
                ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass
            return path
    return None


class _Handles:
    """The calling thread's cuDSS handles, destroyed when the thread's locals go."""

    def __init__(self):
        self.handles: dict = {}
        weakref.finalize(self, _destroy_handles, self.handles)


_local = threading.local()
_all_handles: list[dict] = []  # every thread's dict, for atexit
_all_lock = threading.Lock()


def _destroy_handles(handles):
    from nvmath.bindings import cudss
    for handle, _mt in list(handles.values()):
        try:
            cudss.destroy(handle)
        except Exception:  # interpreter shutdown or a dead context: nothing left to free
            pass
    handles.clear()


@atexit.register
def _destroy_all():
    with _all_lock:
        for handles in _all_handles:
            _destroy_handles(handles)


def handle_for(dtype):
    """``(handle, multithreaded)``: the thread's cuDSS handle for this device and value type."""
    import cupy
    from nvmath.bindings import cudss
    res = getattr(_local, "res", None)
    if res is None:
        res = _local.res = _Handles()
        with _all_lock:
            _all_handles.append(res.handles)
    key = (int(cupy.cuda.runtime.getDevice()), np.dtype(dtype).str)
    entry = res.handles.get(key)
    if entry is None:
        handle = cudss.create()
        mt = mtlayer_path()
        if mt is not None:
            cudss.set_threading_layer(handle, mt)
        entry = res.handles[key] = (handle, mt is not None)
    return entry


def _release(solver):
    try:
        solver.free()
    except Exception:  # interpreter shutdown or a dead context: nothing left to free
        pass


def _data_get(solver, param, dtype, length=1):
    """Read a cuDSS data parameter into a fresh host array (thread-safe, unlike nvmath's)."""
    from nvmath.bindings import cudss
    out = np.zeros(length, dtype=dtype)
    written = np.zeros(1, dtype=np.uint64)
    cudss.data_get(solver.handle, solver.data_ptr, int(param), out.ctypes.data, out.nbytes,
                   written.ctypes.data)
    return out


def _as_memory_error(exc):
    """cuDSS's ALLOC_FAILED is an out-of-memory: make the dispatcher see a MemoryError."""
    from nvmath.bindings import cudss
    status = getattr(exc, "status", None)
    if isinstance(exc, cudss.cuDSSError) and status == cudss.Status.ALLOC_FAILED:
        return MemoryError(f"cuDSS could not allocate device memory ({exc})")
    return None


class CuDSSFactor:
    """A cuDSS factorization of one canonical CSR matrix (CuPy arrays, current device)."""

    backend = "cudss"
    solver: Any  # nvmath's DirectSolver; None once released
    #: cuDSS before 1.0 has no transposed solve: :func:`~._factor_xp.solve_op` factors Aᵀ
    native_trans = False

    def __init__(self, indptr, indices, data, n, method, *, reordering=None):
        self.n, self.method = int(n), method
        self.m, self.device, self.reordering = device_csr(
            indptr, indices, data, n, reordering, REORDERINGS, "default", "cuDSS")
        self.dtype = np.dtype(self.m.dtype)
        self.matrix_type = MATRIX_TYPES[(method, self.dtype.kind == "c")]
        self.timings = new_timings()
        self.perturbed, self.solver, self.multithreaded = 0, None, False
        #: smallest/largest |pivot| (LU, LDLᵀ; not read for Cholesky, which fails instead)
        self.pivot_ratio = self.rcond_floor = None
        #: why the last slogdet came from a host LU (checked there), or None
        self.logdet_from_host = None
        self._per_column, self._factor_nnz = False, None
        #: cuDSS replaces pivots below this times ||A||_inf: 500 eps (1.1e-13 in fp64)
        self.pivot_eps = float(PIVOT_EPS_ULPS * np.finfo(self.dtype).eps)
        try:
            self._plan()
            self._factor()
        except Exception as exc:
            self.free()
            mem = _as_memory_error(exc)
            if mem is not None:
                raise mem from exc
            raise

    def _plan(self):
        import cupy
        from nvmath.bindings import cudss
        from nvmath.sparse.advanced import DirectSolver, DirectSolverOptions
        stream = cupy.cuda.get_current_stream()
        t0 = time.perf_counter()
        handle, self.multithreaded = handle_for(self.dtype)
        options = DirectSolverOptions(
            sparse_system_type=getattr(cudss.MatrixType, self.matrix_type),
            handle=handle, logger=_nvmath_log)
        self._dummy_b = cupy.zeros(self.n, dtype=self.dtype)
        self.solver = DirectSolver(self.m, self._dummy_b, options=options, stream=stream)
        # factors left to the garbage collector still release their device memory
        self._finalizer = weakref.finalize(self, _release, self.solver)
        self.solver.plan_config.reordering_algorithm = REORDERINGS[self.reordering]
        self.solver.plan(stream=stream)
        stream.synchronize()
        self.timings["analysis_seconds"] = time.perf_counter() - t0

    def _factor(self):
        import cupy
        from nvmath.bindings import cudss
        stream = cupy.cuda.get_current_stream()
        t0 = time.perf_counter()
        self.anorm = norm_inf(self.m)
        if self.method != "cholesky":  # relative to ||A||, so scaling A does not change it
            self.solver.factorization_config.pivot_eps = self.pivot_eps * max(self.anorm, 1e-300)
        self.solver.factorize(stream=stream)
        info = int(_data_get(self.solver, cudss.DataParam.INFO,
                             cudss.get_data_param_dtype(cudss.DataParam.INFO))[0])
        self.timings["factorization_seconds"] = time.perf_counter() - t0
        if info != 0 and self.method == "cholesky":
            raise NotPositiveDefiniteError(
                max(info, 1), message=f"sparse cholesky: the matrix is not positive definite "
                                      f"(cuDSS factorization info = {info})")
        if info != 0:
            raise SingularMatrixError(f"sparse {self.method}: cuDSS factorization failed "
                                      f"(info = {info}): the matrix is singular")
        if self.method != "cholesky":
            self.perturbed = self._tiny_pivots()
            # a perturbed factor cannot show an rcond far below pivot_eps (docs/sparse.md)
            self.rcond_floor = RCOND_FLOOR_PIVOTS * self.pivot_eps if self.perturbed else None

    def _tiny_pivots(self):
        """Pivots at cuDSS's perturbation threshold (``pivot_eps * ||A||_inf``); also keeps
        the smallest/largest pivot magnitude for the condition rule (the diagonal is read
        here anyway)."""
        from nvmath.bindings import cudss
        d = abs(_data_get(self.solver, cudss.DataParam.DIAG, self.dtype, self.n))
        top = float(d.max()) if d.size else 0.0
        self.pivot_ratio = float(d.min()) / top if top > 0 else 0.0
        return int((d <= 10.0 * self.pivot_eps * self.anorm).sum())

    @property
    def factor_nnz(self):
        """Entries in the factors (fixed by the analysis: read once)."""
        if self._factor_nnz is None:
            from nvmath.bindings import cudss
            dt = cudss.get_data_param_dtype(cudss.DataParam.LU_NNZ)
            self._factor_nnz = int(_data_get(self.solver, cudss.DataParam.LU_NNZ, dt)[0])
        return self._factor_nnz

    def solve_raw(self, b):
        """Solve with the factors for ``b`` of shape (n,) or (n, k), any k."""
        import cupy
        from nvmath.bindings import cudss
        stream = cupy.cuda.get_current_stream()
        t0 = time.perf_counter()
        bf = cupy.asfortranarray(b.astype(self.dtype, copy=False))
        x = cupy.empty_like(bf, order="F")
        k = 1 if b.ndim == 1 else b.shape[1]
        if k == 1 or not self._per_column:
            try:
                self._execute_solve(stream, bf, x, k)
            except cudss.cuDSSError as exc:  # a cuDSS that wants the analysis' column count
                if k == 1 or exc.status not in (cudss.Status.INVALID_VALUE,
                                                cudss.Status.NOT_SUPPORTED):
                    raise
                self._per_column = True
        if k > 1 and self._per_column:
            for j in range(k):
                self._execute_solve(stream, bf[:, j], x[:, j], 1)
        stream.synchronize()
        self.timings["solve_seconds"] = time.perf_counter() - t0
        return x

    def _execute_solve(self, stream, bf, x, k):
        from nvmath.bindings import cudss
        vt = self.solver.cuda_value_type
        bd = cudss.matrix_create_dn(self.n, k, self.n, bf.data.ptr, vt, cudss.Layout.COL_MAJOR)
        try:
            xd = cudss.matrix_create_dn(self.n, k, self.n, x.data.ptr, vt,
                                        cudss.Layout.COL_MAJOR)
            try:
                cudss.set_stream(self.solver.handle, stream.ptr)
                cudss.execute(self.solver.handle, cudss.Phase.SOLVE, self.solver.config_ptr,
                              self.solver.data_ptr, self.solver.a_ptr, xd, bd)
            finally:
                cudss.matrix_destroy(xd)
        finally:
            cudss.matrix_destroy(bd)

    def refactor(self, data):
        self.m.data[...] = data
        try:
            self._factor()
        except Exception as exc:
            mem = _as_memory_error(exc)
            if mem is not None:
                raise mem from exc
            raise

    def slogdet(self):
        """(sign, log|det|) from the factor diagonal: L's for Cholesky, D's for LDLᵀ, U's for
        LU with the parities of cuDSS's final row and column permutations (sign ``None`` when
        cuDSS does not report them)."""
        from nvmath.bindings import cudss
        d = _data_get(self.solver, cudss.DataParam.DIAG, self.dtype, self.n)
        if self.method == "cholesky":
            return 1.0, float(2.0 * np.log(abs(d)).sum())
        untrusted = self.logdet_from_host = self._untrusted_diagonal(d)
        if untrusted:
            return self._host_slogdet(untrusted)
        if d.size and not d.all():
            return (0j if self.dtype.kind == "c" else 0.0), -np.inf
        if self.method == "ldlt":
            dr = d.real if self.dtype.kind == "c" else d
            return float(np.prod(np.sign(dr))), float(np.log(abs(dr)).sum())
        absd = abs(d)
        perm_sign = self._permutation_sign()
        if perm_sign is None:  # the caller takes the sign from a host factorization
            return None, float(np.log(absd).sum())
        phase = np.prod(d / absd) * perm_sign
        sign = complex(phase) if self.dtype.kind == "c" else float(np.sign(phase.real))
        return sign, float(np.log(absd).sum())

    def _untrusted_diagonal(self, d):
        """Why the LU/LDLᵀ diagonal ``d`` cannot give the determinant, or ``None``.

        cuDSS pivots only within a supernode and replaces a pivot below its threshold by the
        threshold: such a factor is of a nearby matrix, and the element growth a replaced zero
        pivot causes ruins the later pivots (the GPU runs of issue 14: 585.36 for 65.61). The
        solves survive this through refinement; a determinant has no refinement. So the
        diagonal is used only when no pivot was perturbed and no pivot exceeds
        ``PIVOT_GROWTH_LIMIT * ||A||_inf``."""
        if self.perturbed:
            return f"{self.perturbed} pivot(s) perturbed by cuDSS"
        top = float(abs(d).max()) if d.size else 0.0
        if top > PIVOT_GROWTH_LIMIT * self.anorm:
            return f"pivot growth: max |pivot| / ||A||_inf = {top / self.anorm:.3g}"
        return None

    def _host_slogdet(self, reason):
        """``(sign, log|det|)`` from SuperLU's LU (partial pivoting) of a host copy of the
        matrix, noted as ``last_run().details["logdet"] = "superlu"``."""
        from .._runtime.dispatch import note
        from ._factor_xp import checked_slogdet, host_lu
        host = host_lu()(self, "lu")
        try:  # the condition rule on the host LU: this factor's solves are of a nearby matrix
            sign, logabs = checked_slogdet(host, *host.slogdet())
        finally:
            host.free()
        note(logdet="superlu", logdet_reason=reason)
        return sign, logabs

    def _permutation_sign(self):
        """``sign(P_row) sign(P_col)`` of the factorization ``P_row A P_col = L U``, from
        cuDSS's final permutations (reordering and pivoting, ``CUDSS_DATA_PERM_ROW`` /
        ``PERM_COL``); ``None`` where this cuDSS does not report them."""
        from nvmath.bindings import cudss
        signs = 1.0
        for param in (cudss.DataParam.PERM_ROW, cudss.DataParam.PERM_COL):
            try:
                p = _data_get(self.solver, param, np.int32, self.n)
            except cudss.cuDSSError:
                return None
            if not np.array_equal(np.sort(p), np.arange(self.n)):
                return None
            signs *= parity(p)
        return signs

    def matrix(self):
        return self.m.get()

    def free(self):
        if self.solver is not None:
            self._finalizer()
            self.solver = None
