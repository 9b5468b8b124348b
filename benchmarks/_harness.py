"""What every suite and study shares: peers, timing, result rows, JSON, the environment.

* peers: :func:`have` (is a package importable), :func:`gpu_libraries` (CuPy and torch on a GPU),
  :func:`cuda_torch` (torch when it has CUDA);
* timing: :func:`time_cpu` / :func:`time_gpu` (CUDA events) / :func:`time_wall_gpu` (the median
  and minimum seconds over ``repeat`` runs after ``warmup``), :func:`timed_sync` (a cold first
  call, then synchronized warm runs), :func:`interleaved_sync` (the same for several callables
  timed in turn), :func:`event_timing` (device time per launch),
  :class:`Budget` (a run's time limit), :func:`sync` (synchronize the current CUDA device);
* rows: :func:`row`, :func:`absent`, streamed as they are made (:data:`emit`, :func:`stream_to`);
  :func:`guarded` (a step's rows or one absent row, :func:`why_failed`), :func:`run_keeping_rows`;
* JSON and environment: :func:`environment` (date, versions, GPUs), :func:`write_rows`;
* CuPy inputs and error measures of the decomp suites: :func:`spd`, :func:`make_inputs`,
  :func:`rel_err`, :func:`as_cupy`.

Suites and studies import this module; it imports neither (and no gpulinalg at import time).
"""

import datetime
import importlib.util
import json
import platform
import statistics
import sys
import time


# -- peers ----------------------------------------------------------------------------------------

def have(module):
    """Whether ``module`` can be imported (peers are measured only when present)."""
    return importlib.util.find_spec(module) is not None


def cuda_torch():
    """torch when it is installed and has CUDA, else ``None``."""
    if not have("torch"):
        return None
    import torch
    return torch if torch.cuda.is_available() else None


def gpu_libraries():
    """``(cupy, torch, None)`` (torch ``None`` without it or CUDA), or ``(None, None, why)``
    without CuPy or a GPU."""
    if not have("cupy"):
        return None, None, "cupy not installed"
    import gpulinalg
    if not gpulinalg.gpu_available():
        return None, None, "no GPU"
    import cupy
    return cupy, cuda_torch(), None


# -- timing ---------------------------------------------------------------------------------------


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


def sync():
    """Wait for the current CUDA device (CuPy)."""
    import cupy
    cupy.cuda.Device().synchronize()


def timed_sync(fn, repeat, *, wait=None, budget=None):
    """``(timing, out)``: the cold first call, then the median and minimum of ``repeat``
    synchronized warm calls (wall clock; ``wait``, :func:`sync` unless given, after each call).
    ``budget``: a :class:`Budget`; the warm calls stop once it has no room for two more."""
    wait = sync if wait is None else wait
    wait()
    t0 = time.perf_counter()
    out = fn()
    wait()
    cold = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        if budget is not None and budget.left() < 2 * (times[-1] if times else cold):
            break
        t0 = time.perf_counter()
        out = fn()
        wait()
        times.append(time.perf_counter() - t0)
    return _timing(cold, times), out


def _timing(cold, times):
    """The fields of a timed row: the cold first call and the warm calls' median and minimum
    (the cold call's figure where no warm call ran)."""
    return {"cold_s": cold, "median_s": statistics.median(times) if times else cold,
            "min_s": min(times) if times else cold, "runs": len(times)}


def interleaved_sync(fns, repeat, *, wait=None, budget=None, after=None):
    """``(timings, failed)`` of the callables ``fns`` (name -> function) timed in turn: each
    one's cold first call, then ``repeat`` rounds that call each once (the order turned by one
    every round), so that a busy machine slows all alike. Each call is timed with ``wait``
    (:func:`sync` unless given) after it; ``after(name)`` runs after each call, untimed.
    ``timings``: name -> :func:`timed_sync`'s fields; ``failed``: name -> the exception its
    cold call raised (left out of the rounds). ``budget``: the rounds stop once it has no room
    for one more."""
    wait = sync if wait is None else wait

    def call(name):
        t0 = time.perf_counter()
        fns[name]()
        wait()
        seconds = time.perf_counter() - t0
        if after is not None:
            after(name)
        return seconds
    wait()
    cold, failed = {}, {}
    for name in fns:
        try:
            cold[name] = call(name)
        except Exception as exc:  # one side that cannot run must not stop the others
            failed[name] = exc
    live = list(cold)
    times = {name: [] for name in live}
    for r in range(repeat if live else 0):
        if budget is not None and budget.left() < sum((times[n] or [cold[n]])[-1] for n in live):
            break
        for name in live[r % len(live):] + live[:r % len(live)]:
            times[name].append(call(name))
    return {name: _timing(cold[name], times[name]) for name in live}, failed


def event_timing(cp, fn, runs):
    """The timing fields of a kernel row: seconds per launch of ``fn`` (CUDA events around
    ``runs`` launches on the current stream, no read-back)."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(runs):
        fn()
    end.record()
    end.synchronize()
    sec = cp.cuda.get_elapsed_time(start, end) / (runs * 1e3)
    return {"cold_s": sec, "median_s": sec, "min_s": sec, "runs": runs}


class Budget:
    """A run's time limit: :meth:`left` seconds from now."""

    def __init__(self, seconds):
        self.end = time.perf_counter() + seconds

    def left(self):
        return self.end - time.perf_counter()


# -- rows -----------------------------------------------------------------------------------------

#: Called with each row as it is made (the runner streams them, so a run cut short keeps them).
emit = None


def stream_to(path):
    """Write every row to ``path`` (JSON lines) as it is made: a run stopped by a time limit
    keeps the rows it made."""
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


def _on_term(signum, frame):
    raise TimeoutError("stopped by SIGTERM (the command's timeout)")


def run_keeping_rows(fn, json_path=None):
    """``fn()``, each row printed to stderr as it is made; then the rows made are written by
    :func:`print_and_write`, also when SIGTERM (a command's timeout) stops the run."""
    import signal
    made = []

    def keep(r):
        made.append(r)
        print("row:", json.dumps(r, default=str), file=sys.stderr, flush=True)
    global emit
    saved, emit = emit, keep
    term = signal.signal(signal.SIGTERM, _on_term)
    try:
        fn()
    finally:
        emit = saved
        signal.signal(signal.SIGTERM, term)
        print_and_write(made, json_path)


def guarded(suite, case, impl, budget, fn):
    """``fn()`` (a list of rows), or one absent row saying what stopped it: the ``budget``
    spent, out of memory, or a failure (one step that cannot run must not hide the others)."""
    if budget.left() <= 0:
        return [absent(suite, case, impl, "time budget (--budget-s) spent")]
    try:
        return fn()
    except Exception as exc:
        return [absent(suite, case, impl, why_failed(exc))]


def kernel_rows(suite, case, call, top=30):
    """One row per kernel name of one ``call()`` (which must synchronize before returning), the
    longest first, at most ``top``: ``kernel``, ``launches``, ``device_ms`` (torch's profiler,
    which sees every library's kernels in the process)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
    events = sorted((e for e in prof.key_averages() if e.device_time_total > 0),
                    key=lambda e: -e.device_time_total)
    return [row(suite, case, "kernel", {}, kernel=e.key[:120], launches=e.count,
                device_ms=e.device_time_total / 1e3) for e in events[:top]]


def why_failed(exc):
    """An absent row's reason for ``exc``: out of memory (CuPy's and gpulinalg's out-of-memory
    errors subclass ``MemoryError``) or a failure, with the exception's type and message."""
    kind = "out of memory" if isinstance(exc, MemoryError) else "failed"
    return f"{kind}: {type(exc).__name__}: {str(exc)[:300]}"


# -- JSON and environment -------------------------------------------------------------------------

def environment():
    """Where a run ran: date (UTC), Python, gpulinalg and its dependencies' versions, GPUs."""
    import gpulinalg
    from gpulinalg._info import collect
    report = collect()
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "gpulinalg": gpulinalg.__version__,
            "versions": report["versions"], "gpus": report["gpus"]}


def print_and_write(rows, json_path=None):
    """Print ``rows`` as JSON lines and, with ``json_path``, write them with the
    :func:`environment` (a suite's ``main``)."""
    import sys
    for r in rows:
        print(json.dumps(r, default=str), flush=True)
    if json_path:
        write_rows(json_path, rows, environment=environment())
        print(f"wrote {json_path}", file=sys.stderr)


def write_rows(path, rows, **meta):
    """Write ``{**meta, "rows": rows}`` to ``path`` as JSON (what :mod:`benchmarks.report` and
    :mod:`benchmarks.compare` read); values JSON cannot hold are written as strings."""
    with open(path, "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1, default=str)


# -- CuPy inputs and error measures (the decomp suites) -------------------------------------------

def spd(cp, batch, n, dtype, rng):
    """A stack of ``batch`` well-conditioned SPD matrices of order ``n``."""
    x = rng.standard_normal((batch, n, n), dtype=dtype)
    a = x @ x.swapaxes(-1, -2) / n
    a += cp.eye(n, dtype=dtype)
    return a


def make_inputs(cp, op, batch, n, dtype, rng):
    """``(a, b)`` for one public call (``cholesky``, ``cho_solve``, ``solve_triangular``: SPD
    or its lower factor, with ``b``; ``qr``, ``svd``: standard normal, ``b`` ``None``); a
    single matrix where ``batch`` is 1."""
    shape = (batch, n, n) if batch > 1 else (n, n)
    if op in ("cholesky", "cho_solve", "solve_triangular"):
        a = spd(cp, batch, n, dtype, rng).reshape(shape)
        if op == "solve_triangular":
            a = cp.linalg.cholesky(a)  # well-conditioned lower triangle
        k = 1 if op == "solve_triangular" and batch == 1 else 4
        b = rng.standard_normal(shape[:-1] + (k,), dtype=dtype)
        return a, b
    return rng.standard_normal(shape, dtype=dtype), None


def norms(cp, x):
    """Frobenius norm of each matrix of a stack."""
    return cp.sqrt((cp.abs(x) ** 2).sum(axis=(-2, -1)))


def rel_err(cp, num, den):
    """max over the stack of ||num_i||_F / ||den_i||_F, float."""
    return float((norms(cp, num) / cp.maximum(norms(cp, den), 1e-300)).max())


def as_cupy(cp, x):
    """``x`` as a CuPy array (a torch tensor through DLPack)."""
    return x if isinstance(x, cp.ndarray) else cp.from_dlpack(x.contiguous())


def run_sections(suite, sections, cp):
    """Rows of every ``(name, section)`` (a callable returning rows): a section that raises
    becomes an absent row (one broken case must not hide the others' figures); the device is
    synchronized and CuPy's pool emptied after each."""
    rows = []
    for name, section in sections:
        try:
            rows += section()
        except Exception as exc:
            rows.append(absent(suite, name, "all", f"failed: {type(exc).__name__}: {exc}"))
        cp.cuda.Device().synchronize()
        cp.get_default_memory_pool().free_all_blocks()
    return rows

