"""Fault injection for the GPU fault tests (``test_faults_gpu.py``): an allocator that fails the
k-th device allocation, a record of every dispatched run, and one trial's bookkeeping.

Everything here takes the array module (``cupy``) as an argument, so the bookkeeping runs on a
machine without a GPU against a fake pool (see ``test_faults_gpu.py``'s CPU tests).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import os
import sys
import threading
import traceback
import warnings
from typing import Any
from collections.abc import Callable

import numpy as np

import gpulinalg


class CountingAllocator:
    """A CuPy allocator (``malloc(size) -> MemoryPointer``) that counts the allocations it
    serves and raises ``error(size, total)`` at allocation number ``fail_at`` (1-based; ``None``:
    never), delegating every other one to ``base`` (the default pool's ``malloc``).

    Only the ``fail_at``-th allocation fails: what follows (a CPU result copied back to the
    device, a retry) is served, as after a transient shortage.
    """

    def __init__(self, base: Callable[[int], Any], fail_at: int | None = None,
                 error: Callable[[int, int], BaseException] | None = None) -> None:
        self.base, self.fail_at = base, fail_at
        self.error = error or (lambda size, total: MemoryError(f"injected: {size} bytes"))
        self.count = 0  # allocations asked for, the failed one included
        self.served_bytes = 0
        self.failed_size: int | None = None
        #: where the refused allocation was asked for (the innermost frames, for the report)
        self.failed_at = ""
        self._lock = threading.Lock()

    @property
    def failed(self) -> bool:
        """Whether the ``fail_at``-th allocation was reached (and refused)."""
        return self.failed_size is not None

    def torch_allocator(self, empty: Callable[..., Any]) -> Callable[..., Any]:
        """``empty`` (``torch.empty_strided``) counted in the same sequence as :meth:`malloc`;
        the ``fail_at``-th allocation raises ``torch.OutOfMemoryError``, as torch's caching
        allocator does when the device is full."""
        import torch

        def counted(shape: Any, strides: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.count += 1
                hit = self.count == self.fail_at
                if hit:
                    self.failed_size = 0
            if hit:
                self.failed_at = _caller_frames()
                raise torch.OutOfMemoryError("CUDA out of memory (injected)")
            return empty(shape, strides, **kwargs)
        return counted

    def malloc(self, size: int) -> Any:
        with self._lock:
            self.count += 1
            hit = self.count == self.fail_at
            if hit:
                self.failed_size = int(size)
        if hit:
            self.failed_at = _caller_frames()
            raise self.error(int(size), self.served_bytes)
        mem = self.base(size)
        with self._lock:
            self.served_bytes += int(size)
        return mem


def _caller_frames(depth: int = 8) -> str:
    """The innermost ``depth`` frames above the allocator, as ``file:line function`` (a refused
    allocation that the call absorbs is reported with where it was made)."""
    frames = traceback.extract_stack()[:-2][-depth:]
    return " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                       for f in reversed(frames))


@contextlib.contextmanager
def counting_allocator(cupy: Any, fail_at: int | None = None):
    """Install a :class:`CountingAllocator` over ``cupy``'s default pool as CuPy's (process-wide)
    allocator for the block; the allocator in force before comes back in any case."""
    pool = cupy.get_default_memory_pool()
    previous = cupy.cuda.get_allocator()
    counter = CountingAllocator(pool.malloc, fail_at, cupy.cuda.memory.OutOfMemoryError)
    cupy.cuda.set_allocator(counter.malloc)
    torch_engine = sys.modules.get("gpulinalg.dense._tensors_cuda")
    torch_empty = torch_engine._empty if torch_engine is not None else []
    if torch_empty:  # dense's torch engine allocates from torch's caching allocator
        torch_empty[0] = counter.torch_allocator(original := torch_empty[0])
    try:
        yield counter
    finally:
        cupy.cuda.set_allocator(previous)
        if torch_empty:
            torch_empty[0] = original


@dataclasses.dataclass(frozen=True)
class Run:
    """One dispatched run, as the ``gpulinalg`` logger reports it."""

    op: str
    route: str
    fell_back: bool


class _RunHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.runs: list[Run] = []

    def emit(self, record: logging.LogRecord) -> None:
        # the dispatcher logs "%s ran on %s (%s) in %.3g s" once per finished run, at WARNING
        # when the run fell back to the CPU
        if record.msg == "%s ran on %s (%s) in %.3g s" and len(record.args) == 4:
            op, route = record.args[0], record.args[1]
            self.runs.append(Run(str(op), str(route), record.levelno >= logging.WARNING))


@contextlib.contextmanager
def dispatch_log():
    """Collect a :class:`Run` for every run the dispatcher finishes in the block (all threads)."""
    log = logging.getLogger("gpulinalg")
    handler, level = _RunHandler(), log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield handler.runs
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


# -- arrays: to the host, snapshots, comparison ------------------------------------------------

def to_host(x: Any) -> Any:
    """NumPy copies of every array in ``x`` (CuPy, torch, SciPy/CuPy sparse, NamedTuples,
    tuples, lists, dicts); other values as they are."""
    if x is None or isinstance(x, (bool, int, float, complex, str)):
        return x
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, np.generic):
        return np.asarray(x)
    mod = type(x).__module__.split(".")[0]
    if hasattr(x, "indptr") and hasattr(x, "indices"):  # CSR from SciPy or CuPy
        return tuple(to_host(getattr(x, f)) for f in ("data", "indices", "indptr"))
    if hasattr(x, "row") and hasattr(x, "col") and hasattr(x, "data"):  # COO
        return tuple(to_host(getattr(x, f)) for f in ("data", "row", "col"))
    if mod == "cupy":
        return x.get()
    if mod == "torch":
        return x.detach().cpu().numpy().copy() if x.layout == _torch_strided() else \
            to_host(x.to_dense())
    if isinstance(x, tuple):
        return tuple(to_host(v) for v in x)
    if isinstance(x, list):
        return [to_host(v) for v in x]
    if isinstance(x, dict):
        return {k: to_host(v) for k, v in x.items()}
    return x


def _torch_strided():
    return sys.modules["torch"].strided


def leaves(x: Any) -> list:
    """The arrays and numbers of a host tree (see :func:`to_host`), in order."""
    if isinstance(x, (tuple, list)):
        return [leaf for v in x for leaf in leaves(v)]
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in leaves(x[k])]
    return [x]


def same_bits(a: Any, b: Any) -> bool:
    """Whether two host trees hold bit-identical arrays (same dtypes and shapes)."""
    la, lb = leaves(a), leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            x, y = np.asarray(x), np.asarray(y)
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                return False
        elif x != y and not (x != x and y != y):  # numbers; NaN equals NaN
            return False
    return True


def mismatch(got: Any, ref: Any, ulps: float = 64.0) -> str | None:
    """``None`` when the host trees agree to ``ulps`` units of roundoff of each array's
    largest entry (the CPU engine run twice on one input), else what differs."""
    lg, lr = leaves(got), leaves(ref)
    if len(lg) != len(lr):
        return f"{len(lg)} result parts, expected {len(lr)}"
    for i, (x, y) in enumerate(zip(lg, lr)):
        if x is None or y is None or isinstance(x, str):
            if x != y:
                return f"part {i}: {x!r} != {y!r}"
            continue
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return f"part {i}: shape {x.shape} != {y.shape}"
        if x.size == 0 or x.dtype.kind in "biuV":
            if not np.array_equal(x, y):
                return f"part {i}: values differ"
            continue
        eps = np.finfo(y.dtype if y.dtype.kind in "fc" else np.float64).eps
        scale = float(np.nanmax(np.abs(y))) if np.isfinite(y).any() else 1.0
        err = np.abs(x.astype(np.complex128) - y.astype(np.complex128))
        bad = ~((err <= ulps * eps * max(scale, 1e-300)) | (np.isnan(x) & np.isnan(y)))
        if bad.any():
            return f"part {i}: max error {float(np.nanmax(err))} (scale {scale})"
    return None


# -- one trial -----------------------------------------------------------------------------------

@dataclasses.dataclass
class Trial:
    """What one call with allocation ``k`` refused did."""

    k: int
    mode: str  # the fallback setting: "cpu" or "raise"
    hit: bool  # the k-th allocation happened (and failed)
    outcome: str  # "fallback", "clean_error", "no_fault", or "bad"
    leaked_bytes: int
    problems: list

    @property
    def ok(self) -> bool:
        return not self.problems


def device_bytes(cupy: Any) -> tuple[int, int]:
    """``(CuPy pool bytes in use, torch bytes allocated)`` on the current device (torch: 0
    unless torch is imported and has touched CUDA)."""
    torch = sys.modules.get("torch")
    t = 0
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        t = int(torch.cuda.memory_allocated())
    return int(cupy.get_default_memory_pool().used_bytes()), t


def _drop_tracebacks(exc: BaseException | None) -> None:
    """Cut ``exc`` and the exceptions it chains from their tracebacks (frames that reference
    the exception form cycles only the garbage collector would free)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__


def _settled_bytes(cupy: Any, before: tuple[int, int]) -> tuple[int, int]:
    """The device bytes in use once whatever is unreachable is freed (a young-generation
    collection first: a full one costs tens of milliseconds with CuPy and torch loaded)."""
    after = device_bytes(cupy)
    for generation in (0, 2):
        if after == before:
            break
        gc.collect(generation)
        cupy.cuda.get_current_stream().synchronize()
        after = device_bytes(cupy)
    return after


def run_trial(cupy: Any, call: Callable[[], Any], inputs: Any, reference: Any, k: int,
              mode: str, single_dispatch: bool) -> Trial:
    """Call ``call()`` under ``backend="gpu"``, ``fallback=mode`` with device allocation ``k``
    refused, and check what the issue asks: the CPU result and a recorded fallback (or
    ``MemoryError`` under ``fallback="raise"``), inputs bit-identical, device memory in use
    back to its level before the call."""
    snapshot = to_host(inputs)
    before = device_bytes(cupy)
    result = error = None
    with contextlib.ExitStack() as stack:
        counter = stack.enter_context(counting_allocator(cupy, k))
        runs = stack.enter_context(dispatch_log())
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        stack.enter_context(gpulinalg.config(backend="gpu", fallback=mode))
        try:
            result = call()
        except MemoryError as exc:
            error = f"{type(exc).__name__}: {exc}"
            _drop_tracebacks(exc)  # its frames hold device arrays: let them go without gc
    got = to_host(result)
    del result
    last = gpulinalg.last_run()
    after = _settled_bytes(cupy, before)
    leaked = max(after[0] - before[0], 0) + max(after[1] - before[1], 0)
    problems = []
    if not same_bits(to_host(inputs), snapshot):
        problems.append("an input changed")
    if leaked:
        problems.append(f"device bytes in use grew by {leaked} (pool {before[0]} -> "
                        f"{after[0]}, torch {before[1]} -> {after[1]})")
    fallbacks = [w for w in caught if issubclass(w.category, gpulinalg.FallbackWarning)]
    if not counter.failed:
        outcome = "no_fault"
        if error is not None:
            problems.append(f"raised without a fault: {error}")
    elif mode == "raise":
        outcome = "clean_error" if error is not None else "bad"
        if error is None:
            problems.append("fallback='raise' but the call returned")
        elif last is None or "raised" not in last.details:
            problems.append("last_run() does not record the raise")
    else:
        outcome = "fallback"
        if error is not None:
            problems.append(f"fallback='cpu' but the call raised {error}")
        else:
            if not any(r.fell_back for r in runs):
                problems.append(f"no run recorded a fallback ({runs}); the refused "
                                f"allocation was made at {counter.failed_at}")
            if single_dispatch and not (last is not None and last.fell_back):
                problems.append(f"last_run().fell_back is False ({last})")
            if not fallbacks:
                problems.append("no FallbackWarning")
            diff = mismatch(got, reference)
            if diff is not None:
                problems.append(f"not the CPU result: {diff}")
        if problems:
            outcome = "bad"
    return Trial(k, mode, counter.failed, outcome, leaked, problems)


def ks_to_try(count: int, cap: int) -> list[int]:
    """Allocation numbers to refuse: every one of ``1..count`` when ``count <= cap``, else
    ``cap`` of them spread evenly, first and last included.

    >>> ks_to_try(3, 10), ks_to_try(100, 5)
    ([1, 2, 3], [1, 26, 50, 75, 100])
    """
    if count <= cap:
        return list(range(1, count + 1))
    return sorted({int(round(x)) for x in np.linspace(1, count, cap)})


def summarize(op: str, inputs: str, allocations: int, trials: list[Trial]) -> dict:
    """The JSON row of one (operation, input kind): counts of trials by outcome."""
    hit = [t for t in trials if t.hit]
    return {
        "op": op, "inputs": inputs, "allocations": allocations,
        "tried": len({t.k for t in trials}),
        "trials": len(trials),
        "fallbacks": sum(t.outcome == "fallback" for t in hit),
        "clean_errors": sum(t.outcome == "clean_error" for t in hit),
        "leaks": sum(t.leaked_bytes > 0 for t in trials),
        "failures": sum(not t.ok for t in trials),
        "problems": sorted({f"k={t.k} {t.mode}: {p}" for t in trials for p in t.problems})[:20],
    }
