"""The GPU engine of gp: ``la`` for the bodies of :mod:`._solve_xp` and :mod:`._fit_xp`, and
the dispatcher's GPU functions of gp's four operations (:class:`._fit_xp.Operations` on it).

``la`` is this module: decomp's internal CuPy layer (:func:`cholesky`, :func:`cho_solve`,
:func:`logdet` of :mod:`gpulinalg.decomp._cholesky_cuda`, :func:`solve_triangular` of
:mod:`gpulinalg.decomp._triangular_cuda`: CuPy arrays on the dispatcher's stream, no second
validation, dispatch or budget question), :func:`cho_inverse` (cuBLAS ``trsm`` + ``gemm``,
or ``potri``), :func:`keep` and :func:`training`. The CPU twin is :mod:`._engine_host`.

The four operations, given CuPy arrays, run inside
:class:`~gpulinalg._runtime.streams.op_stream`: under the dispatcher that is its stream already
(nothing to order); called directly (benchmarks, tests) it puts CuPy's work and the library
handles on one stream, so that a factorization never starts before the kernel matrix it reads
is written.
"""

import sys

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime.dispatch import headroom_bytes, note
from .._runtime.streams import get_handle, op_stream
from ..decomp._cholesky_cuda import cho_solve, cholesky, logdet
from ..decomp._triangular_cuda import solve_triangular
from ._fit_xp import Operations, mirror_lower

__all__ = ["exact_gp_solve", "log_marginal_likelihood", "fit", "predict", "cholesky",
           "cho_solve", "solve_triangular", "logdet", "cho_inverse", "keep", "training"]

_POTRI = {"f": "spotri", "d": "dpotri"}
_PREFIX = {"f": "s", "d": "d"}
PANEL = 1024  # column panels of the triangular solve against I (below the diagonal only)


def cho_inverse(L):
    """``K^-1`` (full, symmetric) from the lower Cholesky factor ``L`` of ``K`` (CuPy, float32
    or float64), on the current stream, no synchronization.

    Fast route (a second ``n x n`` buffer): ``V = L^-1`` by cuBLAS ``trsm`` against the
    identity in column panels (each panel solves only below its diagonal block, as ``V`` is
    lower triangular: about ``0.4 n^3`` flops), then ``K^-1 = V^T V`` by cuBLAS ``gemm`` in
    the same column panels (``K^-1[:, j0:j1] = V[j0:, :]^T V[j0:, j0:j1]``: ``n^3`` flops, half
    a full product) written into ``L``'s memory (no mirror). On the H200 at n=3000 a
    full-identity trsm and a full gemm took 3.0 + 0.9 ms where ``potri`` took 7.8 ms
    (benchmarks.gp_phases); the panels do less of both. Peak memory: the factor plus one
    ``n x n`` buffer (``8 n^2`` bytes in fp64: 72 MB at n=3000, 0.8 GB at n=10000, 3.2 GB at
    n=20000). When the dispatcher found less headroom than that buffer beyond the run's
    estimate (:func:`~gpulinalg._runtime.dispatch.headroom_bytes`), the memory-lean route:
    cuSOLVER's ``potri`` in ``L``'s own memory, then :func:`._fit_xp.mirror_lower`."""
    import cupy
    c = L if L.flags.f_contiguous else cupy.asfortranarray(L)
    headroom = headroom_bytes()
    if headroom is not None and headroom < c.nbytes:
        return _potri(c)
    return _trsm_gemm(c, cupy.zeros(c.shape, dtype=c.dtype))  # the identity: any order


def _trsm_gemm(c, v):
    """``V = L^-1`` in ``v`` (the identity, ``n x n``), then ``V^T V`` into ``c`` (``L``,
    column-major); returns ``c`` as the symmetric ``K^-1``."""
    from nvmath.bindings import cublas
    n, pre, size = c.shape[0], _PREFIX[c.dtype.char], c.dtype.itemsize
    v.reshape(-1)[::n + 1] = 1
    one, zero = np.ones(1, dtype=c.dtype), np.zeros(1, dtype=c.dtype)
    handle = get_handle("cublas")
    trsm, gemm = getattr(cublas, pre + "trsm"), getattr(cublas, pre + "gemm")
    side, lower = int(cublas.SideMode.LEFT), int(cublas.FillMode.LOWER)
    op_n, op_t = int(cublas.Operation.N), int(cublas.Operation.T)
    for j0 in range(0, n, PANEL):  # columns j0:j1 of V are zero above row j0
        off = (j0 * n + j0) * size  # column-major (j0, j0)
        trsm(handle, side, lower, op_n, int(cublas.DiagType.NON_UNIT), n - j0,
             min(PANEL, n - j0), one.ctypes.data, c.data.ptr + off, n, v.data.ptr + off, n)
    for j0 in range(0, n, PANEL):  # K^-1[:, j0:j1] = V[j0:, :]^T V[j0:, j0:j1]
        b = min(PANEL, n - j0)
        gemm(handle, op_t, op_n, n, b, n - j0, one.ctypes.data, v.data.ptr + j0 * size, n,
             v.data.ptr + (j0 * n + j0) * size, n, zero.ctypes.data,
             c.data.ptr + j0 * n * size, n)
    return c.T


def _potri(c):
    """``K^-1`` by cuSOLVER's ``potri`` (``trtri`` + ``lauum``) in ``c``'s own memory
    (column-major ``L``), mirrored (:func:`._fit_xp.mirror_lower`)."""
    import cupy
    from nvmath.bindings import cublas, cusolverDn
    n, name = c.shape[0], _POTRI[c.dtype.char]
    handle, lower = get_handle("cusolverDn"), int(cublas.FillMode.LOWER)
    lwork = getattr(cusolverDn, name + "_buffer_size")(handle, lower, n, c.data.ptr, n)
    work = cupy.empty(max(int(lwork), 1), dtype=c.dtype)
    info = cupy.empty(1, dtype=np.int32)
    getattr(cusolverDn, name)(handle, lower, n, c.data.ptr, n, work.data.ptr, int(lwork),
                              info.data.ptr)
    return mirror_lower(c).T


def keep(train, x, L, alpha):
    """Hand ``fit``'s factor to the ``train`` holder: with ``train.keep`` (a model large enough
    to stay) it stays on the GPU for ``predict``, and reaches the host only if ``L_`` is read;
    otherwise it is downloaded now (a small model)."""
    if train.keep:
        train.device = (x, L, alpha)
    else:
        train.L = _arrays.to_host(L)


def training(train):
    """The fitted ``(x, L, alpha)`` of predict's ``train`` holder on the GPU: uploaded here (on
    the operation's stream; the dispatcher leaves the holder alone) and kept in
    ``train.device`` for the next call when ``train.keep`` (a model large enough to stay)."""
    if train.device is not None:
        return train.device
    host = train.host
    note(uploaded_training_bytes=sum(0 if v is None else v.nbytes for v in host),
         kept_for_next_calls=bool(train.keep))
    arrays = tuple(None if v is None else _arrays.to_device(v) for v in host)
    if train.keep:
        train.device = arrays
    return arrays


_OPS = Operations(sys.modules[__name__])  # la: this module, read at call time


def _on_op_stream(fn):
    def run(*args, **kwargs):
        if not _arrays.any_on_gpu(args):  # a simulated GPU (test provider): host arrays
            return fn(*args, **kwargs)
        with op_stream():
            return fn(*args, **kwargs)
    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


exact_gp_solve, log_marginal_likelihood, fit, predict = (_on_op_stream(f) for f in (
    _OPS.exact_gp_solve, _OPS.log_marginal_likelihood, _OPS.fit, _OPS.predict))
