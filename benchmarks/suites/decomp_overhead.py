"""Host cost of one ``gpulinalg.decomp.solve_triangular`` repeat on a single matrix (the wide
kernel's road: one launch, one read-back of the 3-word summary), step by step.

``python -m benchmarks.suites.decomp_overhead [--gpu] [--sizes 64,1024] [--json out.json]``: per
order ``n`` (float32, lower, one right-hand side), µs per step of one repeat, each step a loop
timed as in :func:`benchmarks.suites.dense_overhead.breakdown` (interleaved rounds, best loop kept,
each loop synchronized at its end, so a step whose kernels outlast its host time counts them):
the whole call, the memo key and lookup, the dispatcher's repeat around the engine and around
an engine that does nothing, the thread stream's ordering (``op_stream``), the engine, and the
engine's parts (the result's allocation, the summary buffer's lookup, the kernel launch, the
read-back of a summary already written, the conditioning verdict). At a small ``n`` the GPU
keeps up with the host, so the launch and the engine read as host time; at 1024 the engine
holds the kernel's run.

Without ``--gpu`` the road runs with stand-ins for the CUDA calls (CuPy arrays over host memory,
a driver launch that does nothing after the launcher has packed its parameters, a summary that
reads a well-conditioned solve, no stream ordering), so what is timed is the Python of the road
alone, on any machine with CuPy installed.
"""

import contextlib
import time

import numpy as np

from benchmarks.suites.dense_overhead import (_host_alloc, _host_facts, _idle_entry, _interleaved,
                                              cupy_array, full_dispatches)

SUITE = "decomp_overhead"
_OP = "decomp.solve_triangular"


class _StubFunction:
    """A compiled function's stand-in: the driver handle a launcher passes."""

    ptr = 1


class _StubKernel:
    """A raw kernel whose launch does nothing, with a stand-in compiled function, so that a
    :class:`~gpulinalg._runtime.kernels.Launcher` takes its direct road (packing the
    parameter block) up to the driver's launch, which the stand-ins make a no-op."""

    kernel = _StubFunction()

    def __call__(self, grid, block, args, shared_mem=0):
        return None


def _no_launch(*args):
    return None


class _Totals:
    """The read-back of a summary that says: no flag, bound 1.0 (well conditioned); as the
    wide kernel's mapped one, a null address and an epoch."""

    device = 0

    def __init__(self):
        self.words = np.zeros(3, np.uint64)
        self.words[1] = np.float64(1.0).view(np.uint64)
        self.epoch = 0

    def arm(self):
        self.epoch += 1
        return self.epoch

    def get(self):
        return self.words.copy()


class _NoStream:
    ptr = 0

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


#: The caller's stream of the stand-ins: CUDA's legacy default stream (pointer 0).
_NULL_STREAM = _NoStream()

_ATTRIBUTES = {"MaxSharedMemoryPerBlockOptin": 232448, "MultiProcessorCount": 132}


@contextlib.contextmanager
def stand_in():
    """The GPU road of the solve without a GPU: one pretend device (discovery, memory,
    attributes), CuPy's allocator over host memory, raw kernels that do nothing, the summary
    buffer and workspace over host memory, no stream ordering. Everything is put back after."""
    import cupy

    from gpulinalg._runtime import budget, device, dispatch, kernels
    from gpulinalg._runtime.config import config_context
    from gpulinalg.decomp._kernels import (_policy_cuda, _scalars_cuda,
                                           _stream_trsm_cuda, _wide_trsm_cuda)
    from gpulinalg.decomp.triangular import _triangular_cuda
    summ = cupy_array(np.zeros(8, np.uint64))
    totals = _Totals()
    saved, state = [], dict(device._state)

    def patch(owner, name, value):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)
    device._state.update(probed=True, gpus=(device.GPUInfo(0, "stand-in", (9, 0), 80 << 30),),
                         why_not=None, disabled=None)
    patch(device, "memory_info", lambda device=None: (64 << 30, 80 << 30))
    patch(device, "_get_device", lambda: 0)
    patch(budget, "_pool_limit_left", lambda: None)
    attribute = (lambda name, default=None: _ATTRIBUTES.get(name, default))
    patch(device, "attribute", attribute)
    patch(_policy_cuda, "compute_capability", lambda: (9, 0))  # the stand-in device's
    patch(_stream_trsm_cuda, "attribute", attribute)
    patch(kernels, "raw_kernel", lambda *args, **kwargs: _StubKernel())
    from cupy_backends.cuda.api import driver
    patch(driver, "launchKernel", _no_launch)
    patch(dispatch, "_op_stream", _NoStream)
    patch(cupy.cuda, "get_current_stream", lambda: _NULL_STREAM)
    # the buffers the engine keeps per thread and stream, made already: its own lookups find
    # them (the device 0, the stream of the stand-ins)
    kept = _scalars_cuda._per_thread.by_key
    kept_before = dict(kept)
    ws = cupy_array(_wide_trsm_cuda.identities(1 << 16))
    kept.update({("summary", "trsm", 0, 0): (cupy, (summ, totals)),
                 ("wide workspace", 0, 0): (cupy, ws), ("mapped", "wide", 0, 0): (cupy, totals)})
    allocator = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(_host_alloc)
    _triangular_cuda._PLANS.clear()
    try:
        with config_context(backend="gpu"):
            yield
    finally:
        cupy.cuda.set_allocator(allocator)
        _triangular_cuda._PLANS.clear()
        kept.clear()
        kept.update(kept_before)
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
        device._state.clear()
        device._state.update(state)


def _operands(n, dtype, gpu):
    """A well-conditioned lower triangular ``(n, n)`` and an ``(n,)`` right-hand side, as CUDA
    CuPy arrays or (stand-ins) CuPy arrays over host memory."""
    rng = np.random.default_rng(0)
    a = (np.tril(rng.standard_normal((n, n))) / np.sqrt(n) + 2 * np.eye(n)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    if gpu:
        import cupy
        return cupy.asarray(a), cupy.asarray(b)
    return cupy_array(a), cupy_array(b)


def breakdown(n=1024, dtype="float32", gpu=False, calls=None, rounds=None, info=None):
    """``{step: µs}`` of one ``solve_triangular(a, b, lower=True)`` repeat of order ``n`` (see
    the module's docstring); ``info`` (a dict) receives the route, the full dispatches counted
    during the timed loops (0: every repeat took the dispatcher's short road), whether the
    decision held, and the host's facts."""
    import cupy

    from gpulinalg._runtime import dispatch
    from gpulinalg._runtime.config import get_config
    from gpulinalg.decomp._kernels import _fused_cuda, _wide_trsm_cuda
    from gpulinalg.decomp import solve_triangular
    from gpulinalg.decomp._checks import cupy_key
    from gpulinalg.decomp.triangular import _triangular_cuda
    from gpulinalg.decomp.triangular._triangular_xp import judge_bound
    if gpu:
        sync, place = cupy.cuda.get_current_stream().synchronize, contextlib.nullcontext()
        calls, rounds = calls or 200, rounds or 15
    else:
        sync, place = (lambda: None), stand_in()
        calls, rounds = calls or 1000, rounds or 7
    dt = np.dtype(dtype)
    with place:
        a, b = _operands(n, dt, gpu)
        options = (0, True, False, False, True)

        def call():
            return solve_triangular(a, b, lower=True)
        call()
        call()
        settings = get_config()
        key = cupy_key(_OP, a, b, options)
        kept = dispatch._memo.lookup(key)
        args = (a, b, *kept.tail)
        engine = kept.op.gpu_fn
        probe = _idle_entry(kept)
        plan = next(p for k, p in _triangular_cuda._PLANS.items() if k[0] == a.shape)
        out_shape, launcher, words = plan[2], plan[5], plan[6]
        dev, ptr = a.data.device_id, cupy.cuda.get_current_stream().ptr
        summ, totals = _fused_cuda.summary(cupy, "trsm", dev, ptr)
        out = cupy.empty(out_shape, dtype=dt)
        launch_args = (a, b, out, summ, _fused_cuda.checks(True, True))
        if words:  # the wide kernel's summary comes back through mapped host memory, with
            # the epoch of the launch (each launch arms the next, as a call does)
            totals = _triangular_cuda.mapped_read_back(cupy, "wide", dev, ptr)
            launch_args += (_wide_trsm_cuda.workspace(cupy, dev, words, ptr), totals.device)

            def launch():
                launcher.launch(ptr, *launch_args, totals.arm())
        else:
            def launch():
                launcher.launch(ptr, *launch_args)
        front, stream = dispatch.dispatch, dispatch._op_stream

        def ordered():
            with stream():
                pass
        fns = {"whole call": call, "get_config": get_config,
               "key": lambda: cupy_key(_OP, a, b, options),
               "memo lookup": lambda: dispatch._memo.lookup(key),
               "repeat + engine": lambda: front(None, key=key, lead=(a, b)),
               "engine": lambda: engine(*args),
               "repeat around a no-op engine": lambda: front(None, key=probe, lead=(a, b)),
               "op_stream enter + exit": ordered,
               "engine: result allocation": lambda: cupy.empty(out_shape, dtype=dt),
               "engine: current stream": lambda: cupy.cuda.get_current_stream().ptr,
               "engine: summary lookup": lambda: _fused_cuda.summary(cupy, "trsm", dev, ptr),
               "engine: launch": launch,
               "engine: read-back": totals.get,
               "engine: verdict": lambda: judge_bound(1.0, dt, False)}
        with full_dispatches() as full:
            steps = _interleaved(fns, calls, rounds, sync)
        held = kept.dev is not None and kept.settings is settings
        route = _triangular_cuda.own_route(n, 1, 1, dt)
    steps["repeat (without the engine)"] = steps["repeat + engine"] - steps["engine"]
    steps["solve_triangular's own frame"] = (steps["whole call"] - steps["repeat + engine"]
                                             - steps["key"] - steps["get_config"])
    if info is not None:
        info.update(n=n, dtype=dtype, route=route, full_dispatches=full[0], decision_held=held,
                    calls_per_loop=calls, rounds=rounds, **_host_facts())
    return steps


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suites.decomp_overhead")
    parser.add_argument("--gpu", action="store_true", help="the real road on CUDA operands")
    parser.add_argument("--sizes", default="64,1024", help="orders n, comma-separated")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    found = {}
    for n in (int(s) for s in args.sizes.split(",")):
        found[f"n={n} info"] = info = {}
        found[f"n={n}"] = steps = breakdown(n, args.dtype, gpu=args.gpu, info=info)
        for step, us in steps.items():
            print(f"n={n} {step:32s} {us:8.2f} us")
        print(f"n={n} " + " ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({"suite": SUITE, "gpu": args.gpu, "time": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **found}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
