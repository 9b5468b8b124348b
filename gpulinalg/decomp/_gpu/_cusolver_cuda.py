"""cuSOLVER glue: one table of routines per dtype, workspaces, ``info`` codes, layouts.

Everything here but :func:`workspace_bytes` runs inside a dispatcher GPU function: arrays are
CuPy arrays and the current CuPy stream is the thread's stream, to which the cuSOLVER handle
from :func:`gpulinalg._runtime.streams.get_handle` is bound. Matrices are column-major
(Fortran order), as cuSOLVER expects. The 64-bit ``X*`` API serves every routine it offers
(geqrf, gesvd, gesvdp, potrf, potrs, syevd, syevdx); ``orgqr``/``ormqr``, ``gesvdj``,
``sygvd``/``sygvdx`` and ``syevjBatched`` exist only in the legacy per-type API, reached
through the same table.
"""

import contextlib
import dataclasses
import functools
import math
import threading
import typing

import numpy as np

from ..._runtime import device as _device
from ..._runtime.kernels import elementwise_kernel
from ..._runtime.errors import LinAlgError
from ._finite_cuda import flag_nonfinite

__all__ = ["ROUTINES", "routines", "fortran_batch", "leading_dimension", "pointer_array",
           "chain_buffers", "fill_pointers", "Solver",
           "workspace_bytes", "JACOBI_BATCHED_MAX"]

#: ``gesvdjBatched`` takes matrices up to 32 x 32 (which stacks take the batched routines at
#: all: the one table of :mod:`._batched_plan`).
JACOBI_BATCHED_MAX = 32


def _dn():
    from nvmath.bindings import cusolverDn
    return cusolverDn


@dataclasses.dataclass(frozen=True)
class Routines:
    """cuSOLVER names and CUDA data types of one dtype (one row of :data:`ROUTINES`)."""

    prefix: str       # letter of the legacy API: s, d, c, z
    data_type: str    # nvmath.CudaDataType member of the matrix
    real_type: str    # ... of singular values and of the real part
    q_stem: str       # "orgqr" (real) or "ungqr" (complex)
    mq_stem: str      # "ormqr" (real) or "unmqr" (complex)
    herm: str = "sy"  # "sy" (real symmetric) or "he" (complex Hermitian): sygvd, hegvd, ...

    def legacy(self, stem):
        """The legacy routine ``<prefix><stem>`` of ``nvmath.bindings.cusolverDn``."""
        return getattr(_dn(), self.prefix + stem)

    @property
    def cuda(self):
        import nvmath
        return int(nvmath.CudaDataType[self.data_type])

    @property
    def cuda_real(self):
        import nvmath
        return int(nvmath.CudaDataType[self.real_type])


#: The one table of routines per dtype.
ROUTINES = {
    np.dtype(np.float32): Routines("s", "CUDA_R_32F", "CUDA_R_32F", "orgqr", "ormqr"),
    np.dtype(np.float64): Routines("d", "CUDA_R_64F", "CUDA_R_64F", "orgqr", "ormqr"),
    np.dtype(np.complex64): Routines("c", "CUDA_C_32F", "CUDA_R_32F", "ungqr", "unmqr", "he"),
    np.dtype(np.complex128): Routines("z", "CUDA_C_64F", "CUDA_R_64F", "ungqr", "unmqr", "he"),
}


def routines(dtype):
    return ROUTINES[np.dtype(dtype)]


def fortran_batch(a, dtype, flag=None):
    """Copy ``a`` (``(..., m, n)``, any strides) into a new ``(B, m, n)`` CuPy array whose
    matrices are each column-major contiguous, with a uniform stride. ``flag`` (a zeroed
    int32 device slot, or ``None``): set to 1 when ``a`` holds NaN or Inf, SciPy's
    ``check_finite`` without a synchronization (in the copy's own pass where it can).

    A C-ordered ``a`` of ``dtype`` goes through the tiled transposing copy of
    :mod:`._transpose_cuda` (CuPy's strided assignment writes uncoalesced: several times
    slower on a 100000 x 500 matrix)."""
    import cupy
    from . import _transpose_cuda
    m, n = a.shape[-2:]
    batch = math.prod(a.shape[:-2])
    out = cupy.empty((batch, n, m), dtype=dtype).transpose(0, 2, 1)
    if a.dtype == dtype and a.flags.c_contiguous:
        src = a.reshape(batch, m, n)
        if _transpose_cuda.applies(src, out):
            return _transpose_cuda.transpose_copy(src, out, flag=flag)
    if flag is not None:
        flag_nonfinite(a, flag)
    out[...] = a.reshape(batch, m, n)
    return out


def leading_dimension(a):
    """The leading dimension of the column-major matrix or view ``a`` (its column stride)."""
    m = max(a.shape[0], 1)
    return max(a.strides[1] // a.itemsize, m) if a.shape[1] > 1 else m


def _ptr(x):
    return 0 if x is None else x.data.ptr


_POINTERS = threading.local()
#: Pointer arrays kept per thread (a stack of the same shape often lands at the same address
#: again: CuPy's pool hands the freed block back); the cache is emptied when it is full.
POINTER_CACHE_SIZE = 64


def pointer_array(x):
    """Device array of the addresses of the matrices ``x[0], x[1], ...`` (uniform stride).

    Cached per thread by (device, address, stride, count): its content is a function of that
    key alone, so a repeated call on a stack at the same address makes no array and launches
    nothing (one kernel otherwise). Cached arrays are only read, on the thread's streams."""
    import cupy
    start, step, count = int(x.data.ptr), int(x.strides[0]), len(x)
    cache = getattr(_POINTERS, "cache", None)
    if cache is None:
        cache = _POINTERS.cache = {}
    key = (cupy.cuda.Device().id, start, step, count)
    ptrs = cache.get(key)
    if ptrs is not None:
        return ptrs
    if step <= 0:  # a broadcast stack (every matrix at one address): arange needs a step
        ptrs = cupy.full(count, start, dtype=np.uint64)
    else:
        ptrs = cupy.arange(start, start + count * step, step, dtype=np.uint64)  # one kernel
    if len(cache) >= POINTER_CACHE_SIZE:
        cache.clear()
    cache[key] = ptrs
    return ptrs


def chain_buffers(count, pointers=("ptrs",), info=True):
    """The device buffers of a replayed batched chain (:mod:`.._runtime.graphs`) over
    ``count`` matrices: a pointer array per name of ``pointers``, ``info`` codes (with
    ``info``), and on the host the place of the matrices each array holds."""
    import cupy
    bufs = {name: cupy.zeros(max(count, 1), dtype=np.uint64) for name in pointers}
    if info:
        bufs["info"] = cupy.zeros(max(count, 1), dtype=np.int32)
    bufs.update({("at", name): None for name in pointers})
    return bufs


def fill_pointers(buffers, x, name="ptrs"):
    """Put the addresses of ``x[0], x[1], ...`` (uniform stride) into ``buffers[name]``: one
    launch, none when they are there already."""
    at = (int(x.data.ptr), int(x.strides[0]))
    if buffers[("at", name)] == at:
        return
    kern = elementwise_kernel("uint64 start, uint64 step", "uint64 p",
                              "p = start + (unsigned long long)i * step", "gl_fill_pointers")
    kern(np.uint64(at[0]), np.uint64(at[1] % (1 << 64)), buffers[name][:len(x)])
    buffers[("at", name)] = at


class Solver:
    """One GPU call's cuSOLVER state: the thread's handle, a params object and ``info`` codes.

    Use as a context manager. Every routine writes its ``info`` code into slot ``i`` of
    ``slots`` (routines whose codes must all be read use distinct slots); :meth:`check` reads
    them all with one synchronization.
    """

    def __init__(self, dtype, slots=1, *, handle=None, info=None, params=True):
        import cupy
        from ..._runtime.streams import get_handle
        self.r = routines(dtype)
        self.dtype = np.dtype(dtype)
        self.handle = get_handle("cusolverDn") if handle is None else handle
        self.info = cupy.zeros(max(int(slots), 1), dtype=np.int32) if info is None else info
        self._keep = []
        self._gesvdj = []
        self._sizes = {}
        self._dbuf = None
        self._hbuf = None
        self._lanes = []
        self._want_params = bool(params)
        self.params = None

    def __enter__(self):
        # ``params=False``: only batched (legacy-API) routines will run, which take none
        self.params = _new_params() if self._want_params else None
        return self

    def __exit__(self, *exc):
        for lane in self._lanes:
            _dn().destroy_params(lane.params)
        if self.params is not None:
            _dn().destroy_params(self.params)
        return False

    def lane(self, handle):
        """A solver for one stream of a stream-parallel loop (:mod:`._batched_cuda`): the
        cuSOLVER ``handle`` bound to that stream, its own workspaces and params, this solver's
        ``info`` slots. Its resources live until this solver's :meth:`check` (or exit)."""
        child = Solver(self.dtype, handle=handle, info=self.info)
        child.params = _new_params()
        self._lanes.append(child)
        return child

    def _info(self, i):
        return self.info.data.ptr + 4 * int(i)

    def _buffers(self, key, query, args):
        """``(device buffer, bytes, host address, bytes)`` for a 64-bit ``X*`` routine.

        The size is queried once per ``key`` (routine and dimensions) and one workspace serves
        every call of the loop: the calls run in order on one stream. A larger one replaces
        it (CuPy's pool frees the old one in stream order); host workspaces are kept until
        :meth:`check` (they must outlive the calls)."""
        import cupy
        sizes = self._sizes.get(key)
        if sizes is None:
            sizes = self._sizes[key] = tuple(int(s) for s in query(*args))
        dev, host = sizes
        if self._dbuf is None or self._dbuf.size < dev:
            self._dbuf = cupy.empty(max(dev, 1), dtype=np.uint8)
        if host > 0 and (self._hbuf is None or self._hbuf.size < host):
            self._hbuf = np.empty(host, dtype=np.uint8)
            self._keep.append(self._hbuf)  # the host workspace must outlive the call
        haddr = self._hbuf.ctypes.data if host > 0 else 0
        return self._dbuf, dev, haddr, host

    def _lwork(self, x, count):
        import cupy
        return cupy.empty(max(int(count), 1), dtype=x.dtype if x is not None else self.dtype)

    # -- QR ---------------------------------------------------------------------------------
    def geqrf(self, a, tau, i=0):
        """Householder QR of the column-major ``a`` in place; reflectors' scalars into ``tau``."""
        dn, r = _dn(), self.r
        m, n = a.shape
        args = (self.handle, self.params, m, n, r.cuda, a.data.ptr, max(m, 1), r.cuda,
                tau.data.ptr, r.cuda)
        dbuf, dsz, hbuf, hsz = self._buffers(("geqrf", m, n), dn.xgeqrf_buffer_size, args)
        dn.xgeqrf(*args, dbuf.data.ptr, dsz, hbuf, hsz, self._info(i))

    def orgqr(self, q, k, tau, i=0):
        """Form the first ``q.shape[1]`` columns of Q from ``k`` reflectors stored in ``q``."""
        m, n = q.shape
        args = (self.handle, m, n, k, q.data.ptr, max(m, 1), tau.data.ptr)
        key = ("orgqr", m, n, k)
        count = self._sizes.get(key)
        if count is None:  # queried once per loop; the workspace is made per call
            count = self._sizes[key] = int(self.r.legacy(self.r.q_stem + "_buffer_size")(*args))
        work = self._lwork(q, count)
        self.r.legacy(self.r.q_stem)(*args, work.data.ptr, work.size, self._info(i))

    def ormqr(self, a, k, tau, c, i=0, adjoint=False):
        """``c <- Q @ c`` (``Q^H @ c`` with ``adjoint``) with Q held as ``k`` reflectors in
        ``a`` (column-major, in place)."""
        from nvmath.bindings import cublas
        m, ncol = c.shape
        op = cublas.Operation.N if not adjoint else (
            cublas.Operation.C if self.r.herm == "he" else cublas.Operation.T)
        args = (self.handle, int(cublas.SideMode.LEFT), int(op), m, ncol, k,
                a.data.ptr, max(a.shape[0], 1), tau.data.ptr, c.data.ptr, max(m, 1))
        work = self._lwork(c, self.r.legacy(self.r.mq_stem + "_buffer_size")(*args))
        self.r.legacy(self.r.mq_stem)(*args, work.data.ptr, work.size, self._info(i))

    # -- SVD (m >= n) ---------------------------------------------------------------------------
    def gesvd(self, a, s, u, vt, full, i=0):
        """QR-iteration SVD (``Xgesvd``) of the column-major ``a`` (destroyed), m >= n."""
        dn, r = _dn(), self.r
        m, n = a.shape
        job = ord("N") if u is None else ord("A" if full else "S")
        args = (self.handle, self.params, job, job, m, n, r.cuda, a.data.ptr, max(m, 1),
                r.cuda_real, s.data.ptr, r.cuda, _ptr(u), max(m, 1), r.cuda, _ptr(vt),
                max(n, 1), r.cuda)
        dbuf, dsz, hbuf, hsz = self._buffers(("gesvd", job, m, n), dn.xgesvd_buffer_size, args)
        dn.xgesvd(*args, dbuf.data.ptr, dsz, hbuf, hsz, self._info(i))

    def gesvdp(self, a, s, u, v, full, i=0):
        """Polar-decomposition SVD (``Xgesvdp``); returns the perturbation ``h_err_sigma``."""
        from nvmath.bindings import cusolver
        dn, r = _dn(), self.r
        m, n = a.shape
        jobz = int(cusolver.EigMode.VECTOR if u is not None else cusolver.EigMode.NOVECTOR)
        args = (self.handle, self.params, jobz, 0 if full else 1, m, n, r.cuda, a.data.ptr,
                max(m, 1), r.cuda_real, s.data.ptr, r.cuda, _ptr(u), max(m, 1), r.cuda,
                _ptr(v), max(n, 1), r.cuda)
        dbuf, dsz, hbuf, hsz = self._buffers(("gesvdp", jobz, full, m, n),
                                             dn.xgesvdp_buffer_size, args)
        return dn.xgesvdp(*args, dbuf.data.ptr, dsz, hbuf, hsz, self._info(i))

    def gesvdj(self, a, s, u, v, full, i=0):
        """Jacobi SVD (legacy ``<t>gesvdj``); ``u``/``v`` are always allocated by the caller."""
        from nvmath.bindings import cusolver
        dn, r = _dn(), self.r
        m, n = a.shape
        params = dn.create_gesvdj_info()
        self._gesvdj.append(params)  # destroyed by check(), after the synchronization
        jobz = int(cusolver.EigMode.VECTOR if u is not None else cusolver.EigMode.NOVECTOR)
        uu = u if u is not None else self._lwork(a, m * min(m, n))
        vv = v if v is not None else self._lwork(a, n * n)
        args = (self.handle, jobz, 0 if full else 1, m, n, a.data.ptr, max(m, 1),
                s.data.ptr, uu.data.ptr, max(m, 1), vv.data.ptr, max(n, 1))
        work = self._lwork(a, r.legacy("gesvdj_buffer_size")(*args, params))
        r.legacy("gesvdj")(*args, work.data.ptr, work.size, self._info(i), params)
        self._keep.append((uu, vv))

    # -- Cholesky -----------------------------------------------------------------------------
    def potrf(self, a, lower, i=0):
        """Cholesky of the column-major ``a`` (or a view into a larger one) in place
        (``Xpotrf``), the ``lower`` triangle."""
        dn, r = _dn(), self.r
        n = a.shape[0]
        args = (self.handle, self.params, _uplo(lower), n, r.cuda, a.data.ptr,
                leading_dimension(a), r.cuda)
        dbuf, dsz, hbuf, hsz = self._buffers(("potrf", lower, n), dn.xpotrf_buffer_size, args)
        dn.xpotrf(*args, dbuf.data.ptr, dsz, hbuf, hsz, self._info(i))

    def potrs(self, c, lower, b, i=0):
        """Solve with the Cholesky factor ``c`` (column-major); ``b`` column-major, in place."""
        r = self.r
        n, nrhs = b.shape
        _dn().xpotrs(self.handle, self.params, _uplo(lower), n, nrhs, r.cuda, c.data.ptr,
                     max(c.shape[0], 1), r.cuda, b.data.ptr, max(n, 1), self._info(i))

    # -- LU ------------------------------------------------------------------------------------
    def getrf(self, a, ipiv, i=0):
        """LU with partial pivoting of the column-major ``a`` (m x n, or a view into a larger
        column-major matrix) in place (``Xgetrf``);
        1-based int64 pivots into ``ipiv`` (min(m, n)); ``info > 0``: ``U[info-1, info-1]``
        is exactly zero (the factorization is complete all the same)."""
        dn, r = _dn(), self.r
        m, n = a.shape
        lda = leading_dimension(a)
        args = (self.handle, self.params, m, n, r.cuda, a.data.ptr, lda, r.cuda)
        dbuf, dsz, hbuf, hsz = self._buffers(("getrf", m, n), dn.xgetrf_buffer_size, args)
        dn.xgetrf(*args[:6], lda, ipiv.data.ptr, r.cuda, dbuf.data.ptr, dsz, hbuf, hsz,
                  self._info(i))

    def getrs(self, lu, ipiv, b, trans, i=0):
        """Solve ``op(A) x = b`` with the LU factor ``lu`` (column-major) and its int64 pivots
        from :meth:`getrf`; ``trans`` 0, 1, 2 (N, T, C); ``b`` column-major, in place."""
        r = self.r
        n, nrhs = b.shape
        _dn().xgetrs(self.handle, self.params, int(trans), n, nrhs, r.cuda, lu.data.ptr,
                     max(lu.shape[0], 1), ipiv.data.ptr, r.cuda, b.data.ptr, max(n, 1),
                     self._info(i))

    # -- batched forms (one call for a stack of small matrices) -------------------------------
    def potrf_batched(self, w, lower):
        """Cholesky of every matrix of ``w`` (``(B, n, n)``, each column-major contiguous,
        uniform stride) in one ``<t>potrfBatched`` call; ``info`` slot ``i`` is matrix ``i``.

        The routine's chain of launches is replayed as a CUDA graph (:mod:`.._runtime.graphs`)
        through a pointer array and codes of its own, kept per thread and layout: the
        addresses of ``w``'s matrices go into the array (one launch, none when ``w`` sits
        where the last one did) and the codes are copied into ``info`` after."""
        from ..._runtime import graphs
        n, count = w.shape[-1], len(w)
        fn, handle, uplo = self.r.legacy("potrf_batched"), self.handle, _uplo(lower)
        key = ("potrf_batched", w.data.device_id, self.dtype.char, n, count, int(uplo),
               int(handle))
        chain = graphs.entry(key, lambda: chain_buffers(count), address=int(w.data.ptr))
        self._keep.append(chain)  # its buffers outlive the launch (until check)
        fill_pointers(chain.buffers, w)
        chain.launch(lambda b: fn(handle, uplo, n, int(b["ptrs"].data.ptr), max(n, 1),
                                  int(b["info"].data.ptr), count))
        self.info[:count] = chain.buffers["info"]

    def getrf_batched(self, w, piv):
        """LU with partial pivoting of every square matrix of ``w`` (``(B, n, n)``, each
        column-major, uniform stride) in place: one cuBLAS ``<t>getrfBatched`` call on the
        thread's cuBLAS handle; 1-based int32 pivots into ``piv`` (``(B, n)``, contiguous),
        ``info`` slot ``i`` is matrix ``i``'s code."""
        from nvmath.bindings import cublas

        from ..._runtime.streams import get_handle
        nb, n = len(w), w.shape[-1]
        ptrs = pointer_array(w)
        self._keep.append(ptrs)
        getattr(cublas, self.r.prefix + "getrf_batched")(
            get_handle("cublas"), n, int(ptrs.data.ptr), max(n, 1), int(piv.data.ptr),
            int(self.info.data.ptr), nb)

    def getrs_batched(self, w, piv, x, trans):
        """Solve ``op(w[i]) x[i] = b[i]`` for every matrix of a stack factored by
        :meth:`getrf_batched` (``piv``: its int32 pivots), ``x`` (``(B, n, k)``, column-major
        matrices, uniform stride) in place: one cuBLAS ``<t>getrsBatched`` call."""
        from nvmath.bindings import cublas

        from ..._runtime.streams import get_handle
        nb, n, k = x.shape
        a_ptrs, x_ptrs = pointer_array(w), pointer_array(x)
        info = np.zeros(1, dtype=np.int32)  # argument errors only, written by the host
        self._keep.append((a_ptrs, x_ptrs))
        getattr(cublas, self.r.prefix + "getrs_batched")(
            get_handle("cublas"), int(trans), n, k, int(a_ptrs.data.ptr), max(n, 1),
            int(piv.data.ptr), int(x_ptrs.data.ptr), max(n, 1), info.ctypes.data, nb)
        if info[0] < 0:
            raise ValueError(f"getrsBatched: cuBLAS rejected argument {-int(info[0])}")

    def geqrf_batched(self, w, tau):
        """Householder QR of every matrix of ``w`` (``(B, m, n)``, each column-major, uniform
        stride) in place, reflector scalars into ``tau`` (``(B, min(m, n))``): one cuBLAS
        ``<t>geqrfBatched`` call on the thread's cuBLAS handle (same stream)."""
        from nvmath.bindings import cublas

        from ..._runtime.streams import get_handle
        nb, m, n = w.shape
        a_ptrs, t_ptrs = pointer_array(w), pointer_array(tau)
        info = np.zeros(1, dtype=np.int32)  # argument errors only, written by the host
        self._keep.append((a_ptrs, t_ptrs))
        getattr(cublas, self.r.prefix + "geqrf_batched")(
            get_handle("cublas"), m, n, int(a_ptrs.data.ptr), max(m, 1), int(t_ptrs.data.ptr),
            info.ctypes.data, nb)
        if info[0] < 0:
            raise ValueError(f"geqrfBatched: cuBLAS rejected argument {-int(info[0])}")

    def gesvdj_batched(self, w, s, u, v):
        """Jacobi SVD of every ``m x n`` matrix of ``w`` (``m, n <= 32``, column-major, uniform
        stride) into ``s`` (B, k), full ``u`` (B, m, m) and ``v`` (B, n, n), one call."""
        from nvmath.bindings import cusolver
        dn, r = _dn(), self.r
        nb, m, n = w.shape
        params = dn.create_gesvdj_info()
        self._gesvdj.append(params)
        dn.xgesvdj_set_sort_eig(params, 1)
        jobz = int(cusolver.EigMode.VECTOR if u is not None else cusolver.EigMode.NOVECTOR)
        uu = u if u is not None else self._lwork(w, nb * m * m)
        vv = v if v is not None else self._lwork(w, nb * n * n)
        args = (self.handle, jobz, m, n, w.data.ptr, max(m, 1), s.data.ptr, uu.data.ptr,
                max(m, 1), vv.data.ptr, max(n, 1))
        work = self._lwork(w, r.legacy("gesvdj_batched_buffer_size")(*args, params, nb))
        r.legacy("gesvdj_batched")(*args, work.data.ptr, work.size, self.info.data.ptr,
                                   params, nb)
        self._keep.append((uu, vv, work))

    # -- info -----------------------------------------------------------------------------------
    def check(self, what, also=None):
        """Synchronize once and return the ``info`` codes; negative codes raise.

        ``also``: a device array of flags fetched in the same transfer; then the return value
        is ``(codes, flags)``.
        """
        import cupy
        if also is None:
            codes = self.info.get()
        else:
            flags = also.astype(np.int32).ravel()
            packed = cupy.concatenate([self.info, flags]).get()
            codes, extra = packed[:self.info.size], packed[self.info.size:]
        for sv in (self, *self._lanes):
            for params in sv._gesvdj:
                _dn().destroy_gesvdj_info(params)
            sv._gesvdj.clear()
            sv._keep.clear()
        bad = np.flatnonzero(codes < 0)
        if bad.size:
            raise ValueError(f"{what}: cuSOLVER rejected argument {-int(codes[bad[0]])}")
        return codes if also is None else (codes, extra)

    def done(self):
        """End without reading ``info`` when only argument errors could be reported (QR):
        no synchronization, unless a host workspace must outlive the calls."""
        if any(h.size > 1 for sv in (self, *self._lanes) for h in sv._keep
               if isinstance(h, np.ndarray)):
            self.check("cuSOLVER")


def _new_params():
    """A cuSOLVER params object with cuSOLVER's default algorithms (``benchmarks/decomp_dense``
    replaces this function to time the alternatives that ``cusolverDnSetAdvOptions`` offers)."""
    return _dn().create_params()


def _jobz(vectors):
    from nvmath.bindings import cusolver
    return int(cusolver.EigMode.VECTOR if vectors else cusolver.EigMode.NOVECTOR)


def _uplo(lower):
    from nvmath.bindings import cublas
    return int(cublas.FillMode.LOWER if lower else cublas.FillMode.UPPER)


def raise_not_converged(codes, what):
    bad = np.flatnonzero(codes > 0)
    if bad.size:
        raise LinAlgError(f"{what} did not converge (batch entry {int(bad[0])}, "
                          f"info={int(codes[bad[0]])})")


# -- byte estimates ------------------------------------------------------------------------------

def workspace_bytes(routine, m, n, dtype):
    """Device workspace bytes of ``routine`` on an ``m x n`` matrix, from cuSOLVER's
    ``*_buffer_size`` query on a real GPU, else a generous analytic estimate.

    It asks cuSOLVER, so the api files call it only inside the ``nbytes`` callable they hand
    to the dispatcher (called only when the dispatcher considers the GPU)."""
    dtype = np.dtype(dtype)
    if m == 0 or n == 0:
        return 0
    real_gpu = _device.gpu_is_real()
    if real_gpu and routine in _QUERIES:
        try:
            from nvmath.bindings.cusolver import cuSOLVERError
        except ImportError:
            return _analytic(routine, m, n, dtype)
        try:
            return _queried(routine, int(m), int(n), dtype.str, _device.current_device())
        except (OSError, cuSOLVERError):  # a refused query: keep the analytic estimate
            pass
    return _analytic(routine, m, n, dtype)


def _analytic(routine, m, n, dtype):
    k = min(m, n)
    per = {"potrf": 256 * n, "geqrf": 256 * (m + n), "orgqr": 256 * (m + n),
           "gesvd": 2 * m * k + 4 * n * n, "gesvdp": 4 * m * n + 8 * n * n,
           "gesvdj": 2 * m * n + 2 * n * n, "syevd": 2 * n * n + 64 * n}
    return int(per.get(routine, m * n)) * dtype.itemsize


@functools.lru_cache(maxsize=256)
def _queried(routine, m, n, dtype_str, device):
    with _null_solver(np.dtype(dtype_str)) as sv:
        return int(_QUERIES[routine](sv, m, n))


class _Query(typing.NamedTuple):
    h: int       # handle
    p: int       # params
    r: Routines


@contextlib.contextmanager
def _null_solver(dtype):
    """What a ``*_buffer_size`` query needs; matrices are passed as null pointers."""
    from ..._runtime.streams import get_handle
    dn = _dn()
    params = dn.create_params()
    try:
        yield _Query(get_handle("cusolverDn"), params, routines(dtype))
    finally:
        dn.destroy_params(params)


def _q_potrf(sv, m, n):
    return _dn().xpotrf_buffer_size(sv.h, sv.p, _uplo(True), n, sv.r.cuda, 0, n, sv.r.cuda)[0]


def _q_geqrf(sv, m, n):
    return _dn().xgeqrf_buffer_size(sv.h, sv.p, m, n, sv.r.cuda, 0, m, sv.r.cuda, 0,
                                    sv.r.cuda)[0]


def _q_gesvd(sv, m, n):
    m, n = max(m, n), min(m, n)
    return _dn().xgesvd_buffer_size(sv.h, sv.p, ord("S"), ord("S"), m, n, sv.r.cuda, 0, m,
                                    sv.r.cuda_real, 0, sv.r.cuda, 0, m, sv.r.cuda, 0, n,
                                    sv.r.cuda)[0]


def _q_gesvdp(sv, m, n):
    from nvmath.bindings import cusolver
    m, n = max(m, n), min(m, n)
    return _dn().xgesvdp_buffer_size(sv.h, sv.p, int(cusolver.EigMode.VECTOR), 1, m, n,
                                     sv.r.cuda, 0, m, sv.r.cuda_real, 0, sv.r.cuda, 0, m,
                                     sv.r.cuda, 0, n, sv.r.cuda)[0]


def _q_syevd(sv, m, n):
    return _dn().xsyevd_buffer_size(sv.h, sv.p, _jobz(True), _uplo(True), n, sv.r.cuda, 0, n,
                                    sv.r.cuda_real, 0, sv.r.cuda)[0]


_QUERIES = {"potrf": _q_potrf, "geqrf": _q_geqrf, "gesvd": _q_gesvd, "gesvdp": _q_gesvdp,
            "syevd": _q_syevd}


def _q_getrf(sv, m, n):
    return _dn().xgetrf_buffer_size(sv.h, sv.p, m, n, sv.r.cuda, 0, max(m, 1), sv.r.cuda)[0]


_QUERIES["getrf"] = _q_getrf
