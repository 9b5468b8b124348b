"""CPU-side cost of one ``gpulinalg.dense.matmul`` call: validation + dispatcher + plan lookup.

Runs anywhere: the dispatcher's ``fake_gpu`` hook takes the GPU route with NumPy arrays, and the
GPU function is replaced by the plan-cache lookup alone (key built exactly as on the GPU, from
shape, strides, dtype and pointer alignment), so what is timed is everything but the cuBLASLt
launch and the result allocation.
"""

import collections
import contextlib
import time

import numpy as np

import gpulinalg
from gpulinalg.dense import _matmul_api


class _FakeData:
    __slots__ = ("ptr", "device_id")

    def __init__(self, ptr):
        self.ptr, self.device_id = ptr, 0


_plans = collections.OrderedDict()


def _lookup_only(a, b, bias, c, spec):
    """Stand-in GPU function: the transposed-product views and the cache lookup of the hot path."""
    A, B = b.swapaxes(-1, -2), a.swapaxes(-1, -2)
    da, db = _FakeData(A.ctypes.data), _FakeData(B.ctypes.data)
    key = (da.device_id, A.dtype, "RELU_BIAS", spec.compute_type, spec.autotune, A.shape,
           A.strides, B.shape, B.strides, da.ptr & 255, db.ptr & 255, None,
           None if bias is None else (("bias", (bias.shape, bias.strides, 0)),))
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = object()
    else:
        _plans.move_to_end(key)
    return A.swapaxes(-1, -2)


def _fake_gpu():
    """The tests' pretend GPU (tests/support/fake_gpu.py: a device provider), for a run of the
    GPU road with NumPy arrays on any machine."""
    from tests.support.fake_gpu import fake_gpu
    return fake_gpu()


def measure(n=128, calls=2000, runs=9):
    """Microseconds of CPU time per ``matmul(a, b, bias=bias, activation="relu")`` call.

    The best of ``runs`` runs of ``calls`` calls, in process CPU time, so that other processes
    competing for the cores do not inflate the figure.
    """
    a = np.ones((n, n), np.float16)
    b = np.ones((n, n), np.float16)
    bias = np.ones(n, np.float16)
    real = _matmul_api._matmul_cuda.matmul
    _matmul_api._matmul_cuda.matmul = _lookup_only
    try:
        with _fake_gpu(), gpulinalg.config_context(backend="gpu"):
            best = float("inf")
            for _ in range(runs):
                t0 = time.process_time()
                for _ in range(calls):
                    _matmul_api.matmul(a, b, bias=bias, activation="relu")
                best = min(best, (time.process_time() - t0) / calls * 1e6)
    finally:
        _matmul_api._matmul_cuda.matmul = real
    return best


# ---------------------------------------------------------------------------------------------
# The public per-call road with torch tensors and CuPy arrays (stand-in C calls)


CASES = (("relu", True, False), ("gelu", True, False), (None, True, False),
         ("relu", False, False), ("gelu", False, False), (None, False, False),
         ("relu", True, True), ("gelu", True, True))


def _case_name(act, bias, aux):
    return f"{act or 'none'}{'+bias' if bias else ''}{'+aux' if aux else ''}"


class _Stream:
    ptr = 0


@contextlib.contextmanager
def _own_stream():
    yield _Stream


def _host_alloc(nbytes):
    """A CuPy memory pointer over host memory (stands in for the pool's device block)."""
    import cupy
    h = np.empty(max(nbytes, 1), np.uint8)
    return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(h.ctypes.data, nbytes, h, 0), 0)


def cupy_array(x):
    """A CuPy array over a host copy of NumPy array ``x`` (no GPU touched: its pointer is a host
    pointer; only the stand-in plans of :func:`cupy_stand_in` read it)."""
    import cupy
    x = np.ascontiguousarray(x)
    mem = cupy.cuda.UnownedMemory(x.ctypes.data, x.nbytes, x, 0)
    return cupy.ndarray(x.shape, x.dtype, cupy.cuda.MemoryPointer(mem, 0), x.strides)


def _stand_in_build(a, b, c, alpha, beta, epilog, inputs, compute_type, autotune, stream):
    from benchmarks.suites import dense_torch_host
    plan = dense_torch_host._StandInPlan(a.shape[-2], b.shape[-1], a.dtype, epilog)
    plan.alloc = _host_alloc
    return plan


@contextlib.contextmanager
def cupy_stand_in():
    """The CuPy road of :func:`gpulinalg.dense.matmul` without a GPU: the torch harness's device
    state (:func:`benchmarks.dense_torch_host.stand_in`), plus plans of stand-in parts (the
    real ``Plan.run``; its ``cublasLtMatmul`` and attribute setter do nothing) whose results are
    CuPy arrays over host memory, and stream 0 for CuPy's current and the thread's own stream."""
    from gpulinalg.dense import _plans_cuda

    from benchmarks.suites import dense_torch_host
    saved = [(n, getattr(_plans_cuda, n)) for n in ("_build", "op_stream", "_current_stream")]
    _plans_cuda._build = _stand_in_build
    _plans_cuda.op_stream = _own_stream
    _plans_cuda._current_stream = lambda: _Stream
    try:
        with dense_torch_host.stand_in():
            yield
    finally:
        for n, v in saved:
            setattr(_plans_cuda, n, v)


def _operands(kind, m=8, k=16, n=16):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    bias = rng.standard_normal(n)
    if kind == "cupy":
        return tuple(cupy_array(x.astype(np.float32)) for x in (a, b, bias))
    import torch
    return tuple(torch.from_numpy(x.astype(np.float32)) for x in (a, b, bias))


def _call(kind, act, with_bias, aux, operands=None):
    from gpulinalg.dense import matmul
    a, b, bias = operands or _operands(kind)
    bias = bias if with_bias else None
    if aux:
        return lambda: matmul(a, b, bias=bias, activation=act, return_aux=True)
    return lambda: matmul(a, b, bias=bias, activation=act)


def measure_calls(kinds=("torch", "cupy"), cases=CASES, calls=2000, runs=7):
    """``{"<kind> <case>": µs}``: per ``matmul`` repeat on torch tensors and CuPy arrays with
    stand-in C calls (:func:`benchmarks.dense_torch_host.stand_in`, :func:`cupy_stand_in`),
    best of ``runs`` rounds of ``calls`` calls in process CPU time, cases interleaved; with
    torch's ``_addmm_activation`` on the same CPU tensors (its CPU kernel standing in for the
    launch ours leaves out)."""
    import torch

    from benchmarks.suites import dense_torch_host
    a, b, bias = _operands("torch")
    out = {}
    for kind in kinds:
        if kind == "cupy" and not _have_cupy():
            continue
        with (cupy_stand_in() if kind == "cupy" else dense_torch_host.stand_in()):
            fns = {f"{kind} {_case_name(*c)}": (_call(kind, *c), calls) for c in cases}
            out.update(dense_torch_host._best_us(fns, runs))
    out.update(dense_torch_host._best_us(
        {"torch _addmm_activation": (lambda: torch._addmm_activation(bias, a, b), calls)}, runs))
    return out


def _have_cupy():
    try:
        import cupy  # noqa: F401
    except ImportError:
        return False
    return True


def _cuda_operands(kind, n, dtype):
    """fp16 ``(n, n)``, ``(n, n)``, ``(n,)`` CUDA tensors (or CuPy views of them)."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(0)
    ops = tuple(torch.randn(s, device="cuda", dtype=getattr(torch, dtype), generator=g)
                for s in ((n, n), (n, n), (n,)))
    if kind == "cupy":
        import cupy
        return tuple(cupy.from_dlpack(t) for t in ops)
    return ops


def breakdown(kind="torch", calls=None, gpu=False, n=128, dtype="float16", rounds=None,
              info=None):
    """``{step: µs}`` of one ``matmul(a, b, bias=bias, activation="relu")`` repeat: the key, the
    memo lookup, the dispatcher's repeat (its front door on a kept key) around the engine, the
    engine and its
    parts, each step a loop of ``calls`` calls (``perf_counter_ns``). With stand-in C calls on
    the CPU, or (``gpu=True``) the real road on ``n``-cubed CUDA operands, each loop
    synchronized at its end (the launches then count: what is timed is host time as long as
    the GPU keeps up).

    Like with like: the steps are timed in ``rounds`` interleaved rounds (each round every step
    once, the order rotated), the best loop of each step kept, so that a slow phase of the host
    (its speed moves from loop to loop on the H200) cannot land on one step only. Every step
    drops its result inside its loop (the engine's tensor goes back to the caching allocator
    there, as the public call's does). Controls: the repeat around an engine that does nothing
    (the dispatcher's repeat by itself, record included) and one ``perf_counter`` read (the
    clock the repeat reads twice). ``info`` (a dict) receives the full dispatches counted
    during the timed loops (0: every repeat took the front door's short road), whether the
    decision held, and the host's clock source.
    """
    from gpulinalg._runtime import dispatch
    from gpulinalg._runtime.config import get_config
    from gpulinalg.dense import _calls, _matmul_cuda, _tensors_cuda

    from benchmarks.suites import dense_torch_host
    if gpu:
        import torch
        a, b, bias = operands = _cuda_operands(kind, n, dtype)
        sync, place = torch.cuda.synchronize, contextlib.nullcontext()
        calls, rounds = calls or 500, rounds or 15
    else:
        a, b, bias = operands = _operands(kind)
        sync = _nothing
        place = cupy_stand_in() if kind == "cupy" else dense_torch_host.stand_in()
        calls, rounds = calls or 2000, rounds or 7
    fn = _call(kind, "relu", True, False, operands)
    with place:
        fn()
        fn()
        settings = get_config()
        key_args = (a, b, bias, None, "relu", 1.0, 0.0, False, None, None)
        keyfn = _matmul_api._key
        key = keyfn(*key_args)
        kept = _calls.lookup(key)
        spec = kept.tail[-1]
        args = (a, b, bias, None, spec)  # the engine's
        lead = args[:4]
        engine = _tensors_cuda.matmul if kind == "torch" else _matmul_cuda.matmul
        probe = _idle_entry(kept)
        front, clock = dispatch.dispatch, time.perf_counter
        fns = {"whole call": fn, "get_config": get_config,
               "key": lambda: keyfn(*key_args),
               "memo lookup": lambda: _calls.lookup(key),
               "repeat + engine": lambda: front(None, key=key, lead=lead),
               "engine": lambda: engine(*args),
               "repeat around a no-op engine": lambda: front(None, key=probe, lead=lead),
               "perf_counter": clock}
        if kind == "torch":
            fns.update(_engine_steps(a, b, bias, spec, gpu))
        with full_dispatches() as full:
            steps = _interleaved(fns, calls, rounds, sync)
        held = kept.dev is not None and kept.settings is settings
    steps["repeat (without the engine)"] = steps["repeat + engine"] - steps["engine"]
    steps["matmul's own frame"] = (steps["whole call"] - steps["repeat + engine"]
                                   - steps["key"] - steps["get_config"])
    if info is not None:
        info.update(full_dispatches=full[0], decision_held=held, calls_per_loop=calls,
                    rounds=rounds, **_host_facts())
    return steps


def _interleaved(fns, calls, rounds, sync):
    """``{name: µs}``: the best of ``rounds`` loops of ``calls`` calls of each function, the
    functions taking turns (round ``r`` starts at the ``r``-th, in a rotated order)."""
    names = list(fns)
    for f in fns.values():
        f()
    sync()
    best = dict.fromkeys(names, float("inf"))
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            f = fns[name]
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                f()
            sync()
            best[name] = min(best[name], (time.perf_counter_ns() - t0) / calls / 1000)
    return best


@contextlib.contextmanager
def full_dispatches():
    """Count the calls that took the dispatcher's full road (a decision: no GPU decision kept)
    in the block: a one-element list, 0 when every repeat took the front door's short road."""
    from gpulinalg._runtime import dispatch
    full, real = [0], dispatch._decide_and_run

    def counted(*args, **kwargs):
        full[0] += 1
        return real(*args, **kwargs)
    dispatch._decide_and_run = counted
    try:
        yield full
    finally:
        dispatch._decide_and_run = real


def _idle_entry(kept):
    """The key of a copy of the memo entry ``kept`` (a held GPU decision) whose engine does
    nothing: the front door's repeat by itself."""
    from gpulinalg._runtime import memo
    probe = memo.Kept(kept.op._replace(gpu_fn=_nothing_of), kept.tail, kept.like_at,
                      kept.settings)
    probe.dev, probe.reason = kept.dev, kept.reason
    key = ("benchmarks.idle", id(probe))
    memo.remember(key, probe)
    return key


def _nothing_of(*args):
    return None


def _host_facts():
    import gc
    import platform
    import threading
    clock = time.get_clock_info("perf_counter")
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            source = f.read().strip()
    except OSError:
        source = "unknown"
    return {"python": platform.python_version(), "clock": clock.implementation,
            "clocksource": source, "threads": threading.active_count(),
            "gc_threshold": gc.get_threshold()}


def _nothing():
    pass


def _engine_steps(a, b, bias, spec, gpu):
    """The torch engine's parts, as functions to time: the launch object (allocation +
    execute), the allocation, ``Plan.execute`` (on real pointers on the GPU), the operands'
    pointers, the raw stream, ``a.device``."""
    import torch
    run, dev = spec.plan, a.device
    raw = _tensors_cuda_raw()
    stream = raw(dev.index)
    out = torch.empty_strided(*run.out[:2], dtype=run.out[2], device=dev)
    ap, bp, vp = (a.data_ptr(), b.data_ptr(), bias.data_ptr()) if gpu else (1, 2, 3)
    op = out.data_ptr() if gpu else 4
    # a workspace of the plan's size, as a launch allocates one (kept alive by the closure)
    ws = (torch.empty(run.plan.ws_size, dtype=torch.uint8, device=dev) if run.plan.ws_size
          else None)
    wp = 0 if ws is None else (ws.data_ptr() if gpu else 5)
    execute, shape, strides, dt = run.plan.execute, *run.out
    return {
        "engine: launch object": lambda: run(ap, bp, (vp,), 1.0, dev, stream),
        "engine: torch.empty_strided": lambda: torch.empty_strided(shape, strides, dtype=dt,
                                                                   device=dev),
        "engine: Plan.execute": lambda: execute(bp, ap, 0, 1.0, 0.0, (vp,), op, wp, stream),
        "engine: 3 data_ptr()": lambda: (a.data_ptr(), b.data_ptr(), bias.data_ptr()),
        "engine: raw stream": lambda: raw(dev.index),
        "engine: a.device": lambda: a.device}


def _tensors_cuda_raw():
    from gpulinalg.dense import _tensors_cuda
    return _tensors_cuda._mods()[1]


def profile(kind="torch", calls=20000, limit=20):
    """A cProfile of ``calls`` repeats of ``matmul(a, b, bias=bias, activation="relu")``."""
    from benchmarks.suites import dense_torch_host
    fn = _call(kind, "relu", True, False)
    with (cupy_stand_in() if kind == "cupy" else dense_torch_host.stand_in()):
        dense_torch_host.print_profile(fn, calls, limit)


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suites.dense_overhead")
    parser.add_argument("--calls", action="store_true",
                        help="the per-call road with torch tensors and CuPy arrays, all cases")
    parser.add_argument("--breakdown", action="store_true", help="µs per step of one repeat")
    parser.add_argument("--profile", choices=("torch", "cupy"))
    parser.add_argument("--gpu", action="store_true",
                        help="--breakdown of the real road on CUDA operands (128^3 fp16)")
    parser.add_argument("--json", help="write the --calls / --breakdown figures here")
    args = parser.parse_args(argv)
    if not (args.calls or args.breakdown or args.profile):
        print(f"CPU-side overhead per matmul call (fake GPU, no launch): {measure():.1f} us")
    found = {}
    if args.calls:
        found["calls"] = measure_calls()
        for case, us in found["calls"].items():
            print(f"{case:32s} {us:6.2f} us")
    if args.breakdown:
        for kind in ("torch", "cupy") if _have_cupy() else ("torch",):
            found[f"breakdown {kind} info"] = info = {}
            found[f"breakdown {kind}"] = steps = breakdown(kind, gpu=args.gpu, info=info)
            for step, us in steps.items():
                print(f"{kind} {step:30s} {us:6.2f} us")
            print(f"{kind} " + " ".join(f"{k}={v}" for k, v in info.items()))
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({"suite": "dense_overhead", "gpu": args.gpu, **found}, f, indent=1)
    if args.profile:
        profile(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
