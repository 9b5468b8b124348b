"""A CPU stand-in for the CuPy features the low-rank GPU code uses (arrays, linalg, kernels,
streams, events, pinned memory, sparse), so the GPU branches of truncated_svd, the streamer
and PCA run on a machine without a GPU. The two custom kernels run their NumPy mirrors; the
``gpu``-marked tests run the real ones."""

import contextlib
import sys
import types

import numpy as np
import scipy.linalg
import scipy.sparse

from tests.support import nvrtc as _nvrtc
from gpulinalg.decomp.lowrank import _sketch_cuda, _sketch_host


class Dev(np.ndarray):
    """A NumPy array that answers like a CuPy array."""

    def get(self, stream=None, order="C", out=None, blocking=True):
        if out is not None:
            out[...] = self
            return out
        return np.array(self).view(np.ndarray)

    def set(self, arr, stream=None):
        self[...] = arr


def dev(x):
    if isinstance(x, np.ndarray) and not isinstance(x, Dev):
        return x.view(Dev)
    if isinstance(x, tuple):
        return tuple(dev(v) for v in x)
    return x


def chol_inverse_mirror(g, shift_factor):
    """The fused CUDA kernel of gpulinalg.decomp._kernels._cholinv_cuda, step for step, in NumPy."""
    g = np.asarray(g)
    l = g.shape[0]
    shift = np.trace(g).real * shift_factor + np.finfo(np.float64).tiny
    for _ in range(3):
        a = np.concatenate([g + shift * np.eye(l), np.eye(l)], axis=1)
        failed = False
        for j in range(l):
            piv = a[j, j].real
            if not (piv > 0) or not np.isfinite(piv):
                failed = True
                break
            f = a[j + 1:, j] / piv
            a[j + 1:, j + 1:l + j + 1] -= f[:, None] * a[j, j + 1:l + j + 1]
        if not failed:
            break
        shift *= 1000.0
    if failed:
        return np.full((l, l), np.nan, a.dtype)
    m = a[:, l:] / np.sqrt(np.diag(a).real)[:, None]  # R^-H, lower triangular
    return np.triu(m.conj().T)


class _Elementwise:
    """The Gaussian sketch kernel: the CPU engine's generator makes the same numbers."""

    def __init__(self, in_params, out_params, body, name, preamble=""):
        pass

    def __call__(self, seed, out):
        out[...] = _sketch_host.gaussian_real(out.shape, out.dtype, int(seed))
        return out


def flip_signs_mirror(rows):
    """The sign kernel of gpulinalg.decomp._kernels._ritz_cuda in NumPy."""
    rows = np.asarray(rows)
    piv = rows[np.arange(rows.shape[0]), np.argmax(np.abs(rows), axis=1)]
    return np.where(piv < 0, -1, 1).astype(rows.dtype)


class _Raw:
    max_dynamic_shared_size_bytes = 48 * 1024

    def __init__(self, code, name, options=()):
        _nvrtc.check(name, code, options)  # the real source compiles (where NVRTC is here)
        self.name = name

    def __call__(self, grid, block, args, shared_mem=0):
        getattr(self, "_" + self.name)(grid, block, shared_mem, *args)

    def _gl_flip_signs(self, grid, block, shared_mem, rows, length, step, vstride, sign, scale,
                       y, ylen, ystep, ystride):
        item = rows.itemsize
        assert (step * item, vstride * item, length) == (rows.strides[1], rows.strides[0],
                                                         rows.shape[1])
        if scale:
            assert (ystep * item, ystride * item, ylen) == (y.strides[1], y.strides[0],
                                                            y.shape[1])
        sign[...] = flip_signs_mirror(rows)
        if scale:
            rows *= sign[:, None]
            y *= sign[:, None]

    def _gl_lift(self, grid, block, shared_mem, q, btd, w, u, vh, s, l, k, m, n):
        l = int(l)
        assert q.flags.c_contiguous and btd.flags.c_contiguous  # what the kernel indexes
        u[...] = np.asarray(q, np.float64) @ w[:l]
        vh[...] = (np.asarray(btd) @ w[l:2 * l]).T
        s[...] = w[2 * l]

    def _gl_chol_inv(self, grid, block, shared_mem, g, rinv, l, shift, tiny):
        rinv[...] = chol_inverse_mirror(g, float(shift)).astype(rinv.dtype)


class _Event:
    def synchronize(self):
        pass


class _Stream:
    def __init__(self, non_blocking=False):
        pass

    def record(self, event=None):
        return _Event()

    def wait_event(self, event):
        pass

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


#: The compute capability the stand-in's device reports (CuPy's string; 9.0: the kernels apply).
COMPUTE_CAPABILITY = ["90"]


def _cholesky(a):
    try:
        return dev(np.linalg.cholesky(a))
    except np.linalg.LinAlgError:
        return dev(np.full(a.shape, np.nan, a.dtype))  # CuPy does not check: NaNs


def _modules():
    cupy = types.ModuleType("cupy")
    cupy.ndarray = Dev
    cupy.ElementwiseKernel, cupy.RawKernel = _Elementwise, _Raw

    def wrap(fn):
        return lambda *a, **k: dev(fn(*a, **k))
    for name in ("empty", "zeros", "zeros_like", "ones", "eye", "asarray", "ascontiguousarray",
                 "asfortranarray", "arange", "abs", "where", "argmax", "sqrt", "maximum",
                 "outer", "trace", "isfinite", "conj", "float64", "stack"):
        fn = getattr(np, name)
        setattr(cupy, name, wrap(fn) if callable(fn) and name != "float64" else fn)
    cupy.bool_ = np.bool_
    cupy.array = lambda a, order="K", copy=True, dtype=None: dev(np.array(a, dtype, order=order))
    cupy.linalg = types.SimpleNamespace(
        qr=lambda a, mode="reduced": dev(np.linalg.qr(a, mode=mode)),
        cholesky=_cholesky, svd=lambda a, full_matrices=True, compute_uv=True: dev(
            np.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)),
        eigh=lambda a: dev(np.linalg.eigh(a)))
    cupy.cuda = types.SimpleNamespace(Stream=_Stream, Event=_Event,
                                      get_current_stream=lambda: _Stream(),
                                      Device=lambda i=0: types.SimpleNamespace(
                                          id=i, compute_capability=COMPUTE_CAPABILITY[0]))
    cupyx = types.ModuleType("cupyx")
    cupyx.empty_pinned = np.empty
    cupyx.scipy = types.ModuleType("cupyx.scipy")
    linalg = types.ModuleType("cupyx.scipy.linalg")
    linalg.solve_triangular = lambda a, b, lower=False: dev(
        scipy.linalg.solve_triangular(a, b, lower=lower))
    linalg.lu = lambda a, permute_l=False: dev(scipy.linalg.lu(a, permute_l=permute_l))
    sparse = types.ModuleType("cupyx.scipy.sparse")
    sparse.csr_matrix = _CupySparse
    cupyx.scipy.linalg, cupyx.scipy.sparse = linalg, sparse
    return {"cupy": cupy, "cupyx": cupyx, "cupyx.scipy": cupyx.scipy,
            "cupyx.scipy.linalg": linalg, "cupyx.scipy.sparse": sparse}


class _CupySparse(scipy.sparse.csr_matrix):
    """A SciPy CSR matrix whose products return device arrays (as cupyx's do)."""

    __module__ = "cupyx.scipy.sparse._csr"

    def __matmul__(self, other):
        return dev(np.asarray(scipy.sparse.csr_matrix(self) @ np.asarray(other)))

    def tocsr(self, copy=False):
        return _CupySparse(scipy.sparse.csr_matrix(self))

    @property
    def T(self):
        return _CupySparse(scipy.sparse.csr_matrix(self).T.tocsr())

    def conj(self, copy=True):
        return _CupySparse(scipy.sparse.csr_matrix(self).conj())

    def toarray(self, order=None, out=None):
        return dev(scipy.sparse.csr_matrix(self).toarray())

    def get(self):
        return scipy.sparse.csr_matrix(self)


@contextlib.contextmanager
def emulated_cupy(monkeypatch, free_bytes=1 << 22):
    """Install the stand-in for the duration of a test (the budget reports ``free_bytes``)."""
    from gpulinalg._runtime import budget
    from gpulinalg._runtime import kernels as _kernels
    for name, mod in _modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(_kernels, "_cache", {})  # never leak the fake kernels
    monkeypatch.setattr(_sketch_cuda, "_made", (None, None))  # nor a GPU engine made for it
    monkeypatch.setattr(budget, "available_bytes", lambda device=None: free_bytes)
    yield sys.modules["cupy"]
