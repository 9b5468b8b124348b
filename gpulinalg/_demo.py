"""``gpulinalg demo``: a short tour that says where each step ran and how long it took.

Each submodule contributes a ``step(small)`` function in its ``_demo`` module that returns rows
``{"step", "where", "seconds", "reference", "reference_seconds", "check"}``.
"""

import importlib
import time
import warnings

import numpy as np

from ._runtime import config, gpu_available, last_run, testing
from ._runtime.dispatch import dispatch
from ._runtime.errors import FallbackWarning

STEP_MODULES = ("dense", "decomp", "sparse", "gp")


def timed(fn):
    """``(fn(), seconds it took)``: the stopwatch of every demo step."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def runtime_step(small):
    """The dispatcher at work: a normal run, then an injected GPU out-of-memory fallback."""
    from ._runtime.validation import namespace
    n = 500 if small else 2000
    a = np.random.default_rng(0).standard_normal((n, n))
    fro = lambda x: float(namespace(x).linalg.norm(x))  # noqa: E731 - both backends, as numpy's
    fro(a)  # first touch of the pages, and the one-time GPU discovery below, stay out of it
    dispatch("runtime.frobenius", fro, fro, (a[:2, :2],))
    t0 = time.perf_counter()
    ref = np.linalg.norm(a)
    t_ref = time.perf_counter() - t0
    got = dispatch("runtime.frobenius", fro, fro, (a,), flops=2 * a.size, nbytes=a.nbytes)
    rec = last_run()
    rows = [dict(step=f"Frobenius norm {n}x{n}", where=f"{rec.backend} ({rec.reason})",
                 seconds=rec.seconds, reference="numpy.linalg.norm", reference_seconds=t_ref,
                 check=bool(np.isclose(got, ref)))]
    with testing.fake_gpu(), testing.inject_fault("oom"), config(backend="gpu"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = dispatch("runtime.frobenius", fro, fro, (a,), nbytes=a.nbytes)
    rec = last_run()
    warned = any(issubclass(w.category, FallbackWarning) for w in caught)
    rows.append(dict(step="same, GPU made to run out of memory", where=f"{rec.backend} "
                     f"(fell_back={rec.fell_back}, FallbackWarning={warned})",
                     seconds=rec.seconds, reference="numpy.linalg.norm", reference_seconds=t_ref,
                     check=bool(np.isclose(got, ref)) and rec.fell_back and warned))
    return rows


def _steps():
    yield "runtime", runtime_step
    for name in STEP_MODULES:
        try:
            module = importlib.import_module(f"gpulinalg.{name}._demo")
        except ModuleNotFoundError:
            continue
        yield name, module.step


def run_demo(small=False, out=None):
    print(f"gpulinalg demo — GPU available: {gpu_available()}", file=out)
    ok = True
    for name, step in _steps():
        print(f"\n[{name}]", file=out)
        for row in step(small):
            ok &= bool(row["check"])
            ref = row.get("reference_seconds")
            speed = f"  ({ref / row['seconds']:.1f}x vs {row['reference']})" if ref else ""
            print(f"  {row['step']:<44} {row['seconds'] * 1e3:9.2f} ms on {row['where']}"
                  f"{speed}  check={'ok' if row['check'] else 'FAILED'}", file=out)
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED", file=out)
    return 0 if ok else 1
