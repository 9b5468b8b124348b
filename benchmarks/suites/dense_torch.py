"""dense for torch users: torch tensors in, peers in the same process on the same inputs.

* ``per_call``: µs per call of bias+ReLU at 128³/512³/2048³ fp16 (ours with torch tensors,
  ``torch._addmm_activation``, ours with CuPy views of the same memory): a loop of calls and one
  synchronize (host-bound: what a training loop sees); cold first call (plan cache and call memo
  cleared) and warm median.
* ``tflops``: bias+ReLU / bias+GELU at 4096³ and 8192³, fp16 and bf16, CUDA events, ours and
  torch interleaved (5 samples of 20 calls; until 2026-12-02 ours' calls then torch's).
* ``tflops_kernels`` (not in the default sections): at 4096³, ours with the heuristic's plan,
  ours autotuned and torch, timed interleaved, each row with the kernels of one call
  from the torch profiler: whether torch runs another kernel where it is ahead, and whether
  autotuning finds one as fast.
* ``layer``: ``FusedLinear`` against ``nn.Linear`` + activation, forward + backward, batch
  256/8192 × width 1024/4096 (square), fp16/bf16, eager; and under ``torch.compile`` (fp16,
  batch 8192, width 1024). Ours and torch are timed interleaved: 9 samples of 50 steps each
  (CUDA events around the loop, garbage collection paused), the median per step; the spread
  ((max - min) / median) and, for ours, the slow roads taken in the timed steps (plans made,
  public-road calls, full dispatch decisions: 0 when every step reuses its memo and plans).
  Also the kernels of one step from the torch profiler (inner layer, first layer, autotuned).
* ``mlp`` (not in the default sections): ``FusedMLP`` of 4 square layers against
  ``nn.Sequential(nn.Linear, act, ..., nn.Linear)``, forward + backward, widths 1024/4096 ×
  batch 256/8192 × fp16/bf16 × ReLU/GELU, interleaved as ``layer``; and the kernels of one
  step of each (batch 8192, width 1024, fp16).

``python -m benchmarks dense_torch --json out.json`` (or
``python -m benchmarks.suites.dense_torch``); ``--quick`` runs tiny sizes (also on a CPU-only torch,
timing with perf_counter).
"""

import statistics
import time

from benchmarks._harness import absent, row

SUITE = "dense_torch"


def _torch():
    import torch
    return torch


def _cuda():
    torch = _torch()
    return torch.cuda.is_available()


def _sync():
    if _cuda():
        _torch().cuda.synchronize()


def _summary(times):
    return {"median_s": statistics.median(times), "min_s": min(times), "runs": len(times)}


def _events(fn, warmup=3, repeat=10, inner=1):
    """Seconds per ``fn()`` (median of ``repeat`` timings of ``inner`` calls each)."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    _sync()
    times = []
    for _ in range(repeat):
        if _cuda():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times.append((time.perf_counter() - t0) / inner)
    return _summary(times)


def _cold(fn):
    """Seconds of one first call (after the caches are cleared), synchronized."""
    from gpulinalg.dense import _calls, clear_plan_cache
    clear_plan_cache()
    _calls.clear()
    _sync()
    t0 = time.perf_counter()
    fn()
    _sync()
    return time.perf_counter() - t0


def _wall_per_call(fn, calls):
    """Host-bound µs per call: ``calls`` calls, one synchronize, median of 5."""
    fn()
    _sync()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync()
        times.append((time.perf_counter() - t0) / calls)
    return _summary(times)


def _device():
    return "cuda" if _cuda() else "cpu"


def per_call_rows(sizes, calls):
    torch = _torch()
    from gpulinalg.dense import matmul
    rows = []
    dev = _device()
    dtype = torch.float16 if dev == "cuda" else torch.float32
    for n in sizes:
        g = torch.Generator(device=dev).manual_seed(n)
        a = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
        b = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
        bias = torch.randn(n, device=dev, dtype=dtype, generator=g)
        impls = {"gpulinalg torch in": lambda: matmul(a, b, bias=bias, activation="relu"),
                 "torch _addmm_activation": lambda: torch._addmm_activation(bias, a, b)}
        if dev == "cuda":
            try:
                import cupy
                ca, cb, cbias = (cupy.from_dlpack(t) for t in (a, b, bias))
                impls["gpulinalg cupy in"] = lambda: matmul(ca, cb, bias=cbias, activation="relu")
            except ImportError:
                rows.append(absent(SUITE, f"per_call {n}^3", "gpulinalg cupy in", "no cupy"))
        for name, fn in impls.items():
            cold = _cold(fn) if name.startswith("gpulinalg") else None
            t = _wall_per_call(fn, calls)
            rows.append(row(SUITE, f"per_call {n}^3 {str(dtype)[6:]} bias+relu", name, t,
                            us_per_call=t["median_s"] * 1e6, cold_first_call_s=cold))
    return rows


def _square_operands(n, dname):
    """``(a, b, bias)``: ``n x n`` torch operands and a bias of dtype ``dname``, seeded by
    ``n``."""
    torch = _torch()
    dev, dtype = _device(), getattr(torch, dname)
    g = torch.Generator(device=dev).manual_seed(n)
    return tuple(torch.randn(*shape, device=dev, dtype=dtype, generator=g)
                 for shape in ((n, n), (n, n), (n,)))


def _torch_fused(a, b, bias, act):
    """torch's fused bias + activation product, the peer of ``matmul(..., activation=act)``."""
    torch = _torch()
    return lambda: torch._addmm_activation(bias, a, b, use_gelu=act == "gelu")


def _timed_calls(impls, repeat, rounds):
    """``(colds, timed)``: the cold first call of each of ours (``impls`` named "gpulinalg
    ..."), then every impl timed interleaved after three warm-up calls (:func:`_interleaved`:
    a card that clocks down under sustained load slows them alike)."""
    colds = {name: _cold(fn) for name, fn in impls.items() if name.startswith("gpulinalg")}
    for fn in impls.values():
        for _ in range(3):
            fn()
    return colds, _interleaved(impls, repeat, rounds)


def tflops_rows(sizes, dtypes, repeat, rounds=5):
    """TFLOP/s of ours and ``torch._addmm_activation`` per case, timed interleaved
    (:func:`_interleaved`: ``rounds`` samples of ``repeat`` calls each, after three warm-up
    calls); ours' row also has its cold first call."""
    from gpulinalg.dense import matmul
    rows = []
    for n in sizes:
        for dname in dtypes:
            a, b, bias = _square_operands(n, dname)
            flops = 2.0 * n ** 3
            for act in ("relu", "gelu"):
                impls = {"gpulinalg torch in": lambda act=act: matmul(a, b, bias=bias,
                                                                      activation=act),
                         "torch _addmm_activation": _torch_fused(a, b, bias, act)}
                colds, timed = _timed_calls(impls, repeat, rounds)
                for name, t in timed.items():
                    rows.append(row(SUITE, f"tflops {n}^3 {dname} bias+{act}", name, t,
                                    tflops=flops / t["median_s"] / 1e12,
                                    cold_first_call_s=colds.get(name)))
    return rows


def tflops_kernel_rows(sizes, dtypes, repeat, rounds=3):
    """Ours (heuristic plan; autotuned plan) against ``torch._addmm_activation``: TFLOP/s,
    timed interleaved (:func:`_interleaved`: ``rounds`` samples of ``repeat`` calls each, after
    three warm-up calls), and the kernels of one call (name, count, GPU µs) from the torch
    profiler."""
    from gpulinalg.dense import matmul
    rows = []
    for n in sizes:
        for dname in dtypes:
            a, b, bias = _square_operands(n, dname)
            for act in ("relu", "gelu"):
                impls = {
                    "gpulinalg heuristic": lambda act=act: matmul(
                        a, b, bias=bias, activation=act, autotune=False),
                    "gpulinalg autotuned": lambda act=act: matmul(
                        a, b, bias=bias, activation=act, autotune=True),
                    "torch _addmm_activation": _torch_fused(a, b, bias, act)}
                colds, timed = _timed_calls(impls, repeat, rounds)
                for name, fn in impls.items():
                    t = timed[name]
                    rows.append(row(SUITE, f"tflops kernels {n}^3 {dname} bias+{act}", name, t,
                                    tflops=2.0 * n ** 3 / t["median_s"] / 1e12,
                                    cold_first_call_s=colds.get(name),
                                    kernels=_step_kernels(fn) if _cuda() else []))
    return rows


def _models(batch, width, dtype, act, first=False):
    torch = _torch()
    from gpulinalg.dense import FusedLinear
    dev = _device()
    torch.manual_seed(0)
    ours = FusedLinear(width, width, activation=act, device=dev, dtype=dtype)
    linear = torch.nn.Linear(width, width, device=dev, dtype=dtype)
    linear.load_state_dict(ours.state_dict())
    ref = torch.nn.Sequential(linear, torch.nn.ReLU() if act == "relu"
                              else torch.nn.GELU(approximate="tanh"))
    x = torch.randn(batch, width, device=dev, dtype=dtype, requires_grad=not first)
    grad = torch.randn(batch, width, device=dev, dtype=dtype)
    return {"gpulinalg FusedLinear": ours, "torch nn.Linear+act": ref}, x, grad


def _step(model, x, grad):
    def run():
        for p in model.parameters():
            p.grad = None
        x.grad = None
        model(x).backward(grad)
    return run


def _interleaved(fns, steps, samples):
    """``{name: summary}``: seconds per step, median over ``samples`` samples of ``steps``
    steps each (CUDA events around the loop; ``perf_counter`` without CUDA), the impls
    interleaved per sample (order alternating), garbage collection paused while timing. With
    CUDA, each sample's loop starts behind one untimed step already queued, so the GPU is busy
    when the start event is recorded: no impl's span includes the host latency of its first
    launch (at 4096³, 20 calls a sample, a 7 µs difference there would read as 0.2 %)."""
    import gc
    torch = _torch()
    cuda = _cuda()
    names = list(fns)
    times = {name: [] for name in names}
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for s in range(samples):
            for name in (names if s % 2 == 0 else names[::-1]):
                fn = fns[name]
                if cuda:
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    fn()
                    start.record()
                    for _ in range(steps):
                        fn()
                    end.record()
                    end.synchronize()
                    times[name].append(start.elapsed_time(end) / 1e3 / steps)
                else:
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        fn()
                    times[name].append((time.perf_counter() - t0) / steps)
    finally:
        if enabled:
            gc.enable()
    out = {}
    for name, ts in times.items():
        t = _summary(ts)
        t["steps_per_sample"] = steps
        t["spread"] = (max(ts) - min(ts)) / t["median_s"]
        out[name] = t
    return out


def layer_rows(batches, widths, dtypes, acts, steps, samples, compiled=False, first=False,
               tuned=False):
    """``first``: the input does not require grad (a first layer: no ``grad_x`` product, for
    either model); ``tuned``: under ``gpulinalg.config_context(autotune=True)`` (one block
    around the case: a block's settings object is what the memo entries serve). Ours and torch
    are timed interleaved (:func:`_interleaved`); ours' row also has the slow roads taken
    during its timed steps (:class:`.dense_torch_host.SlowRoads`: all 0 when every step
    reuses its memo and plans)."""
    import contextlib

    from gpulinalg import config_context
    torch = _torch()
    rows = []
    ours_name = "gpulinalg FusedLinear"
    for dname in dtypes:
        for width in widths:
            for batch in batches:
                for act in acts:
                    models, x, grad = _models(batch, width, getattr(torch, dname), act, first)
                    case = (f"layer fwd+bwd batch {batch} {width}->{width} {dname} {act}"
                            + (" compiled" if compiled else " eager")
                            + (" first-layer" if first else "") + (" autotuned" if tuned else ""))
                    scope = config_context(autotune=True) if tuned else contextlib.nullcontext()
                    with scope:
                        if tuned:
                            _cold(lambda: None)  # plans made afresh, tuned
                        if compiled:
                            models = {name: torch.compile(model, fullgraph=True)
                                      for name, model in models.items()}
                        rows += _step_rows(case, models, x, grad, steps, samples, ours_name,
                                           "torch nn.Linear+act")
    return rows


def _step_rows(case, models, x, grad, steps, samples, ours_name, ref_name):
    """Rows of one case: each model's training step (cold first step, then 3 warm-up steps),
    timed interleaved (:func:`_interleaved`), ours' row with the slow roads of its timed steps
    (:class:`.dense_torch_host.SlowRoads`), and the ratio row."""
    from benchmarks.suites.dense_torch_host import SlowRoads
    fns, colds = {}, {}
    for name, model in models.items():
        fns[name] = fn = _step(model, x, grad)
        t0 = time.perf_counter()
        fn()
        _sync()
        colds[name] = time.perf_counter() - t0
        for _ in range(3):
            fn()
    _sync()
    with SlowRoads() as slow:
        res = _interleaved(fns, steps, samples)
    rows = []
    for name, t in res.items():
        extra = dict(slow, timed_steps=steps * samples) if name == ours_name else {}
        rows.append(row(SUITE, case, name, t, ms=t["median_s"] * 1e3,
                        cold_first_call_s=colds[name], **extra))
    rows.append(row(SUITE, case, "ratio ours/torch", {},
                    ratio=res[ours_name]["median_s"] / res[ref_name]["median_s"]))
    return rows


def _mlp_models(batch, width, dtype, act, layers):
    """``FusedMLP`` of ``layers`` square layers and an ``nn.Sequential`` of ``nn.Linear`` + act
    with equal (not shared) parameters, an input that requires grad and an output gradient."""
    torch = _torch()
    from gpulinalg.dense import FusedMLP
    dev = _device()
    torch.manual_seed(0)
    ours = FusedMLP([width] * (layers + 1), activation=act, device=dev, dtype=dtype)
    ref = FusedMLP([width] * (layers + 1), activation=act, device=dev,
                   dtype=dtype).to_sequential()
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(batch, width, device=dev, dtype=dtype, requires_grad=True)
    grad = torch.randn(batch, width, device=dev, dtype=dtype)
    return {"gpulinalg FusedMLP": ours, "torch nn.Sequential": ref}, x, grad


def mlp_rows(batches, widths, dtypes, acts, steps, samples, layers=4):
    """``FusedMLP`` against ``nn.Sequential(nn.Linear, act, ..., nn.Linear)`` of ``layers``
    square layers, forward + backward per step, timed interleaved as :func:`layer_rows` (ours'
    rows with the slow roads of the timed steps)."""
    torch = _torch()
    rows = []
    ours_name, ref_name = "gpulinalg FusedMLP", "torch nn.Sequential"
    for dname in dtypes:
        for width in widths:
            for batch in batches:
                for act in acts:
                    models, x, grad = _mlp_models(batch, width, getattr(torch, dname), act,
                                                  layers)
                    case = f"mlp fwd+bwd {layers}x{width} batch {batch} {dname} {act}"
                    rows += _step_rows(case, models, x, grad, steps, samples, ours_name,
                                       ref_name)
    return rows


def mlp_kernel_rows(batch, width, dtype_name, layers=4):
    """The kernels (name, count, GPU µs) of one ``FusedMLP`` and one ``nn.Sequential`` step
    (torch profiler), ReLU and GELU."""
    torch = _torch()
    if not _cuda():
        return [absent(SUITE, "kernels per step mlp", "profiler", "no CUDA")]
    rows = []
    for act in ("relu", "gelu"):
        models, x, grad = _mlp_models(batch, width, getattr(torch, dtype_name), act, layers)
        for name, model in models.items():
            rows.append(_kernel_row(f"kernels per step mlp {layers}x{width} batch {batch} "
                                    f"{dtype_name} {act}", name, _step_kernels(_step(model, x,
                                                                                   grad))))
    return rows


def _step_kernels(fn, calls=1, skip=("cudaMemcpy", "Memcpy", "Memset")):
    """``[(kernel name, launches per call, GPU µs per call)]`` of ``calls`` calls of ``fn`` (a
    training step, or one product; after 3 warm-up calls), from the torch profiler; names
    starting with one of ``skip`` (copies and memsets) left out."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    _sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        _sync()
    return [(e.key[:90], e.count if calls == 1 else e.count / calls,
             round(_device_us(e) / calls, 2)) for e in prof.key_averages()
            if _device_us(e) > 0 and not e.key.startswith(skip)]


def _kernel_row(case, name, kernels):
    return row(SUITE, case, name, {}, kernels=kernels,
               kernel_launches=sum(c for _, c, _ in kernels),
               kernel_us=round(sum(us for _, _, us in kernels), 1))


def _device_us(event):
    """The GPU time (µs) of a profiler event (``0`` for CPU-side events)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        us = getattr(event, name, None)
        if us is not None:
            return us
    return 0


def kernel_rows(batch, width, dtype_name, variants=("inner", "first-layer", "autotuned")):
    """The kernels (name, count, GPU µs) of one FusedLinear and one nn.Linear+act step, from
    the torch profiler: an inner layer, a first layer (input without grad) and, ours only, under
    ``config_context(autotune=True)``."""
    import contextlib

    from gpulinalg import config_context
    torch = _torch()
    rows = []
    if not _cuda():
        return [absent(SUITE, "kernels per step", "profiler", "no CUDA")]
    for variant in variants:
        for act in ("relu", "gelu"):
            models, x, grad = _models(batch, width, getattr(torch, dtype_name), act,
                                      first=variant == "first-layer")
            for name, model in models.items():
                tuned = variant == "autotuned"
                if tuned and "gpulinalg" not in name:
                    continue
                with config_context(autotune=True) if tuned else contextlib.nullcontext():
                    if tuned:
                        _cold(lambda: None)
                    kernels = _step_kernels(_step(model, x, grad))
                suffix = "" if variant == "inner" else f" {variant}"
                rows.append(_kernel_row(
                    f"kernels per step {batch} {width} {dtype_name} {act}{suffix}", name,
                    kernels))
    return rows


def run(quick=False, sections=("per_call", "tflops", "layer", "kernels", "compiled")):
    """Sections: ``per_call``, ``tflops``, ``tflops_kernels`` (4096³: the kernels and an
    autotuned plan beside torch), ``layer``, ``layer_first`` (inputs without grad),
    ``layer_tuned`` (batch 8192, width 1024, fp16, autotuned plans), ``kernels``, ``compiled``,
    ``mlp`` (``FusedMLP`` of 4 layers against ``nn.Sequential``, and its kernels per step)."""
    rows = []
    if quick:
        per = dict(sizes=(32,), calls=20)
        tfl = dict(sizes=(64,), dtypes=("float32",), repeat=3)
        tfk = dict(tfl, rounds=2)
        lay = dict(batches=(16,), widths=(32,), dtypes=("float32",), acts=("relu",), steps=5,
                   samples=3)
        first = tuned = comp = lay
        mlp = dict(lay, acts=("relu", "gelu"))
    else:
        per = dict(sizes=(128, 512, 2048), calls=1000)
        # 9 samples: sustained 8192³ products clock down, and the median needs the samples
        tfl = dict(sizes=(4096, 8192), dtypes=("float16", "bfloat16"), repeat=20, rounds=9)
        tfk = dict(sizes=(4096,), dtypes=("float16", "bfloat16"), repeat=20, rounds=3)
        # 9 interleaved samples of 50 steps: about 0.5 s of timed steps per case
        lay = dict(batches=(256, 8192), widths=(1024, 4096), dtypes=("float16", "bfloat16"),
                   acts=("relu", "gelu"), steps=50, samples=9)
        first = dict(batches=(256, 8192), widths=(1024,), dtypes=("float16",),
                     acts=("relu", "gelu"), steps=50, samples=9)
        tuned = dict(batches=(8192,), widths=(1024,), dtypes=("float16",), acts=("relu", "gelu"),
                     steps=50, samples=9)
        comp = dict(batches=(8192,), widths=(1024,), dtypes=("float16",), acts=("relu",),
                    steps=50, samples=5)
        # 4 layers: a 4096-wide, batch-8192 step is ~5 ms; 7 samples of 30 steps per impl
        mlp = dict(batches=(256, 8192), widths=(1024, 4096), dtypes=("float16", "bfloat16"),
                   acts=("relu", "gelu"), steps=30, samples=7)
    if "per_call" in sections:
        rows += per_call_rows(**per)
    if "tflops" in sections:
        rows += tflops_rows(**tfl)
    if "tflops_kernels" in sections:
        rows += tflops_kernel_rows(**tfk)
    if "layer" in sections:
        rows += layer_rows(**lay)
    if "layer_first" in sections:
        rows += layer_rows(**first, first=True)
    if "layer_tuned" in sections:
        rows += layer_rows(**tuned, tuned=True)
    if "kernels" in sections:
        rows += kernel_rows(8192 if not quick else 16, 1024 if not quick else 32,
                            "float16" if not quick else "float32")
    if "compiled" in sections:
        rows += layer_rows(**comp, compiled=True)
    if "mlp" in sections:
        rows += mlp_rows(**mlp)
        rows += mlp_kernel_rows(8192 if not quick else 16, 1024 if not quick else 32,
                                "float16" if not quick else "float32")
    return rows


def summarize(rows):
    """Compact lines: ours against torch per case (µs per call, TFLOP/s, ms per step and ratio,
    kernels per step)."""
    by_case: dict = {}
    for r in rows:
        by_case.setdefault(r.get("case"), {})[r.get("impl")] = r
    lines = []
    for case, impls in by_case.items():
        if case is None:
            continue
        if case.startswith("per_call"):
            vals = " ".join(f"{k.replace('gpulinalg ', 'ours ')}={v.get('us_per_call', 0):.1f}"
                            for k, v in impls.items())
            lines.append(f"{case}: {vals} us")
        elif case.startswith("tflops kernels"):
            for k, v in impls.items():
                kern = "; ".join(f"{name} x{c} {us} us" for name, c, us in v.get("kernels", []))
                lines.append(f"{case} {k}: {v.get('tflops', 0):.0f} TFLOP/s [{kern}]")
        elif case.startswith("tflops"):
            vals = " ".join(f"{k.split()[0]}={v.get('tflops', 0):.0f}" for k, v in impls.items())
            lines.append(f"{case}: {vals} TFLOP/s")
        elif case.startswith("layer"):
            ours = impls.get("gpulinalg FusedLinear", {}).get("ms", float("nan"))
            ref = impls.get("torch nn.Linear+act", {}).get("ms", float("nan"))
            ratio = impls.get("ratio ours/torch", {}).get("ratio", float("nan"))
            o = impls.get("gpulinalg FusedLinear", {})
            t = impls.get("torch nn.Linear+act", {})
            slow = (f" slow roads {o['plans_made']}/{o['public_calls']}/{o['full_dispatches']}"
                    f" in {o['timed_steps']} steps" if "plans_made" in o else "")
            spread = (f" spread {o['spread']:.2f}/{t['spread']:.2f}"
                      if "spread" in o and "spread" in t else "")
            lines.append(f"{case[14:]}: ours {ours:.3f} torch {ref:.3f} ms ratio {ratio:.2f}"
                         f"{spread}{slow}")
        elif case.startswith("mlp"):
            o = impls.get("gpulinalg FusedMLP", {})
            t = impls.get("torch nn.Sequential", {})
            ratio = impls.get("ratio ours/torch", {}).get("ratio", float("nan"))
            slow = (f" slow roads {o['plans_made']}/{o['public_calls']}/{o['full_dispatches']}"
                    f" in {o['timed_steps']} steps" if "plans_made" in o else "")
            lines.append(f"{case[12:]}: ours {o.get('ms', float('nan')):.3f} torch "
                         f"{t.get('ms', float('nan')):.3f} ms ratio {ratio:.2f} spread "
                         f"{o.get('spread', float('nan')):.2f}/{t.get('spread', float('nan')):.2f}"
                         f"{slow}")
        elif case.startswith("kernels"):
            for k, v in impls.items():
                lines.append(f"{case} {k.split()[0]}: {v.get('kernel_launches')} launches "
                             f"{v.get('kernel_us')} us")
    return lines


def main(argv=None):
    import argparse
    import json
    import sys

    from benchmarks import _harness
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suites.dense_torch")
    parser.add_argument("--json", help="write the rows here (rewritten after each section)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sections", default="per_call,tflops,layer,kernels,compiled")
    parser.add_argument("--summarize", metavar="JSON",
                        help="print the compact comparison of a written JSON and exit")
    args = parser.parse_args(argv)
    if args.summarize:
        with open(args.summarize) as f:
            print("\n".join(summarize(json.load(f)["rows"])))
        return 0
    rows = []

    def emit(r):
        rows.append(r)
        print("row:", json.dumps(r, default=str), file=sys.stderr, flush=True)
        if args.json:
            _harness.write_rows(args.json, rows)
    _harness.emit = emit
    run(quick=args.quick, sections=tuple(args.sections.split(",")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
