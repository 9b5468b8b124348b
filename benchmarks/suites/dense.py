"""``python -m benchmarks dense``: fused matmul + bias + ReLU against its peers, same GPU, same run.

Peers (DESIGN §5): torch ``_addmm_activation`` (fused), torch as three kernels (matmul, add,
relu), CuPy as three kernels, nvmath ``Matmul`` planned once and executed (``RELU_BIAS``), and
for the small shapes nvmath's one-shot ``matmul`` (planning on every call). Shapes 128³, 512³,
2048³, 8192³ in fp16, bf16 and fp32, and the seed workload (65536×16384)@(16384×8192) fp16 with
bias + ReLU + the ReLU aux mask (torch and CuPy make the mask with one more kernel).

Every row: ``us_per_call`` (median over repeats; small shapes time a loop of calls and divide,
so host overhead counts), ``tflops`` and ``pct_of_peak`` (of the 989 TFLOP/s fp16 dense peak).
``ours`` is ``gpulinalg.dense.matmul(a, b, bias=bias, activation="relu")`` on CuPy arrays
(float32 in full fp32; ``ours (tf32)`` opts into TF32). ``quick=True`` runs 128³ and 512³ only.
"""

import contextlib

from benchmarks._harness import absent, have, row, time_gpu

SUITE = "dense"
PEAK_TFLOPS = 989.0
SHAPES = (128, 512, 2048, 8192)
SEED = (65536, 16384, 8192)
DTYPES = ("float16", "bfloat16", "float32")
TARGET_US = 25.0
TARGET_SEED_TFLOPS = 700.0


def run(quick=False):
    rows = [_overhead_row()]
    if not have("cupy"):
        return rows + [absent(SUITE, "fused matmul", "all", "cupy not installed")]
    import gpulinalg
    if not gpulinalg.gpu_available():
        return rows + [absent(SUITE, "fused matmul", "all", "no GPU")]
    shapes = SHAPES[:2] if quick else SHAPES
    for n in shapes:
        for dtype in DTYPES:
            rows += _case(n, n, n, dtype, aux=False, quick=quick)
    if not quick:
        rows += _case(*SEED, "float16", aux=True, quick=False)
    # last: its cProfile pass (sys.monitoring on Python 3.12) must not perturb the timed rows
    rows += _breakdown_rows()
    return rows + _verdicts(rows)


def _overhead_row():
    from benchmarks.suites import dense_overhead
    us = dense_overhead.measure(calls=3000)
    return row(SUITE, "CPU-side overhead per call (fake GPU: validation + dispatch + plan lookup)",
               "ours", {"median_s": us * 1e-6, "min_s": us * 1e-6, "runs": 5},
               us_per_call=us)


def _data(m, k, n, dtype):
    """CuPy operands (and torch views of the same memory when torch has CUDA)."""
    import cupy
    rng = cupy.random.default_rng(0)
    torch = _torch()
    if dtype == "bfloat16":
        if torch is None:
            return None, "bfloat16 operands need torch with CUDA"
        t = [torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in ((m, k), (k, n), (n,))]
        try:
            c = [cupy.from_dlpack(x) for x in t]
        except Exception as exc:  # CuPy without bfloat16 (ml_dtypes missing)
            return {"torch": t, "cupy": None}, f"CuPy cannot hold bfloat16 ({exc})"
        return {"torch": t, "cupy": c}, None
    c = [rng.standard_normal(s, dtype=cupy.float32).astype(dtype) for s in ((m, k), (k, n), (n,))]
    t = [torch.from_dlpack(x) for x in c] if torch is not None else None
    return {"torch": t, "cupy": c}, None


def _torch():
    if not have("torch"):
        return None
    import torch
    return torch if torch.cuda.is_available() else None


def _impls(data, aux, small, dtype):
    """``name -> callable`` for every implementation that can run this case."""
    impls = {}
    if data["cupy"] is not None:
        impls.update(_ours(*data["cupy"], aux, dtype))
        impls.update(_nvmath(*data["cupy"], aux, small))
        impls.update(_cupy3(*data["cupy"], aux))
    if data["torch"] is not None:
        impls.update(_torch_impls(*data["torch"], aux))
    return impls


@contextlib.contextmanager
def through_nvmath_execute():
    """Plan-cache hits go through nvmath's public ``Matmul.reset_operands_unchecked`` +
    ``execute`` instead of gpulinalg's direct ``cublasLtMatmul`` launch (the comparison row).

    Patches ``Plan.run`` of ``gpulinalg.dense._plans_cuda`` for the duration (all threads);
    the production code has no switch for it.
    """
    from gpulinalg.dense import _plans_cuda
    direct = _plans_cuda.Plan.run
    _plans_cuda.Plan.run = _run_public
    try:
        yield
    finally:
        _plans_cuda.Plan.run = direct


def _run_public(plan, a, b, c, alpha, beta, inputs, stream, transposed=False):
    """``Plan.run`` through nvmath's public execute path (same arguments and result)."""
    mm = plan.mm
    plan.bound.clear()  # nvmath sets the descriptor's pointers and scalars itself here
    plan.scalars = (None, None)
    if transposed:  # nvmath needs the planned operands themselves: views
        a, b, c = _t(a), _t(b), _t(c)
    mm.reset_operands_unchecked(a=a, b=b, c=c, alpha=alpha,
                                beta=beta if c is not None else None,
                                epilog_inputs=dict(inputs) if inputs else None, stream=stream)
    result = mm.execute(stream=stream)
    mm.release_operands()
    out, extra = result if isinstance(result, tuple) else (result, {})
    return (_t(out) if transposed else out), extra


def _t(x):
    return None if x is None else x.swapaxes(-1, -2)


def _ours(a, b, bias, aux, dtype):
    from gpulinalg.dense import matmul

    def via_nvmath_execute():
        with through_nvmath_execute():
            return matmul(a, b, bias=bias, activation="relu", return_aux=aux)
    out = {"ours": lambda: matmul(a, b, bias=bias, activation="relu", return_aux=aux),
           "ours (hits via nvmath reset_operands+execute)": via_nvmath_execute}
    if not _small(a):
        out["ours (autotune)"] = lambda: matmul(a, b, bias=bias, activation="relu",
                                                return_aux=aux, autotune=True)
    if dtype == "float32":
        out["ours (tf32)"] = lambda: matmul(a, b, bias=bias, activation="relu", return_aux=aux,
                                            compute_type="tf32")
    return out


def _small(a):
    return a.shape[0] * a.shape[1] <= 512 * 512


def _nvmath(a, b, bias, aux, small):
    """nvmath planned once (its native (M,)-bias layout), and one-shot for small shapes."""
    if not have("nvmath"):
        return {}
    from nvmath.linalg.advanced import Matmul, MatmulEpilog, matmul
    epilog = MatmulEpilog.RELU_AUX_BIAS if aux else MatmulEpilog.RELU_BIAS
    bias_m = bias[: a.shape[0]] if bias.shape[0] >= a.shape[0] else None
    if bias_m is None:
        import cupy
        bias_m = cupy.zeros(a.shape[0], dtype=a.dtype)
    mm = Matmul(a, b)
    mm.plan(epilog=epilog, epilog_inputs={"bias": bias_m})
    impls = {"nvmath planned": mm.execute}
    if small:
        impls["nvmath one-shot"] = lambda: matmul(a, b, epilog=epilog,
                                                  epilog_inputs={"bias": bias_m})
    return impls


def _cupy3(a, b, bias, aux):
    import cupy

    def three():
        out = cupy.maximum(a @ b + bias, 0)
        return (out, out > 0) if aux else out
    return {"cupy 3 kernels" + (" + mask" if aux else ""): three}


def _torch_impls(a, b, bias, aux):
    import torch

    def fused():
        out = torch._addmm_activation(bias, a, b, use_gelu=False)
        return (out, out > 0) if aux else out

    def three():
        out = torch.relu(a @ b + bias)
        return (out, out > 0) if aux else out
    return {"torch _addmm_activation" + (" + mask" if aux else ""): fused,
            "torch 3 kernels" + (" + mask" if aux else ""): three}


def _case(m, k, n, dtype, aux, quick):
    import cupy
    case = f"{dtype} ({m}x{k})@({k}x{n}) bias+relu" + (" +aux" if aux else "")
    data, why = _data(m, k, n, dtype)
    if data is None:
        return [absent(SUITE, case, "all", why)]
    small = m * k <= 512 * 512
    rows = [] if why is None else [absent(SUITE, case, "ours / cupy / nvmath", why)]
    flops = 2.0 * m * n * k
    for name, fn in _impls(data, aux, small, dtype).items():
        rows.append(_measure(case, name, fn, flops, small, quick))
    del data
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _measure(case, name, fn, flops, small, quick):
    calls = 200 if small else 1
    repeat = (5 if quick else 10) if small else (3 if flops > 1e14 else 10)

    def loop():
        for _ in range(calls):
            fn()
    try:
        t = time_gpu(loop, warmup=2, repeat=repeat)
    except Exception as exc:  # a peer that cannot run this case is reported, not fatal
        return absent(SUITE, case, name, f"{type(exc).__name__}: {exc}")
    per_call = {k: (v / calls if k.endswith("_s") else v) for k, v in t.items()}
    us = per_call["median_s"] * 1e6
    tflops = flops / per_call["median_s"] / 1e12
    return row(SUITE, case, name, per_call, calls_per_sample=calls, us_per_call=round(us, 2),
               tflops=round(tflops, 2), pct_of_peak=round(100 * tflops / PEAK_TFLOPS, 2))


def _verdicts(rows):
    """One row per DESIGN §5 target: met or missed, and by how much."""
    out = []
    by_case = {}
    for r in rows:
        if "tflops" in r:
            by_case.setdefault(r["case"], {})[r["impl"]] = r
    for case, impls in by_case.items():
        # like for like: TF32 is not compared with the full-float32 peers
        ours = min((r for k, r in impls.items() if k.startswith("ours") and "tf32" not in k),
                   key=lambda r: r["median_s"], default=None)
        peers = [r for k, r in impls.items() if not k.startswith("ours")]
        if ours is None or not peers:
            continue
        best = min(peers, key=lambda r: r["median_s"])
        verdict = {"best_peer": best["impl"], "best_peer_us": best["us_per_call"],
                   "best_peer_tflops": best["tflops"], "ours_impl": ours["impl"],
                   "ours_us": ours["us_per_call"], "ours_tflops": ours["tflops"],
                   "speedup_vs_best_peer": round(best["median_s"] / ours["median_s"], 3)}
        if " (128x" in case or " (512x" in case:
            verdict["target"] = f"<= {TARGET_US} us/call"
            verdict["met"] = ours["us_per_call"] <= TARGET_US
        elif case.startswith("float16 (65536x"):
            verdict["target"] = f">= {TARGET_SEED_TFLOPS} TFLOP/s"
            verdict["met"] = ours["tflops"] >= TARGET_SEED_TFLOPS
        else:
            verdict["target"] = ">= best peer"
            verdict["met"] = ours["median_s"] <= best["median_s"]
        out.append({"suite": SUITE, "case": case, "impl": "verdict", **verdict})
    return out


def _wall_us(fn, calls=1000):
    """Wall-clock microseconds per call over ``calls`` calls, device synchronized at the end."""
    import time

    import cupy
    for _ in range(20):
        fn()
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def _breakdown_rows(n=128):
    """Where the time of one small fused call goes: each stage of the hot path on its own."""
    import cupy

    import gpulinalg
    from gpulinalg._runtime import budget, dispatch, streams
    from gpulinalg.dense import _matmul_cuda, _plans_cuda, _spec, matmul
    rng = cupy.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16) for _ in "ab")
    bias = rng.standard_normal(n, dtype=cupy.float32).astype(cupy.float16)
    spec = _spec.Spec(activation="relu", bias_form="n", transposed=True, out_shape=(n, n),
                        batch_shape=())
    matmul(a, b, bias=bias, activation="relu")
    plan = next(reversed(_plans_cuda._cache.plans.values()))
    bt, at = b.T, a.T
    ptr = cupy.cuda.get_current_stream().ptr  # dense runs on the caller's stream
    ident = lambda a, b, bias, c, spec: a  # noqa: E731

    def under_stream(fn):
        def run():
            with streams.op_stream():
                fn()
        return run
    stages = {
        "full matmul() call": lambda: matmul(a, b, bias=bias, activation="relu"),
        "dispatch() with an identity GPU function": lambda: dispatch.dispatch(
            "dense.matmul", ident, ident, (a, b, bias, None, spec), nbytes=1 << 20,
            same_package=True, own_stream=False),
        "op_stream() enter + exit (not on dense's path)": under_stream(lambda: None),
        "_matmul_cuda.matmul (views, plan lookup, launch)":
            lambda: _matmul_cuda.matmul(a, b, bias, None, spec),
        "Plan.run (alloc + pointers + launch)":
            lambda: plan.run(bt, at, None, 1.0, 0.0, {"bias": bias}, ptr),
        "raw cublasLtMatmul (plan's objects, output preallocated)":
            _raw_launch(plan, bt, at, ptr),
        "result allocation (cupy.ndarray on a pool block, plan's layout)":
            lambda: plan.new_array(plan.out_t[0], plan.out_t[1], plan.alloc(plan.out_t[2]),
                                   plan.out_t[3]),
        "budget.fits(1 MiB)": lambda: budget.fits(1 << 20),
        "cudaMemGetInfo": cupy.cuda.runtime.memGetInfo,
        "cupy.empty((128, 128), float16)": lambda: cupy.empty((n, n), cupy.float16),
        "validation only (dispatch stubbed)": _front_only(a, b, bias),
    }
    case = f"per-call breakdown, fp16 {n}^3 bias+relu"
    with gpulinalg.config(backend="gpu"):
        rows = [row(SUITE, case, name, {"median_s": us * 1e-6, "min_s": us * 1e-6, "runs": 1000},
                    us_per_call=round(us, 2))
                for name, fn in stages.items() for us in [_wall_us(fn)]]
        full = stages["full matmul() call"]
        host, device = _host_and_device_us(full)
        rows.append(row(SUITE, case, "full call: host issue time vs device span",
                        {"median_s": host * 1e-6, "min_s": host * 1e-6, "runs": 300},
                        host_us_per_call=round(host, 2), device_us_per_call=round(device, 2)))
        rows.append(row(SUITE, case, "full call: cProfile top functions (us/call)",
                        {"median_s": 0.0, "min_s": 0.0, "runs": 2000}, top=_profile(full)))
    return rows


def _host_and_device_us(fn, calls=300):
    """Host time to issue ``calls`` calls, and the device's span for them (events on the
    caller's stream): a device span well above the host time means the GPU is the limit."""
    import time

    import cupy
    stream = cupy.cuda.get_current_stream()
    fn()
    cupy.cuda.Device().synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(stream)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - t0
    end.record(stream)
    end.synchronize()
    return host / calls * 1e6, cupy.cuda.get_elapsed_time(start, end) * 1e3 / calls


def _profile(fn, calls=2000, top=25):
    """``[(function, tottime us/call, cumtime us/call)]`` of the heaviest functions."""
    import cProfile
    import pstats

    import cupy
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    cupy.cuda.Device().synchronize()
    stats = pstats.Stats(prof).stats
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    return [(f"{path.rsplit('/', 2)[-1]}:{line}({name})", round(tt / calls * 1e6, 2),
             round(ct / calls * 1e6, 2)) for (path, line, name), (_, _, tt, ct, _) in ranked]


def _raw_launch(plan, a_planned, b_planned, stream_ptr):
    """One ``cublasLtMatmul`` with everything prepared: the launch's own host cost."""
    shape, dtype, nbytes, strides = plan.out
    out = plan.new_array(shape, dtype, plan.alloc(nbytes), strides)
    ws = plan.ws.get(stream_ptr)
    if ws is None and plan.ws_size:
        ws = plan.ws[stream_ptr] = plan.new_array((plan.ws_size,), "uint8",
                                                  plan.alloc(plan.ws_size))
    ws_ptr = ws.data.ptr if ws is not None else 0
    la, lb, lc, ld = plan.layouts
    args = (plan.handle, plan.desc, plan.scalar_ptrs[0], a_planned.data.ptr, la,
            b_planned.data.ptr, lb, plan.scalar_ptrs[1], 0, lc, out.data.ptr, ld, plan.algo_ptr,
            ws_ptr, plan.ws_size, stream_ptr)
    launch = plan.launch
    return lambda: launch(*args)


def _front_only(a, b, bias):
    from gpulinalg.dense import _matmul_api

    def run():
        real = _matmul_api.dispatch
        _matmul_api.dispatch = lambda *args, **kw: None
        try:
            _matmul_api.matmul(a, b, bias=bias, activation="relu")
        finally:
            _matmul_api.dispatch = real
    return run
