"""Test hooks of the dispatcher: a pretend GPU and injected GPU faults.

They let a machine without a GPU exercise every branch of :func:`gpulinalg._runtime.dispatch`.
"""

import contextlib
import threading

from . import device as _device

__all__ = ["fake_gpu", "inject_fault", "SimulatedCUDAError"]

_lock = threading.Lock()
_faults = []  # dicts: kind, op, remaining


class SimulatedCUDAError(RuntimeError):
    """Stands in for a sticky CUDA error; ``status`` is a CUDA error code (700: illegal address)."""

    def __init__(self, status=700):
        self.status = status
        super().__init__(f"simulated CUDA error {status}")


@contextlib.contextmanager
def fake_gpu(free=16 << 30, total=32 << 30, name="Fake GPU"):
    """Make the calling thread see one GPU with ``free``/``total`` bytes; arrays stay NumPy.

    The GPU function is then called with NumPy arrays, so pair this with :func:`inject_fault`
    or with GPU functions that work on NumPy arrays.
    """
    info = _device.GPUInfo(0, name, (9, 0), int(total))
    prev = getattr(_device._fake, "info", None), getattr(_device._fake, "memory", None)
    _device._fake.info, _device._fake.memory = info, (int(free), int(total))
    try:
        yield info
    finally:
        _device._fake.info, _device._fake.memory = prev


@contextlib.contextmanager
def inject_fault(kind="oom", op=None, times=1):
    """Make the next ``times`` GPU runs (of operation ``op``, or any) fail before they start.

    Parameters
    ----------
    kind : {"oom", "sticky"}
        ``oom`` raises ``MemoryError``; ``sticky`` raises :class:`SimulatedCUDAError` (700).
    """
    if kind not in ("oom", "sticky"):
        raise ValueError(f"kind must be 'oom' or 'sticky', got {kind!r}")
    fault = {"kind": kind, "op": op, "remaining": int(times)}
    with _lock:
        _faults.append(fault)
    try:
        yield fault
    finally:
        with _lock:
            if fault in _faults:
                _faults.remove(fault)


def maybe_fail(op):
    """Called by the dispatcher just before a GPU function runs."""
    if not _faults:  # the usual case: nothing injected, no lock taken
        return
    with _lock:
        for fault in _faults:
            if fault["remaining"] > 0 and fault["op"] in (None, op):
                fault["remaining"] -= 1
                kind = fault["kind"]
                break
        else:
            return
    if kind == "oom":
        raise MemoryError(f"injected out-of-memory in {op}")
    raise SimulatedCUDAError(700)


def reset_gpu_state():
    """Re-enable a GPU disabled by a (simulated) sticky error: for tests only."""
    with _device._lock:
        _device._state["disabled"] = None
