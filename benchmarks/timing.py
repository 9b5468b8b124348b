"""Timing helpers shared by every suite: CUDA events on the GPU, perf_counter on the CPU.

Each returns a dict with the median and minimum seconds over ``repeat`` runs after ``warmup``.
"""

import importlib.util
import statistics
import time


def have(module):
    """Whether ``module`` can be imported (peers are measured only when present)."""
    return importlib.util.find_spec(module) is not None


def _summary(times):
    return {"median_s": statistics.median(times), "min_s": min(times), "runs": len(times)}


def time_cpu(fn, *, warmup=1, repeat=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return _summary(times)


def time_gpu(fn, *, warmup=3, repeat=10, stream=None):
    """Time ``fn`` with CUDA events recorded on ``stream`` (default: the current CuPy stream).

    ``fn`` may enqueue work on other streams only if it orders them after/before ``stream``.
    """
    import cupy
    stream = stream or cupy.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    cupy.cuda.Device().synchronize()
    return _summary(times)


def time_wall_gpu(fn, *, warmup=1, repeat=5):
    """Wall-clock time of ``fn`` including a device synchronize (for host-driven pipelines)."""
    import cupy

    def run():
        fn()
        cupy.cuda.Device().synchronize()
    return time_cpu(run, warmup=warmup, repeat=repeat)


#: Called with each row as it is made (the runner streams them, so a run cut short keeps them).
emit = None


def stream_to(path):
    """Write every row to ``path`` (JSON lines) as it is made: a run stopped by a time limit
    keeps the rows it made."""
    import json
    global emit
    fh = open(path, "w")  # noqa: SIM115 (open for the whole run)
    emit = lambda r: (fh.write(json.dumps(r, default=str) + "\n"), fh.flush())  # noqa: E731


def _made(r):
    if emit is not None:
        emit(r)
    return r


def row(suite, case, impl, timing, **extra):
    """One result row: what was measured, by whom, how fast, and any extra figures."""
    return _made({"suite": suite, "case": case, "impl": impl, **timing, **extra})


def absent(suite, case, impl, why):
    return _made({"suite": suite, "case": case, "impl": impl, "absent": why})
