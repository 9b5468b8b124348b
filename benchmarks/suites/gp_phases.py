"""Where one GP log-marginal-likelihood + gradient evaluation spends its time, on the GPU.

``python -m benchmarks.suites.gp_phases [n ...]`` times, for the ``benchmarks.suites.gp`` problem
(8-D, ``C * RBF(ARD) + White``), each phase of :func:`gpulinalg.gp._fit_xp.lml_body` on its own
(:func:`lml_phases`: kernel matrix, Cholesky in place, ``alpha``, ``K^-1`` by the engine's
``cho_inverse`` (GPU: ``L^-1`` by panelled ``trsm``, then ``gemm``; CPU: ``potri``), ``W`` and the
gradient contraction), the same for the GPU's fused evaluation (:func:`fused_phases`), the
host time around the engine (:func:`host_overhead`), the whole evaluation through the engine
function and through the estimator, and, on the GPU, other ways to ``K^-1`` or ``L^-1`` (``potri``,
``Xtrtri``, a triangular solve against the identity, the GEMM ``L^-T L^-1``). Prints one JSON
line per figure; runs on the CPU engine without a GPU. Engine functions run inside
``op_stream`` as under the dispatcher.

:func:`fixed_phases` splits a fixed-kernel ``fit`` + ``predict(return_std=True)`` the same way
(kernel matrix, Cholesky in place, ``alpha`` and ``log|K|``, cross-kernel and mean,
triangular solve against the cross-kernel, variances), on the GPU or, without one, on the CPU
(``benchmarks.suites.gp_large`` calls it).
"""

import json
import sys

import numpy as np

from benchmarks.suites.gp import kernel, make_data
from benchmarks._harness import time_gpu


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


def _cho_inverse(c):
    """The GPU engine's ``cho_inverse`` (``L^-1`` by GEMM merges, then ``V^T V``) on the
    column-major lower factor ``c``, on the operation stream, synchronized."""
    import cupy

    from gpulinalg._runtime.streams import op_stream
    from gpulinalg.gp import _engine_cuda
    with op_stream():
        out = _engine_cuda.cho_inverse(c)
        cupy.cuda.get_current_stream().synchronize()
    return out


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


def _engine():
    """``(la, xp, sync, stream context)``: the GPU engine on the dispatcher's kind of stream
    when there is a GPU (engine functions assume it: see ``gp._engine_cuda``), else the CPU
    engine."""
    import contextlib

    import gpulinalg
    if gpulinalg.gpu_available():
        import cupy

        from gpulinalg._runtime.streams import op_stream
        from gpulinalg.gp import _engine_cuda
        return _engine_cuda, cupy, cupy.cuda.Device().synchronize, op_stream
    from gpulinalg.gp import _engine_host
    return _engine_host, np, (lambda: None), contextlib.nullcontext


def _marker(sync):
    import time
    out, state = {}, {"t": time.perf_counter()}

    def mark(name):
        sync()
        now = time.perf_counter()
        out[name] = out.get(name, 0.0) + now - state["t"]
        state["t"] = now
    sync()
    state["t"] = time.perf_counter()
    return out, mark


def lml_phases(x, y, kernel, noise=1e-10):
    """Seconds of each phase of one log-marginal-likelihood + gradient evaluation, as
    :func:`gpulinalg.gp._fit_xp.lml_body` runs it (each phase synchronized), and the whole; on
    the GPU when there is one (else the CPU engine on NumPy)."""
    from gpulinalg.gp import _fit_xp, _solve_xp
    from gpulinalg.gp._kernels_xp import compile_kernel
    la, xp, sync, ctx = _engine()
    plan = compile_kernel(kernel, x.shape[1])
    with ctx():
        xd, yd = (xp.asarray(v, dtype=np.float64) for v in (x, y))
        out, mark = _marker(sync)
        K, bad = _fit_xp._kernel_matrix(xd, None, noise, plan, lazy=True)
        mark("kernel matrix (+ NaN check)")
        L = la.cholesky(_solve_xp.symmetric_view(K), True, True, False, K.dtype)
        mark("cholesky in place")
        a = la.cho_solve(L, True, yd.reshape(-1, 1), False, L.dtype)
        float(la.logdet(L, L.dtype))
        mark("alpha + logdet")
        kinv = la.cho_inverse(L)
        mark("K^-1 (cho_inverse: GEMM L^-1 + V^T V panels)")

        def w_rows(i0, i1):
            w = kinv[i0:i1]
            w *= -1.0
            w += a[i0:i1] @ a.T
            return w
        grad = plan.contract(xd, w_rows)
        float(grad.sum())
        bool(bad)
        mark("W + gradient contraction")
        del K, L, kinv
    out["total"] = sum(out.values())
    return out


def fused_phases(x, y, kernel, noise=1e-10):
    """Seconds of each phase of the GPU's fused evaluation (:mod:`gpulinalg.gp._fused_cuda`,
    each phase synchronized) for a kernel of its form, and the whole; ``None`` without a GPU
    or for another kernel."""
    import gpulinalg
    if not gpulinalg.gpu_available():
        return None
    import cupy

    from gpulinalg.decomp._kernels._cholinv_cuda import gram_lower
    from gpulinalg.gp import _engine_cuda, _fused_cuda
    from gpulinalg.gp._kernels_xp import compile_kernel, fused_form
    from gpulinalg._runtime.streams import op_stream
    form = fused_form(compile_kernel(kernel, x.shape[1]), x.shape[1])
    if form is None:
        return None
    with op_stream():
        xd, yd = cupy.asarray(x, dtype=np.float64), cupy.asarray(y, dtype=np.float64)
        out, mark = _marker(cupy.cuda.get_current_stream().synchronize)
        k, z, flag = _fused_cuda.build(xd, noise, form)
        mark("kernel matrix (one kernel)")
        lf = _fused_cuda.factor(_engine_cuda, k, flag)
        mark("cholesky in place (decomp, one sync)")
        v = _fused_cuda.inverse(lf)
        mark("L^-1 (leaf kernel + doubling GEMMs)")
        lml, a = _fused_cuda.likelihood(v, yd)
        mark("alpha, log|K|, lml (GEMV from L^-1)")
        gram_lower(v, x.shape[0], lf)
        mark("K^-1 lower = V^T V (panel GEMMs)")
        acc = _fused_cuda.contract(lf, a, z, form)
        mark("gradient contraction (one kernel)")
        _fused_cuda.read_back(lml, acc, flag, form)
        mark("read back (one copy)")
        del k, lf, v
    out["total"] = sum(out.values())
    return out


def host_overhead(x, y, kernel, noise=1e-10, repeat=20):
    """Seconds per evaluation spent on the host around the engine: the estimator's
    ``log_marginal_likelihood(theta, eval_gradient=True)`` (theta set on the kernel, plan
    compiled, dispatch, uploads, read-back) minus the engine function on device-resident
    inputs, medians of ``repeat`` synchronized calls; and the estimator's call itself."""
    from gpulinalg.gp import GaussianProcessRegressor
    from gpulinalg.gp._kernels_xp import compile_kernel
    la, xp, sync, ctx = _engine()
    gp = GaussianProcessRegressor(kernel, alpha=noise, optimizer=None).fit(x, y)
    theta = kernel.theta
    plan = compile_kernel(kernel, x.shape[1])

    def med(fn):
        return _wall(fn, sync, warmup=1, repeat=repeat)["median_s"]
    est = med(lambda: gp.log_marginal_likelihood(theta, eval_gradient=True, clone_kernel=False))
    with ctx():
        xd, yd = xp.asarray(x, dtype=np.float64), xp.asarray(y, dtype=np.float64)
        eng = med(lambda: la.log_marginal_likelihood(xd, yd, noise, None, None, plan=plan,
                                                     eval_gradient=True))
    return {"estimator_s": est, "engine_s": eng, "host_overhead_s": est - eng}


def run(sizes=(3000, 16000)):
    """One JSON line per figure: :func:`lml_phases`, the whole evaluation through the engine
    (and through the estimator: dispatch, uploads), and ways of making ``K^-1`` or ``L^-1``."""
    import gpulinalg
    from gpulinalg import decomp
    from gpulinalg.gp import GaussianProcessRegressor
    from gpulinalg.gp._kernels_xp import compile_kernel
    gpu = gpulinalg.gpu_available()
    la, xp, sync, ctx = _engine()
    for n in sizes:
        x, y, _, _ = make_data(n)
        k = kernel()
        plan = compile_kernel(k, x.shape[1])
        reps = dict(warmup=1, repeat=3)

        def emit(phase, t, **extra):
            print(json.dumps({"n": n, "gpu": gpu, "phase": phase, "median_s": t["median_s"],
                              **extra}), flush=True)

        lml_phases(x, y, k)  # warm: compiled kernels, handles
        phases = [lml_phases(x, y, k) for _ in range(3)]
        for name in phases[0]:
            emit("generic lml+grad: " + name,
                 {"median_s": float(np.median([p[name] for p in phases]))})
        if fused_phases(x, y, k) is not None:  # the first call compiles its kernels
            phases = [fused_phases(x, y, k) for _ in range(3)]
            for name in phases[0]:
                emit("fused lml+grad: " + name,
                     {"median_s": float(np.median([p[name] for p in phases]))})
        emit("host around the engine", {"median_s": host_overhead(x, y, k)["host_overhead_s"]})
        with ctx():
            xd, yd = xp.asarray(x), xp.asarray(y)

            def engine():
                out = la.log_marginal_likelihood(xd, yd, 1e-10, None, None, plan=plan,
                                                 eval_gradient=True)
                return float(out[0]), np.asarray(out[1].get() if hasattr(out[1], "get") else out[1])
            t = _wall(engine, sync, **reps)
            emit("lml+grad (engine function, one sync)", t)
        gp = GaussianProcessRegressor(k, alpha=1e-10, optimizer=None).fit(x, y)
        emit("lml+grad (estimator: dispatch, upload, host result)", _wall(
            lambda: gp.log_marginal_likelihood(k.theta, eval_gradient=True), sync, **reps))
        if not gpu:
            continue
        with ctx():
            K = plan.matrix(xd)
        c = decomp.cho_factor(K, check_finite=False)
        emit("potri (K^-1 from L, lower)", time_gpu(lambda: _potri(c[0].copy(order="F")),
                                                    **reps))
        emit("cho_inverse (GEMM L^-1 + V^T V panels)", time_gpu(
            lambda: _cho_inverse(c[0].copy(order="F")), **reps))
        emit("Xtrtri (L^-1)", time_gpu(lambda: _trtri(c[0].copy(order="F")), **reps))
        emit("trsm against I (L^-1)", time_gpu(lambda: _trsm_identity(c[0]), **reps))
        linv = _trsm_identity(c[0])
        emit("GEMM L^-T L^-1 (K^-1 from L^-1)", time_gpu(lambda: linv.T @ linv, **reps))
        del K, c, linv
        xp.get_default_memory_pool().free_all_blocks()


def _wall(fn, sync, warmup=1, repeat=3):
    import time
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return {"median_s": float(np.median(times))}


def fixed_phases(x, y, xq, kernel, noise=1e-10):
    """Seconds of each phase of a fixed-kernel fit + predict(std) through the engine functions
    the estimator runs (each phase synchronized), and the whole of it, on the GPU when there is
    one (else the CPU engine on NumPy)."""
    la, xp, sync, ctx = _engine()
    with ctx():
        return _fixed_phases(la, xp, sync, x, y, xq, kernel, noise)


def _fixed_phases(la, xp, sync, x, y, xq, kernel, noise):
    import time

    from gpulinalg.gp import _fit_xp, _solve_xp
    from gpulinalg.gp._kernels_xp import compile_kernel
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


def main(argv=None):
    """``python -m benchmarks gp_phases [n ...]`` (default 3000 16000)."""
    args = sys.argv[1:] if argv is None else argv
    run(tuple(int(v) for v in args) or (3000, 16000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
