"""Where one GP log-marginal-likelihood + gradient evaluation spends its time, on the GPU.

``python -m benchmarks.gp_phases [n ...]`` times, for the ``benchmarks.gp`` problem (8-D,
``C * RBF(ARD) + White``), each phase of :func:`gpulinalg.gp._fit_xp.lml_body` on its own (kernel
matrix, Cholesky, the strips of ``L^-1``, the strip-wise gradient), the whole evaluation, and,
for comparison, ``K^-1`` through cuSOLVER's ``potri`` and ``L^-1`` through ``Xtrtri`` or one
triangular solve against the identity. Prints one JSON line per figure.

:func:`fixed_phases` splits a fixed-kernel ``fit`` + ``predict(return_std=True)`` the same way
(kernel matrix, Cholesky in place, ``alpha`` and ``log|K|``, cross-kernel and mean,
triangular solve against the cross-kernel, variances), on the GPU or, without one, on the CPU
(``benchmarks.gp_large`` calls it).
"""

import json
import sys

import numpy as np

from .gp import kernel, make_data
from .timing import time_gpu


def _potri(c):
    """``K^-1`` (lower triangle) in place from the column-major lower Cholesky factor ``c``,
    with cuSOLVER's ``potri``."""
    import cupy
    from nvmath.bindings import cublas, cusolverDn

    from gpulinalg._runtime.streams import get_handle, op_stream
    n = c.shape[0]
    with op_stream():
        h = get_handle("cusolverDn")
        lower = int(cublas.FillMode.LOWER)  # c is the column-major lower factor
        lwork = cusolverDn.dpotri_buffer_size(h, lower, n, c.data.ptr, n)
        work = cupy.empty(lwork, dtype=np.float64)
        info = cupy.zeros(1, dtype=np.int32)
        cusolverDn.dpotri(h, lower, n, c.data.ptr, n, work.data.ptr, lwork, info.data.ptr)
        return int(info.get()[0])


def _trtri(c):
    """``L^-1`` in place from the column-major lower factor ``c``, with cuSOLVER's ``Xtrtri``."""
    import cupy
    import nvmath
    from nvmath.bindings import cublas, cusolverDn

    from gpulinalg._runtime.streams import get_handle, op_stream
    n = c.shape[0]
    with op_stream():
        h = get_handle("cusolverDn")
        args = (h, int(cublas.FillMode.LOWER), int(cublas.DiagType.NON_UNIT), n,
                int(nvmath.CudaDataType.CUDA_R_64F), c.data.ptr, n)
        dsz, hsz = cusolverDn.xtrtri_buffer_size(*args)
        dbuf = cupy.empty(max(int(dsz), 1), dtype=np.uint8)
        hbuf = np.empty(max(int(hsz), 1), dtype=np.uint8)
        info = cupy.zeros(1, dtype=np.int32)
        cusolverDn.xtrtri(*args, dbuf.data.ptr, int(dsz), hbuf.ctypes.data, int(hsz),
                          info.data.ptr)
        return int(info.get()[0])


def _trsm_identity(c):
    """``L^-1`` by one triangular solve against the whole identity (n^3 flops, one call)."""
    import cupy

    from gpulinalg import decomp
    return decomp.solve_triangular(c, cupy.eye(c.shape[0]), lower=True, overwrite_b=True,
                                   check_finite=False)


def run(sizes=(8000, 16000)):
    import cupy

    from gpulinalg import decomp
    from gpulinalg.gp import _engine_cuda, _fit_xp
    from gpulinalg.gp._kernels_xp import compile_kernel
    for n in sizes:
        x, y, _, _ = make_data(n)
        k = kernel()
        plan = compile_kernel(k, x.shape[1])
        xd, yd = cupy.asarray(x), cupy.asarray(y)
        noise = 0.0
        reps = dict(warmup=1, repeat=3)

        def emit(phase, t, **extra):
            print(json.dumps({"n": n, "phase": phase, "median_s": t["median_s"], **extra}),
                  flush=True)

        emit("kernel matrix", time_gpu(lambda: plan.matrix(xd), **reps))
        K = plan.matrix(xd)
        emit("cho_factor", time_gpu(lambda: decomp.cho_factor(K, check_finite=False), **reps))
        c = decomp.cho_factor(K, check_finite=False)
        emit("inverse strips (L^-1)", time_gpu(
            lambda: _fit_xp.inverse_strips(_engine_cuda, c[0]), **reps))
        strips = _fit_xp.inverse_strips(_engine_cuda, c[0])
        a = decomp.cho_solve(c, yd.reshape(-1, 1), check_finite=False)
        emit("strip gradient", time_gpu(
            lambda: _fit_xp._strip_gradient(strips, a, 1, xd, plan), **reps))
        del strips
        emit("cholesky_inverse (strips)", time_gpu(
            lambda: _fit_xp.cholesky_inverse(_engine_cuda, c[0]), **reps))
        emit("potri (K^-1 from L)", time_gpu(lambda: _potri(c[0].copy(order="F")), **reps))
        emit("Xtrtri (L^-1)", time_gpu(lambda: _trtri(c[0].copy(order="F")), **reps))
        emit("trsm against I (L^-1)", time_gpu(lambda: _trsm_identity(c[0]), **reps))
        lt = c[0].copy(order="F")
        _trtri(lt)
        ref = _trsm_identity(c[0])
        emit("Xtrtri vs trsm: max |diff| / max |L^-1|", {"median_s": float(
            cupy.abs(cupy.tril(lt) - ref).max() / cupy.abs(ref).max())})
        del lt, ref
        emit("lml+grad", time_gpu(lambda: _engine_cuda.log_marginal_likelihood(
            xd, yd, noise, None, None, plan=plan, eval_gradient=True), **reps))
        del K, c, a
        cupy.get_default_memory_pool().free_all_blocks()


def fixed_phases(x, y, xq, kernel, noise=1e-10):
    """Seconds of each phase of a fixed-kernel fit + predict(std) through the engine functions
    the estimator runs (each phase synchronized), and the whole of it, on the GPU when there is
    one (else the CPU engine on NumPy)."""
    import time

    import gpulinalg
    from gpulinalg.gp import _fit_xp, _solve_xp
    from gpulinalg.gp._kernels_xp import compile_kernel
    if gpulinalg.gpu_available():
        import cupy

        from gpulinalg.gp import _engine_cuda as la
        xp, sync = cupy, cupy.cuda.Device().synchronize
    else:
        from gpulinalg.gp import _engine_host as la
        xp, sync = np, (lambda: None)
    plan = compile_kernel(kernel, x.shape[1])
    xd, yd, qd = (xp.asarray(v, dtype=np.float64) for v in (x, y, xq))
    out, start = {}, time.perf_counter()

    def mark(name):
        nonlocal start
        sync()
        now = time.perf_counter()
        out[name] = now - start
        start = now
    sync()
    start = time.perf_counter()
    K = _fit_xp._kernel_matrix(xd, None, noise, plan)
    mark("kernel matrix (tiles, NaN check, noise)")
    L = la.cholesky(_solve_xp.symmetric_view(K), True, True, True, K.dtype)
    mark("cholesky in place")
    a = la.cho_solve(L, True, yd, False, L.dtype)
    float(la.logdet(L, L.dtype))
    mark("alpha (cho_solve) + logdet")
    center = xd.mean(axis=0)
    rows = _fit_xp._query_rows(qd.shape[0], xd.shape[0], plan)
    names = ("cross-kernel K(X*, X)", "mean (GEMV)", "triangular solve L^-1 K(X, X*)",
             "variance")
    phases = dict.fromkeys(names, 0.0)

    def add(name):
        mark(name)
        phases[name] += out.pop(name)
    for i0, i1 in rows:
        kt = plan.matrix(qd[i0:i1], xd, shift=center)
        add(names[0])
        mean = kt @ a
        add(names[1])
        v = la.solve_triangular(L, kt.T, 0, True, False, False, L.dtype)
        add(names[2])
        var = plan.diag(qd[i0:i1]) - (v * v).sum(axis=0)
        del kt, v, mean, var
        add(names[3])
    out.update(phases)
    out["query blocks"] = len(rows)
    out["total"] = sum(v for k, v in out.items() if k != "query blocks")
    return out


if __name__ == "__main__":
    run(tuple(int(v) for v in sys.argv[1:]) or (8000, 16000))
