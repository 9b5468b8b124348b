"""``gpulinalg demo``: a short tour that says where each step ran, how long it took warm, what the
first (cold) call cost, and how that compares with NumPy / SciPy / scikit-learn.

Each submodule contributes a ``step(small)`` function in its ``_demo`` module that returns rows
built by :func:`compare` (or dicts with the same keys: ``step``, ``where``, ``seconds``,
``cold_seconds``, ``runs``, ``reference``, ``reference_seconds``, ``check``).

Timing: the first call of a step is its cold call (plans, kernels, handles, page faults) and is
reported on its own; the step's time is the median of several warm calls after it (leaving out
any in which ``backend="auto"`` timed the side its model did not choose). The reference
gets one untimed warm-up call, then the median of as many calls; a reference whose one call
outlasts the time a side may take (a SciPy fit of minutes) is timed by that call alone.
"""

import importlib
import statistics
import sys
import time
import traceback
import warnings

import numpy as np

from ._runtime import config_context, last_run
from ._runtime import device as _device
from ._runtime import measured as _measured
from ._runtime.dispatch import Op, dispatch
from ._runtime.errors import FallbackWarning

STEP_MODULES = ("dense", "decomp", "sparse", "gp")
#: Optional packages a step may need, and the extra that installs them.
OPTIONAL = {"sklearn": "gpulinalg[sklearn]", "torch": "gpulinalg[torch]"}
#: (most warm runs, seconds of warm runs per side) by tour size.
_RUNS = {"small": (5, 0.4), "full": (7, 3.0)}


class _Tour:
    size = "small"


_tour = _Tour()


def _sync():
    if "cupy" in sys.modules and _device.gpu_is_real():
        sys.modules["cupy"].cuda.Device().synchronize()


def timed(fn):
    """``(fn(), seconds it took)``, GPU work included: the stopwatch of every demo step."""
    _sync()
    t0 = time.perf_counter()
    out = fn()
    _sync()
    return out, time.perf_counter() - t0


def _median_runs(fn):
    """Time warm calls of ``fn`` (at least one; more while the tour's time per side lasts);
    return ``(last output, median seconds, number of runs, spread)``, the spread the runs'
    range over their median (``None`` from one run). A run in which ``backend="auto"`` sent a
    call to the side its cost model did not choose, to time it (a call's first repeats, see
    :mod:`gpulinalg._runtime.measured`), is left out: the figures are the steady state."""
    most, budget = _RUNS[_tour.size]
    times, spent = [], 0.0
    for attempt in range(most + 4):  # a few more for the learning runs left out
        before = _measured.probes()
        out, t = timed(fn)
        spent += t
        if _measured.probes() == before or (attempt == most + 3 and not times):
            times.append(t)
        if len(times) >= most or (times and spent + statistics.median(times) > budget):
            break
    median = statistics.median(times)
    spread = (max(times) - min(times)) / median if len(times) > 1 and median > 0 else None
    return out, median, len(times), spread


def where(rec=None):
    """Where a run happened, short: ``gpu``, ``gpu/cudss``, ``cpu``; the reason is added when it
    is news (a fallback, or the CPU chosen although a GPU is there). Without a GPU the reason is
    printed once at the top of the tour instead."""
    rec = last_run() if rec is None else rec
    text = rec.backend
    library = (rec.details or {}).get("library")
    if library:
        text += f"/{library}"
    if rec.fell_back or (rec.backend == "cpu" and _device.gpu_available()):
        text += f" ({rec.reason})"
    return text


def compare(name, ours, reference, reference_name, check, place=None, own_cpu_engine=False):
    """One row of the tour: run ``ours`` cold, then warm; ``reference`` warm; check the outputs.

    Parameters
    ----------
    name : str
    ours, reference : callable
        Zero-argument callables: the gpulinalg way and the NumPy/SciPy/scikit-learn way.
    reference_name : str
    check : callable
        ``check(our_output, reference_output) -> bool``.
    place : callable, optional
        Called right after the cold call; returns the row's ``where`` (default :func:`where`).
    own_cpu_engine : bool
        The CPU run is gpulinalg's own algorithm, not the reference's library under it: only
        then does a CPU row print a ratio (else it names the engine the two share).
    """
    _, cold = timed(ours)
    here = (place or where)()
    got, seconds, runs, spread = _median_runs(ours)
    expected, ref_seconds = timed(reference)  # the reference's warm-up...
    ref_spread = None
    if ref_seconds <= _RUNS[_tour.size][1]:  # ...untimed, unless one call outlasts the budget
        expected, ref_seconds, _, ref_spread = _median_runs(reference)
    noise = None if spread is None or ref_spread is None else spread + ref_spread
    return dict(step=name, where=here, seconds=seconds, cold_seconds=cold, runs=runs,
                reference=reference_name, reference_seconds=ref_seconds, noise=noise,
                same_engine=here.startswith("cpu") and not own_cpu_engine,
                check=bool(check(got, expected)))


def rows_of(functions, small):
    """The rows of ``fn(small)`` for each function (each returns a row or a list of rows); one
    that needs a missing optional package (scikit-learn, torch) gives a row saying so."""
    rows = []
    for fn in functions:
        try:
            got = fn(small)
        except ModuleNotFoundError as exc:
            reason = _skip_reason(exc)
            if reason is None:
                raise
            got = dict(step=fn.__name__.removesuffix("_step"), where=f"skipped ({reason[9:]})",
                       seconds=None, check=True)
        rows.extend(got if isinstance(got, list) else [got])
    return rows


def runtime_step(small):
    """The dispatcher at work: a normal run, then (on a GPU) an injected out-of-memory fallback
    (:func:`gpulinalg.testing.inject_fault`)."""
    from ._runtime.validation import namespace
    n = 1000 if small else 4000
    a = np.random.default_rng(0).standard_normal((n, n))
    fro = lambda x: float(namespace(x).linalg.norm(x))  # noqa: E731 - both backends, as numpy's
    ours = lambda: dispatch(Op("runtime.frobenius", fro, fro, (a,),  # noqa: E731
                               flops=2 * a.size, nbytes=a.nbytes))
    rows = [compare(f"Frobenius norm {n}x{n}", ours, lambda: np.linalg.norm(a),
                    "numpy.linalg.norm", lambda x, y: np.isclose(x, y))]
    if not _device.gpu_available():
        rows.append(dict(step="same, GPU out of memory: fallback", where="skipped (no GPU)",
                         seconds=None, check=True))
        return rows
    from .testing import inject_fault
    ref = np.linalg.norm(a)
    with inject_fault("oom"), config_context(backend="gpu"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got, seconds = timed(lambda: dispatch(Op("runtime.frobenius", fro, fro, (a,),
                                                     nbytes=a.nbytes)))
    rec = last_run()
    warned = any(issubclass(w.category, FallbackWarning) for w in caught)
    rows.append(dict(step="same, injected GPU out of memory: fallback",
                     where=f"{rec.backend} (fell back: {rec.fell_back}, FallbackWarning: "
                     f"{warned})", seconds=seconds, check=bool(np.isclose(got, ref))
                     and rec.fell_back and warned))
    return rows


def _steps():
    yield "runtime", runtime_step
    for name in STEP_MODULES:
        module = importlib.import_module(f"gpulinalg.{name}._demo")
        yield name, module.step


def _fmt_time(seconds):
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def ratio(seconds, reference_seconds, reference, noise=None):
    """``"3.2× faster than scipy.linalg.svd"`` or ``"1.4× slower than ..."``, from warm medians;
    ``"as fast as ..."`` where the ratio is within ``noise``, the runs' relative spread (a re-run
    could flip such a ratio, so none is printed)."""
    if not seconds or not reference_seconds:
        return ""
    r = reference_seconds / seconds
    if noise is not None and max(r, 1 / r) <= 1 + noise:
        return f"as fast as {reference} (within the runs' spread, {noise:.0%})"
    return f"{r:.1f}× faster than {reference}" if r >= 1 else \
        f"{1 / r:.1f}× slower than {reference}"


_COLUMNS = f"  {'check':<6} {'step':<42} {'where':<12} {'warm':>9} {'first call':>10}  comparison"


def format_row(row):
    """One printed line; a second one when where the step ran needs explaining."""
    short, _, note = row["where"].partition(" (")
    cold = row.get("cold_seconds")
    versus = ratio(row["seconds"], row.get("reference_seconds"), row.get("reference"),
                   row.get("noise"))
    if row.get("same_engine") and versus:  # a ratio of one engine with itself is noise
        versus = f"the same engine as {row['reference']} on the CPU"
    line = (f"  {'ok' if row['check'] else 'FAILED':<6} {row['step']:<42} {short:<12} "
            f"{_fmt_time(row['seconds']):>9} {_fmt_time(cold) if cold else '':>10}  {versus}")
    if note and not note.startswith("no GPU"):  # without a GPU, the reason heads the tour
        line += f"\n{'':9}({note}"
    return line.rstrip()


def _header(size, status, out):
    most = _RUNS[size][0]
    print(f"gpulinalg demo, {size} sizes — {status.line}", file=out)
    if status.hint:
        print(f"  ({status.hint})", file=out)
    print(f"warm: median of up to {most} runs after the first call; first call: the cold one, "
          "with its planning and loading", file=out)
    print("\n" + _COLUMNS, file=out)
    return status


def _skip_reason(exc):
    top = (exc.name or "").split(".")[0]
    return f"skipped: needs {top} (pip install '{OPTIONAL[top]}')" if top in OPTIONAL else None


class _Status:
    """What the tour's first line says without :func:`gpulinalg._info.gpu_status` (the command
    line passes that one in; the submodules, which import this module, may not import it)."""

    def __init__(self):
        self.usable = _device.gpu_available()
        self.line = "GPU" if self.usable else f"no GPU: {_device.unavailable_reason()}"
        self.hint = None


def run_demo(size="auto", out=None, status=None):
    """Run the tour (``size``: ``"small"``, ``"full"`` or ``"auto"``: full sizes when a GPU is
    usable, small ones otherwise); print it to ``out``; return the exit status (0: all passed).
    ``status``: the machine's diagnosis (:func:`gpulinalg._info.gpu_status`) for the first line.
    """
    out = sys.stdout if out is None else out
    t_start = time.perf_counter()
    if size == "auto":
        size = "full" if _device.gpu_available() else "small"
    status = _header(size, status or _Status(), out)
    _tour.size = size
    ok = True
    for name, step in _steps():
        print(f"[{name}]", file=out, flush=True)
        try:
            rows = step(size == "small")
        except Exception as exc:  # a step that breaks fails the tour; the others still run
            reason = _skip_reason(exc) if isinstance(exc, ModuleNotFoundError) else None
            ok &= reason is not None
            print(f"  {reason or 'FAILED with an error:'}", file=out)
            if reason is None:
                print(traceback.format_exc(limit=-3), file=out)
            continue
        for row in rows:
            ok &= bool(row["check"])
            print(format_row(row), file=out, flush=True)
    took = time.perf_counter() - t_start
    print(f"\n{'all checks passed' if ok else 'SOME CHECKS FAILED'} ({took:.0f} s; "
          f"{'GPU' if status.usable else 'CPU only'})", file=out)
    return 0 if ok else 1
