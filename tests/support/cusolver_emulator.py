"""A CPU emulation of the few cuSOLVER/cuBLAS entry points and CuPy features decomp's GPU
functions use, so their layout logic (column-major views, leading dimensions, flipped
triangles, info slots) runs on a machine without a GPU.

The emulated routines receive the very arguments the real bindings would: raw pointers,
dimensions and leading dimensions, and read and write memory through them, column-major, with
SciPy's LAPACK. Arrays are NumPy arrays of a subclass with ``.data.ptr`` and ``.get()``.
"""

import collections
import contextlib
import ctypes
import sys
import types

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

from tests.support import fused_emulator as _fused_emulator
from tests.support import fused_svd_emulator as _fused_svd_emulator
from tests.support import gp_cg_emulator as _gp_cg_emulator
from tests.support import nvrtc as _nvrtc
from tests.support import wide_trsm_emulator as _wide_trsm_emulator


#: Relative noise the emulated gesvdp adds to U (tests of the a-posteriori check), and the
#: dtypes it adds it to (``None``: all).
GESVDP_NOISE = [0.0]
GESVDP_NOISY = [None]

#: The attributes the emulated device reports (an H200's shared memory per block and compute
#: capability, 9.0: the kernels' route rows apply).
DEVICE_ATTRIBUTES = {"MultiProcessorCount": 4, "MaxSharedMemoryPerBlockOptin": 232448,
                     "ComputeCapabilityMajor": 9, "ComputeCapabilityMinor": 0}

#: How often each emulated routine ran (tests assert that a code path was taken).
CALLS = collections.Counter()


class FakeDev(np.ndarray):
    """A NumPy array that looks like a CuPy array to the code under test."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data, device_id=0)

    def get(self, order="C"):
        CALLS["get"] += 1  # a device-to-host read: one synchronization on a real GPU
        return np.array(self, order=order)

    def set(self, host, stream=None):  # a host-to-device copy
        self[...] = host


def _dev(x):
    if isinstance(x, np.ndarray) and not isinstance(x, FakeDev):
        return x.view(FakeDev)
    if isinstance(x, tuple):
        return tuple(_dev(v) for v in x)
    return x


class _Kernel:
    """The elementwise kernels of decomp: the triangle zeroing (and copying) of
    _cholesky_cuda and the finiteness flag of _finite_cuda."""

    def __init__(self, in_params, out_params, operation, name, **options):
        if not name.startswith(("gpulinalg_zero_triangle", "gpulinalg_copy_zero")) \
                and name not in ("gl_flag_nonfinite", "gl_fill_pointers"):
            raise NotImplementedError(f"no emulation of kernel {name}")
        self.name = name

    def __call__(self, *args):
        if self.name == "gl_fill_pointers":
            start, step, p = args
            CALLS["fill_pointers"] += 1
            p[...] = np.uint64(start) + np.arange(p.size, dtype=np.uint64) * np.uint64(step)
            return
        if self.name == "gl_flag_nonfinite":
            x, flag = args
            CALLS["flag_nonfinite"] += 1
            if not np.isfinite(np.asarray(x)).all():
                flag[0] = 1
            return
        if self.name.startswith("gpulinalg_copy_zero"):
            src, n, lower, x = args[:4]
            CALLS["copy_zero"] += 1
            if self.name.endswith("_flag"):  # the finiteness flag in the same pass
                CALLS["flag_nonfinite"] += 1
                if not np.isfinite(np.asarray(src)).all():
                    args[4][0] = 1
            x[...] = src
        else:
            n, lower, x = args
            CALLS["zero_triangle"] += 1
        mask = np.triu(np.ones((n, n), bool), 1) if lower else np.tril(np.ones((n, n), bool), -1)
        x[..., mask] = 0


class _Raw:
    """The raw kernels of decomp, through their raw strides: the tiled transposing copy of
    ``_transpose_cuda`` (the batch count is the grid's z dimension) and the factor check of
    ``_cholesky_cuda`` (one matrix per grid x index)."""

    def __init__(self, code, name, options=()):
        _nvrtc.check(name, code, options)  # the real source compiles (where NVRTC is here)
        if name not in ("gl_transpose_copy", "gl_potrf_codes", "gl_tri_figures", "gl_svd_signs",
                        "gl_flag_flat", "gl_stream_trsm", "gl_wide_trsm",
                        "gl_small_potrf", "gl_small_trsm", "gl_small_qr", "gl_small_svd",
                        "gl_gp_product", "gl_gp_factor_contract", "gl_gp_pivot_select",
                        "gl_gp_pivot_row", "gl_gp_build", "gl_gp_weight_contract"):
            raise NotImplementedError(f"no emulation of kernel {name}")
        self.name, self.options = name, tuple(options)

    def __call__(self, grid, block, args, shared_mem=0):
        if self.name == "gl_potrf_codes":
            return self._codes(grid, args)
        if self.name == "gl_flag_flat":  # the finiteness flag of a contiguous array
            x, size, flag = args
            CALLS["flag_nonfinite"] += 1
            CALLS["flag_flat"] += 1
            assert block == (256,) and x.ndim == 1 and x.dtype.kind == "f"
            if not np.isfinite(np.asarray(x)[:int(size)]).all():
                flag[0] = 1
            return
        if self.name == "gl_tri_figures":
            return self._figures(grid, block, args)
        if self.name == "gl_svd_signs":
            return self._signs(grid, block, args)
        if self.name == "gl_small_potrf":
            return _fused_emulator.small_potrf(CALLS, grid, args)
        if self.name == "gl_small_trsm":
            return _fused_emulator.small_trsm(CALLS, grid, args)
        if self.name == "gl_stream_trsm":
            return _fused_emulator.stream_trsm(CALLS, grid, block, args, shared_mem)
        if self.name == "gl_wide_trsm":
            return _wide_trsm_emulator.wide_trsm(CALLS, grid, block, args, shared_mem)
        if self.name == "gl_small_qr":
            return _fused_emulator.small_qr(CALLS, grid, block, args, shared_mem)
        if self.name == "gl_small_svd":
            return _fused_svd_emulator.small_svd(CALLS, grid, block, args, shared_mem)
        if self.name == "gl_gp_product":
            return _gp_cg_emulator.product(CALLS, self.options, grid, block, args, shared_mem)
        if self.name in ("gl_gp_build", "gl_gp_weight_contract"):
            step = _gp_cg_emulator.build if self.name == "gl_gp_build" else \
                _gp_cg_emulator.weight_contract
            return step(CALLS, self.options, grid, block, args, shared_mem)
        if self.name in ("gl_gp_pivot_select", "gl_gp_pivot_row"):
            step = _gp_cg_emulator.pivot_select if self.name.endswith("select") else \
                _gp_cg_emulator.pivot_row
            return step(CALLS, self.options, grid, block, args, shared_mem)
        if self.name == "gl_gp_factor_contract":
            return _gp_cg_emulator.factor_contract(CALLS, self.options, grid, block, args,
                                                   shared_mem)
        src, dst, p, q, sb, sp, db, dq, zero, flag = (int(x) if np.isscalar(x) else x
                                                      for x in args)
        CALLS["transpose_copy"] += 1
        item = src.itemsize
        s = np.lib.stride_tricks.as_strided(src, (grid[2], p, q), (sb * item, sp * item, item))
        if not isinstance(flag, int):  # the finiteness flag in the same pass
            CALLS["flag_nonfinite"] += 1
            if not np.isfinite(s).all():
                flag[0] = 1
        d = np.lib.stride_tricks.as_strided(dst, (grid[2], p, q), (db * item, item, dq * item))
        d[...] = np.where(np.triu(np.ones((p, q), bool), 1) & bool(zero), 0, s)

    @staticmethod
    def _figures(grid, block, args):
        src, out, k, length, sb, sk, sl, diag, rows, warp = (
            int(x) if np.isscalar(x) else x for x in args)
        CALLS["tri_figures"] += 1
        assert block == (256,)
        assert grid[0] == ((rows + 7) // 8 if warp else rows)
        item = src.itemsize
        x = np.abs(np.lib.stride_tricks.as_strided(src, (rows // k, k, length),
                                                   (sb * item, sk * item, sl * item)))
        x = x.reshape(rows, length).astype(np.float64)
        if not diag:
            out[:rows] = x.max(axis=-1)
            return
        zero = x == 0
        first = np.where(zero.any(axis=-1), np.argmax(zero, axis=-1), -1)
        out[:3 * rows] = np.stack([x.max(axis=-1), x.min(axis=-1), first], axis=-1).ravel()

    @staticmethod
    def _signs(grid, block, args):
        """flip_signs in place on (B, m, .) U and (B, k, n) Vh given by their strides."""
        from gpulinalg.decomp.svd._svd_xp import flip_signs
        u, vh, rows, k, m, n, ub, ur, uc, vb, vr, vc = (
            int(x) if np.isscalar(x) else x for x in args)
        CALLS["svd_signs"] += 1
        assert block == (256,) and grid[0] == (rows + 7) // 8
        item = u.itemsize
        nb = rows // k
        uu = np.lib.stride_tricks.as_strided(u, (nb, m, k), (ub * item, ur * item, uc * item))
        vv = np.lib.stride_tricks.as_strided(vh, (nb, k, n), (vb * item, vr * item, vc * item))
        fu, _, fv = flip_signs(np.array(uu), np.zeros((nb, k)), np.array(vv), np)
        uu[...], vv[...] = fu, fv

    @staticmethod
    def _codes(grid, args):
        w, info, n, sb, sd, nonfinite = (int(x) if np.isscalar(x) else x for x in args)
        CALLS["potrf_codes"] += 1
        assert grid[1] * 1024 >= n
        item = w.itemsize
        diag = np.lib.stride_tricks.as_strided(w, (grid[0], n), (sb * item, sd * item))
        for b in range(grid[0]):
            bad = np.flatnonzero(~np.isfinite(diag[b]))
            if bad.size and (info[b] == 0 or info[b] >= nonfinite):
                info[b] = nonfinite + int(bad[0])


class _Stream:
    """A CUDA stream: work runs at once, so ordering holds trivially; entries are counted."""

    made = 0

    def __init__(self, non_blocking=False):
        _Stream.made += 1
        self.ptr = 1000 + _Stream.made

    def record(self, event=None):
        return object()

    def wait_event(self, event):
        assert event is not None

    def synchronize(self):
        pass

    def __enter__(self):
        CALLS["lane_stream"] += 1
        return self

    def __exit__(self, *exc):
        return False


_MAIN = _Stream()


class _Device:
    """``cupy.cuda.Device``: its id and attributes; entering it selects nothing."""

    def __init__(self, i=0):
        self.id, self.attributes = i, dict(DEVICE_ATTRIBUTES)

    @property
    def compute_capability(self):
        """CuPy's string of it (``"90"``)."""
        at = self.attributes
        return f"{at['ComputeCapabilityMajor']}{at['ComputeCapabilityMinor']}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _memcpy_async(dst, src, nbytes, kind, stream):
    """``cudaMemcpyAsync``: work runs at once; a device-to-host copy counts as a read-back
    (one synchronization on a real GPU), as :meth:`FakeDev.get` does."""
    if kind == _RUNTIME.memcpyDeviceToHost:
        CALLS["get"] += 1
    ctypes.memmove(dst, src, nbytes)


_HOST = {}


def _host_alloc(nbytes, flags):
    """``cudaHostAlloc``: host memory whose device address is its own (UVA)."""
    buf = ctypes.create_string_buffer(nbytes)
    _HOST[ctypes.addressof(buf)] = buf
    return ctypes.addressof(buf)


_RUNTIME = types.SimpleNamespace(
    memcpyAsync=_memcpy_async, memcpyDeviceToHost=2, memcpyHostToDevice=1,
    streamSynchronize=lambda ptr: None, hostAlloc=_host_alloc, hostAllocMapped=2,
    freeHost=lambda ptr: _HOST.pop(ptr),
    pointerGetAttributes=lambda ptr: types.SimpleNamespace(devicePointer=ptr))


def _fake_cupy():
    mod = types.ModuleType("cupy")
    mod.ndarray = FakeDev
    mod.ElementwiseKernel, mod.RawKernel = _Kernel, _Raw
    mod.cuda = types.SimpleNamespace(Device=_Device, Event=lambda disable_timing=False: object(),
                                     Stream=_Stream, get_current_stream=lambda: _MAIN,
                                     alloc_pinned_memory=bytearray, runtime=_RUNTIME)

    def wrap(name):
        fn = getattr(np, name)
        return lambda *a, **k: _dev(fn(*a, **k))
    for name in ("empty", "zeros", "ones", "triu", "tril", "asfortranarray", "diagonal",
                 "isfinite", "flatnonzero", "conj", "broadcast_to", "arange", "abs", "where",
                 "argmax", "take_along_axis", "swapaxes", "eye", "asarray", "stack", "maximum",
                 "concatenate", "ones_like", "full", "matmul", "ascontiguousarray",
                 *_lu().CUPY_NAMES):
        setattr(mod, name, wrap(name))
    mod.linalg = types.SimpleNamespace(norm=lambda *a, **k: _dev(np.asarray(np.linalg.norm(
        *a, **k))))
    return mod


# -- memory through pointers -----------------------------------------------------------------

def _dtype_of(cuda_type):
    import nvmath
    names = {"CUDA_R_32F": np.float32, "CUDA_R_64F": np.float64, "CUDA_C_32F": np.complex64,
             "CUDA_C_64F": np.complex128}
    return np.dtype(names[nvmath.CudaDataType(cuda_type).name])


def view(ptr, rows, cols, ld, dtype):
    """The column-major ``rows x cols`` matrix with leading dimension ``ld`` at ``ptr``."""
    dtype = np.dtype(dtype)
    assert ptr, "null pointer"
    assert ld >= max(rows, 1), f"leading dimension {ld} < rows {rows}"
    extent = ((cols - 1) * ld + rows) if rows and cols else 0
    raw = (ctypes.c_char * max(extent * dtype.itemsize, 1)).from_address(ptr)
    flat = np.frombuffer(raw, dtype=dtype, count=extent) if extent else np.empty(0, dtype)
    return np.lib.stride_tricks.as_strided(flat, shape=(rows, cols),
                                           strides=(dtype.itemsize, ld * dtype.itemsize))


def _set_info(ptr, value):
    ctypes.c_int32.from_address(ptr).value = int(value)


def _lower(uplo):
    from nvmath.bindings import cublas
    return int(uplo) == int(cublas.FillMode.LOWER)


def _lapack(name, dtype):
    return lapack.get_lapack_funcs((name,), dtype=np.dtype(dtype))[0]


class FakeCusolverDn(types.ModuleType):
    """The entry points of ``nvmath.bindings.cusolverDn`` that decomp calls."""

    def __init__(self):
        super().__init__("nvmath.bindings.cusolverDn")
        for p, dt in zip("sdcz", (np.float32, np.float64, np.complex64, np.complex128)):
            q = "orgqr" if p in "sd" else "ungqr"
            mq = "ormqr" if p in "sd" else "unmqr"
            setattr(self, p + q, self._orgqr(dt))
            setattr(self, p + q + "_buffer_size", lambda *a: 1)
            setattr(self, p + mq, self._ormqr(dt))
            setattr(self, p + mq + "_buffer_size", lambda *a: 1)
            setattr(self, p + "gesvdj", self._gesvdj(dt))
            setattr(self, p + "gesvdj_buffer_size", lambda *a: 1)
            setattr(self, p + "potrf_batched", self._potrf_batched(dt))
            setattr(self, p + "gesvdj_batched", self._gesvdj_batched(dt))
            setattr(self, p + "gesvdj_batched_buffer_size", lambda *a: 1)
            _add_eigen(self, p, dt)

    create = staticmethod(lambda: 7)
    set_stream = staticmethod(lambda handle, stream: None)
    create_params = staticmethod(lambda: 1)
    destroy_params = staticmethod(lambda p: None)
    create_gesvdj_info = staticmethod(lambda: 1)
    xgesvdj_set_sort_eig = staticmethod(lambda params, sort: None)
    destroy_gesvdj_info = staticmethod(lambda p: None)
    xgeqrf_buffer_size = xgesvd_buffer_size = xgesvdp_buffer_size = staticmethod(
        lambda *a: (64, 0))
    xpotrf_buffer_size = staticmethod(lambda *a: (64, 0))
    xgetrf_buffer_size = staticmethod(lambda *a: (64, 0))
    xgetrf = staticmethod(lambda *a: _lu().xgetrf(*a))
    xgetrs = staticmethod(lambda *a: _lu().xgetrs(*a))

    @staticmethod
    def xgeqrf(h, p, m, n, dt, a, lda, dtt, tau, ct, dbuf, dsz, hbuf, hsz, info):
        CALLS["geqrf"] += 1
        dtype = _dtype_of(dt)
        A = view(a, m, n, lda, dtype)
        qr, t, _, code = _lapack("geqrf", dtype)(np.array(A, order="F"))
        A[...] = qr
        view(tau, min(m, n), 1, max(min(m, n), 1), dtype)[:, 0] = t
        _set_info(info, code)

    @staticmethod
    def _orgqr(dtype):
        def orgqr(h, m, n, k, a, lda, tau, work, lwork, info):
            A = view(a, m, n, lda, dtype)
            t = view(tau, k, 1, max(k, 1), dtype)[:, 0]
            name = "orgqr" if np.dtype(dtype).kind == "f" else "ungqr"
            q, _, code = _lapack(name, dtype)(np.array(A, order="F"), np.array(t))
            A[...] = q
            _set_info(info, code)
        return orgqr

    @staticmethod
    def _ormqr(dtype):
        def ormqr(h, side, trans, m, n, k, a, lda, tau, c, ldc, work, lwork, info):
            from nvmath.bindings import cublas
            CALLS["ormqr"] += 1
            assert int(side) == int(cublas.SideMode.LEFT)
            real = np.dtype(dtype).kind == "f"
            assert int(trans) in ((0, 1) if real else (0, 2)), "ormqr takes T, unmqr C"
            op = "N" if int(trans) == 0 else ("T" if real else "C")
            A = view(a, m, k, lda, dtype)
            C = view(c, m, n, ldc, dtype)
            t = view(tau, k, 1, max(k, 1), dtype)[:, 0]
            name = "ormqr" if np.dtype(dtype).kind == "f" else "unmqr"
            out, _, code = _lapack(name, dtype)("L", op, np.array(A, order="F"), np.array(t),
                                                 np.array(C, order="F"), max(1, 64 * n))
            C[...] = out
            _set_info(info, code)
        return ormqr

    @staticmethod
    def xgesvd(h, p, jobu, jobvt, m, n, dt, a, lda, dts, s, dtu, u, ldu, dtv, vt, ldvt, ct,
               dbuf, dsz, hbuf, hsz, info):
        assert m >= n, "Xgesvd needs m >= n"
        CALLS["gesvd"] += 1
        dtype = _dtype_of(dt)
        A = view(a, m, n, lda, dtype)
        job = chr(jobu)
        k = min(m, n)
        if job == "N":
            sv = np.linalg.svd(A, compute_uv=False)
        else:
            U, sv, VT = np.linalg.svd(A, full_matrices=job == "A")
            view(u, m, U.shape[1], ldu, dtype)[...] = U
            view(vt, n, n, ldvt, dtype)[...] = VT[:n]
        view(s, k, 1, max(k, 1), _dtype_of(dts))[:, 0] = sv
        A[...] = np.nan  # destroyed
        _set_info(info, 0)

    @staticmethod
    def xgesvdp(h, p, jobz, econ, m, n, dt, a, lda, dts, s, dtu, u, ldu, dtv, v, ldv, ct,
                dbuf, dsz, hbuf, hsz, info):
        CALLS["gesvdp"] += 1
        FakeCusolverDn._svd_v(dt, jobz, econ, m, n, a, lda, dts, s, u, ldu, v, ldv)
        noisy = GESVDP_NOISY[0] is None or _dtype_of(dt) in GESVDP_NOISY[0]
        if GESVDP_NOISE[0] and int(jobz) == 1 and noisy:
            U = view(u, m, min(m, n) if econ else m, ldu, _dtype_of(dt))
            U += GESVDP_NOISE[0] * np.random.default_rng(0).standard_normal(U.shape)
        _set_info(info, 0)
        return 0.0

    @staticmethod
    def _gesvdj(dtype):
        import nvmath
        name = {np.float32: "CUDA_R_32F", np.float64: "CUDA_R_64F",
                np.complex64: "CUDA_C_32F", np.complex128: "CUDA_C_64F"}[dtype]
        real = name.replace("_C_", "_R_")

        def gesvdj(h, jobz, econ, m, n, a, lda, s, u, ldu, v, ldv, work, lwork, info, params):
            FakeCusolverDn._svd_v(int(nvmath.CudaDataType[name]), jobz, econ, m, n, a, lda,
                                  int(nvmath.CudaDataType[real]), s, u, ldu, v, ldv)
            _set_info(info, 0)
        return gesvdj

    @staticmethod
    def _svd_v(dt, jobz, econ, m, n, a, lda, dts, s, u, ldu, v, ldv):
        dtype = _dtype_of(dt)
        A = view(a, m, n, lda, dtype)
        k = min(m, n)
        U, sv, VT = np.linalg.svd(A, full_matrices=not econ)
        if int(jobz) == 1:
            view(u, m, U.shape[1], ldu, dtype)[...] = U
            V = VT.conj().T
            view(v, n, V.shape[1], ldv, dtype)[...] = V
        view(s, k, 1, max(k, 1), _dtype_of(dts))[:, 0] = sv
        A[...] = np.nan

    @staticmethod
    def xpotrf(h, p, uplo, n, dt, a, lda, ct, dbuf, dsz, hbuf, hsz, info):
        CALLS["potrf_" + ("lower" if _lower(uplo) else "upper")] += 1
        dtype = _dtype_of(dt)
        A = view(a, n, n, lda, dtype)
        c, code = _lapack("potrf", dtype)(np.array(A, order="F"), lower=_lower(uplo),
                                          clean=False)
        tri = np.tril if _lower(uplo) else np.triu
        keep = tri(np.ones((n, n), bool))
        if code == 0:
            A[keep] = c[keep]
        _set_info(info, code)

    @staticmethod
    def xpotrs(h, p, uplo, n, nrhs, dt, a, lda, dtb, b, ldb, info):
        dtype = _dtype_of(dt)
        A = view(a, n, n, lda, dtype)
        B = view(b, n, nrhs, ldb, dtype)
        x, code = _lapack("potrs", dtype)(np.array(A, order="F"), np.array(B, order="F"),
                                          lower=_lower(uplo))
        B[...] = x
        _set_info(info, code)


def _lu():
    """The LU routines' emulation (:mod:`tests.support.lu_emulator`, which reads memory
    through this module's helpers)."""
    from tests.support import lu_emulator
    return lu_emulator


def pointers(address, count):
    """The ``count`` device pointers stored at ``address``."""
    assert isinstance(address, int), "pointer arrays go in as the address of a device array"
    return [int(p) for p in view(address, count, 1, max(count, 1), np.uint64)[:, 0]]


def _potrf_batched(dtype):
    def potrf_batched(h, uplo, n, aarray, lda, info, batch):
        CALLS["potrf_batched"] += 1
        for i, ptr in enumerate(pointers(aarray, batch)):
            FakeCusolverDn.xpotrf(h, 0, uplo, n, _cuda_type(dtype), ptr, lda, 0, 0, 0, 0, 0,
                                  info + 4 * i)
    return potrf_batched


def _gesvdj_batched(dtype):
    def gesvdj_batched(h, jobz, m, n, a, lda, s, u, ldu, v, ldv, work, lwork, info, params,
                       batch):
        CALLS["gesvdj_batched"] += 1
        assert m <= 32 and n <= 32
        item, k = np.dtype(dtype).itemsize, min(m, n)
        real = np.empty(0, dtype).real.dtype
        for i in range(batch):
            FakeCusolverDn._svd_v(_cuda_type(dtype), jobz, 0, m, n, a + i * lda * n * item,
                                  lda, _cuda_type(real), s + i * k * real.itemsize,
                                  u + i * ldu * m * item, ldu, v + i * ldv * n * item, ldv)
            _set_info(info + 4 * i, 0)
    return gesvdj_batched


def _cuda_type(dtype):
    import nvmath
    names = {"float32": "CUDA_R_32F", "float64": "CUDA_R_64F", "complex64": "CUDA_C_32F",
             "complex128": "CUDA_C_64F"}
    return int(nvmath.CudaDataType[names[np.dtype(dtype).name]])


FakeCusolverDn._potrf_batched = staticmethod(_potrf_batched)
FakeCusolverDn._gesvdj_batched = staticmethod(_gesvdj_batched)


# -- symmetric / Hermitian eigensolvers (syevd, syevdx, sygvd, sygvdx, syevjBatched) ---------

def _hermitian_from(A, lower):
    """The Hermitian matrix whose ``lower`` (else upper) triangle ``A`` holds."""
    t = np.tril(A) if lower else np.triu(A)
    d = np.real(np.diagonal(A))
    return t + t.conj().T - np.diag(d)


def _eig_into(dtype, itype, jobz, rng, uplo, n, a, lda, b, ldb, vl, vu, il, iu, w):
    """One (generalized) eigenproblem through the pointers, as cuSOLVER: eigenvalues into
    ``w``, vectors over ``a`` (``a`` destroyed without them), B's Cholesky factor over ``b``;
    ``(count found, info)`` with ``info = n + k`` when B's leading minor ``k`` fails."""
    from nvmath.bindings import cusolver
    dtype = np.dtype(dtype)
    real = np.empty(0, dtype).real.dtype
    A = view(a, n, n, lda, dtype)
    herm = _hermitian_from(np.array(A), _lower(uplo))
    kwargs = {}
    if int(rng) == int(cusolver.EigRange.I):
        kwargs["subset_by_index"] = (il - 1, iu - 1)
    elif int(rng) == int(cusolver.EigRange.V):
        kwargs["subset_by_value"] = (vl, vu)
    B = None
    if b is not None:
        B = view(b, n, n, ldb, dtype)
        hb = _hermitian_from(np.array(B), _lower(uplo))
        c, code = _lapack("potrf", dtype)(np.array(hb), lower=_lower(uplo))
        if code:
            return 0, n + code
        B[...] = c
        kwargs["b"], kwargs["type"] = hb, int(itype)
    vals, vecs = scipy.linalg.eigh(herm, check_finite=False, **kwargs)
    found = len(vals)
    view(w, n, 1, n, real)[:found, 0] = vals
    if int(jobz) == 1:
        A[:, :found] = vecs
    else:
        A[...] = np.nan  # destroyed
    return found, 0


def _xsyevd(h, p, jobz, uplo, n, dt, a, lda, dtw, w, ct, dbuf, dsz, hbuf, hsz, info):
    CALLS["syevd"] += 1
    _set_info(info, _eig_into(_dtype_of(dt), 1, jobz, 0, uplo, n, a, lda, None, 0, 0, 0, 0, 0,
                              w)[1])


def _xsyevdx(h, p, jobz, rng, uplo, n, dt, a, lda, vl, vu, il, iu, dtw, w, ct, dbuf, dsz,
             hbuf, hsz, info):
    CALLS["syevdx"] += 1
    real = _dtype_of(dtw)
    lo, hi = (float(view(x, 1, 1, 1, real)[0, 0]) for x in (vl, vu))
    found, code = _eig_into(_dtype_of(dt), 1, jobz, rng, uplo, n, a, lda, None, 0, lo, hi, il,
                            iu, w)
    _set_info(info, code)
    return found


def _sygvd(dtype):
    def sygvd(h, itype, jobz, uplo, n, a, lda, b, ldb, w, work, lwork, info):
        CALLS["sygvd"] += 1
        _set_info(info, _eig_into(dtype, itype, jobz, 0, uplo, n, a, lda, b, ldb, 0, 0, 0, 0,
                                  w)[1])
    return sygvd


def _sygvdx(dtype):
    def sygvdx(h, itype, jobz, rng, uplo, n, a, lda, b, ldb, vl, vu, il, iu, meig, w, work,
               lwork, info):
        CALLS["sygvdx"] += 1
        found, code = _eig_into(dtype, itype, jobz, rng, uplo, n, a, lda, b, ldb, vl, vu, il,
                                iu, w)
        ctypes.c_int32.from_address(meig).value = found
        _set_info(info, code)
    return sygvdx


def _syevj_batched(dtype):
    def syevj_batched(h, jobz, uplo, n, a, lda, w, work, lwork, info, params, batch):
        CALLS["syevj_batched"] += 1
        assert n <= 32 and params
        item = np.dtype(dtype).itemsize
        real = np.empty(0, dtype).real.dtype.itemsize
        for i in range(batch):
            _set_info(info + 4 * i, _eig_into(dtype, 1, jobz, 0, uplo, n, a + i * lda * n * item,
                                              lda, None, 0, 0, 0, 0, 0, w + i * n * real)[1])
    return syevj_batched


def _add_eigen(dn, p, dtype):
    """The eigensolvers of one dtype letter ``p`` on the fake ``cusolverDn`` module ``dn``."""
    herm = "sy" if p in "sd" else "he"
    setattr(dn, p + herm + "gvd", _sygvd(dtype))
    setattr(dn, p + herm + "gvd_buffer_size", lambda *a: 1)
    setattr(dn, p + herm + "gvdx", _sygvdx(dtype))
    setattr(dn, p + herm + "gvdx_buffer_size", lambda *a: 1)
    setattr(dn, p + herm + "evj_batched", _syevj_batched(dtype))
    setattr(dn, p + herm + "evj_batched_buffer_size", lambda *a: 1)


FakeCusolverDn.xsyevd = staticmethod(_xsyevd)
FakeCusolverDn.xsyevdx = staticmethod(_xsyevdx)
FakeCusolverDn.xsyevd_buffer_size = staticmethod(lambda *a: (64, 0))
FakeCusolverDn.xsyevdx_buffer_size = staticmethod(lambda *a: (64, 0))
FakeCusolverDn.create_syevj_info = staticmethod(lambda: 2)
FakeCusolverDn.destroy_syevj_info = staticmethod(lambda p: None)
FakeCusolverDn.xsyevj_set_sort_eig = staticmethod(lambda params, sort: None)


class FakeCublas(types.ModuleType):
    """``<t>trsm`` of ``nvmath.bindings.cublas``, with the real module's enums."""

    def __init__(self):
        from nvmath.bindings import cublas
        super().__init__("nvmath.bindings.cublas")
        for name in ("SideMode", "FillMode", "Operation", "DiagType"):
            setattr(self, name, getattr(cublas, name))
        for p, dt in zip("sdcz", (np.float32, np.float64, np.complex64, np.complex128)):
            setattr(self, p + "trsm", self._trsm(dt))
            setattr(self, p + "trsm_batched", self._trsm_batched(dt))
            setattr(self, p + "getrf_batched", _lu().getrf_batched(dt))
            setattr(self, p + "getrs_batched", _lu().getrs_batched(dt))
            setattr(self, p + "geqrf_batched", self._geqrf_batched(dt))
            setattr(self, p + ("syrk" if p in "sd" else "herk"), self._rank_k(dt))
            setattr(self, p + "gemm", self._gemm(dt))
            if p in "sd":
                setattr(self, p + "symv", self._symv(dt))
        for name in ("ComputeType", "GemmAlgo"):
            setattr(self, name, getattr(cublas, name))
        self.gemm_ex = _gemm_ex

    @staticmethod
    def _trsm(dtype):
        def trsm(h, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb):
            from nvmath.bindings import cublas
            right = int(side) == int(cublas.SideMode.RIGHT)
            A = view(a, *((n, n) if right else (m, m)), lda, dtype)
            B = view(b, m, n, ldb, dtype)
            al = view(alpha, 1, 1, 1, dtype)[0, 0]
            AA = np.array(A)
            if int(diag) == 1:
                np.fill_diagonal(AA, 1)
            if right:  # B op(A)^-1: op(A)^T X^T = B^T, op(A)^T a triangle of A or conj(A)
                CALLS["trsm_right"] += 1
                AA = np.conj(AA) if int(trans) == 2 else AA
                with np.errstate(all="ignore"):
                    B[...] = _solve_or_nan(AA, al * np.array(B).T, _lower(uplo),
                                           "T" if int(trans) == 0 else "N").T
                return
            trsv, = scipy.linalg.get_blas_funcs(("trsv",), (AA,))
            # BLAS, as cuBLAS: a zero on the diagonal gives inf/NaN, never an exception
            with np.errstate(all="ignore"):
                for j in range(n):
                    B[:, j] = trsv(AA, np.array(B[:, j]) * al, lower=_lower(uplo),
                                   trans=int(trans), diag=0)
        return trsm

    @staticmethod
    def _trsm_batched(dtype):
        one = FakeCublas._trsm(dtype)

        def trsm_batched(h, side, uplo, trans, diag, m, n, alpha, aarray, lda, barray, ldb,
                         batch):
            CALLS["trsm_batched"] += 1
            for pa, pb in zip(pointers(aarray, batch), pointers(barray, batch)):
                one(h, side, uplo, trans, diag, m, n, alpha, pa, lda, pb, ldb)
        return trsm_batched


def _solve_or_nan(a, b, lower, trans):
    """``op(a)^-1 b`` for a triangular ``a``; a zero on its diagonal gives inf/NaN as cuBLAS
    does (SciPy raises)."""
    try:
        return scipy.linalg.solve_triangular(a, b, lower=lower, trans=trans, check_finite=False)
    except np.linalg.LinAlgError:
        return np.full(b.shape, np.nan, dtype=b.dtype)


def _rank_k(dtype):
    """``<t>syrk`` / ``<t>herk``: the ``uplo`` triangle of ``C <- alpha op(A) op(A)^H +
    beta C`` (``trans`` N: ``A A^H`` with A n x k; T or C: ``A^H A`` with A k x n); C's other
    triangle untouched, and C not read when ``beta`` is 0 (as cuBLAS)."""
    def rank_k(h, uplo, trans, n, k, alpha, a, lda, beta, c, ldc):
        CALLS["rank_k"] += 1
        rdt = np.empty(0, dtype).real.dtype
        al, be = (view(x, 1, 1, 1, rdt)[0, 0] for x in (alpha, beta))
        A = np.array(view(a, *((n, k) if int(trans) == 0 else (k, n)), lda, dtype))
        prod = A @ A.conj().T if int(trans) == 0 else A.conj().T @ A
        C = view(c, n, n, ldc, dtype)
        new = al * prod + (be * np.array(C) if be != 0 else 0)
        keep = np.tril(np.ones((n, n), bool), -1) if not _lower(uplo) else \
            np.triu(np.ones((n, n), bool), 1)
        C[...] = np.where(keep, np.array(C), new)
    return rank_k


_OPS = {0: lambda x: x, 1: lambda x: x.T, 2: lambda x: x.conj().T}


def _product_into(dtype, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc):
    """``C <- al op(A) op(B) + be C`` of column-major matrices at the addresses ``a``, ``b``,
    ``c``; C not read when ``be`` is 0 (as cuBLAS)."""
    A = view(a, *((m, k) if int(ta) == 0 else (k, m)), lda, dtype)
    B = view(b, *((k, n) if int(tb) == 0 else (n, k)), ldb, dtype)
    C = view(c, m, n, ldc, dtype)
    prod = al * (_OPS[int(ta)](np.array(A)) @ _OPS[int(tb)](np.array(B)))
    C[...] = prod + be * np.array(C) if be != 0 else prod


def _gemm(dtype):
    """``<t>gemm``."""
    def gemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        CALLS["gemm"] += 1
        al, be = (view(x, 1, 1, 1, dtype)[0, 0] for x in (alpha, beta))
        _product_into(dtype, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc)
    return gemm


def _gemm_ex(h, ta, tb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc,
             compute, algo):
    """``cublasGemmEx`` with one data type for all three matrices and ``alpha``/``beta`` of
    it; every compute type in that type's own arithmetic (TF32's rounding is not emulated)."""
    CALLS["gemm_ex"] += 1
    dtype = _dtype_of(atype)
    assert _dtype_of(btype) == dtype == _dtype_of(ctype)
    al, be = (view(x, 1, 1, 1, dtype)[0, 0] for x in (alpha, beta))
    _product_into(dtype, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc)


def _symv(dtype):
    """``<t>symv``: ``y <- alpha A x + beta y`` reading only the ``uplo`` triangle of ``A``
    (the other is mirrored from it, as cuBLAS); ``y`` not read when ``beta`` is 0."""
    def symv(h, uplo, n, alpha, a, lda, x, incx, beta, y, incy):
        CALLS["symv"] += 1
        assert incx == 1 and incy == 1
        al, be = (view(v, 1, 1, 1, dtype)[0, 0] for v in (alpha, beta))
        A = np.array(view(a, n, n, lda, dtype))
        t = np.tril(A) if _lower(uplo) else np.triu(A)
        full = t + (np.tril(A, -1) if _lower(uplo) else np.triu(A, 1)).T
        X, Y = view(x, n, 1, n, dtype), view(y, n, 1, n, dtype)
        Y[...] = al * (full @ np.array(X)) + (be * np.array(Y) if be != 0 else 0)
    return symv


def _geqrf_batched(dtype):
    def geqrf_batched(h, m, n, aarray, lda, tauarray, info, batch):
        CALLS["geqrf_batched"] += 1
        assert isinstance(info, int) and info, "info is a host address"
        scratch = np.zeros(1, np.int32)
        for pa, pt in zip(pointers(aarray, batch), pointers(tauarray, batch)):
            FakeCusolverDn.xgeqrf(h, 0, m, n, _cuda_type(dtype), pa, lda, 0, pt, 0, 0, 0, 0, 0,
                                  scratch.ctypes.data)
        _set_info(info, 0)
    return geqrf_batched


FakeCublas._geqrf_batched = staticmethod(_geqrf_batched)
FakeCublas._rank_k = staticmethod(_rank_k)
FakeCublas._gemm = staticmethod(_gemm)
FakeCublas._symv = staticmethod(_symv)


def without_fused(monkeypatch):
    """Take the rows of decomp's own kernels (fused small stacks, streamed solves) out of its
    route table for one test (tests of the library routes)."""
    from gpulinalg.decomp._gpu import _batched_plan
    for op, rows in list(_batched_plan.TABLE.items()):
        monkeypatch.setitem(_batched_plan.TABLE, op,
                            tuple(r for r in rows if r[2] not in ("fused", "stream")))


def dev(x):
    """``x`` as an emulated device array (its own layout kept)."""
    return np.array(x, order="K").view(FakeDev)


def plain(x):
    """An emulated device array back as a plain NumPy array (no copy)."""
    return np.asarray(x).view(np.ndarray)


@contextlib.contextmanager
def emulated_gpu(monkeypatch):
    """Install the fake CuPy and bindings for the duration of a test."""
    import nvmath.bindings

    from gpulinalg._runtime import streams
    dn, cb = FakeCusolverDn(), FakeCublas()
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    monkeypatch.setitem(sys.modules, "nvmath.bindings.cusolverDn", dn)
    monkeypatch.setitem(sys.modules, "nvmath.bindings.cublas", cb)
    monkeypatch.setattr(nvmath.bindings, "cusolverDn", dn, raising=False)
    monkeypatch.setattr(nvmath.bindings, "cublas", cb, raising=False)
    monkeypatch.setattr(streams, "get_handle", lambda library, device=None: 1)
    from gpulinalg._runtime import kernels as _kernels
    monkeypatch.setattr(_kernels, "_cache", {})  # never leak the fake kernels
    yield
