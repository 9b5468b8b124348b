"""Device providers that stand in for a GPU: a pretend GPU and injected GPU faults.

They let a machine without a GPU exercise every branch of :func:`gpulinalg._runtime.dispatch`,
and a machine with one exercise its fallbacks. Both install a provider in the calling thread
through :func:`gpulinalg._runtime.device.use_provider`; production code never imports this
module (the tests and ``gpulinalg demo`` do).
"""

import contextlib
import threading

from . import device as _device

__all__ = ["FakeGPU", "FaultyGPU", "fake_gpu", "inject_fault", "SimulatedCUDAError",
           "reset_gpu_state"]


class SimulatedCUDAError(RuntimeError):
    """Stands in for a sticky CUDA error; ``status`` is a CUDA error code (700: illegal address)."""

    def __init__(self, status=700):
        self.status = status
        super().__init__(f"simulated CUDA error {status}")


class FakeGPU:
    """A pretend GPU: one device with ``free``/``total`` bytes; GPU functions get host arrays."""

    simulated = True

    def __init__(self, free=16 << 30, total=32 << 30, name="Fake GPU"):
        self.info = _device.GPUInfo(0, name, (9, 0), int(total))
        self.memory = (int(free), int(total))

    def before_run(self, op):
        pass


class FaultyGPU:
    """Wraps another provider (or the real devices, ``base=None``) and fails the next ``times``
    GPU runs of operation ``op`` (``None``: any) before they start."""

    def __init__(self, base, kind, op, times):
        if kind not in ("oom", "sticky"):
            raise ValueError(f"kind must be 'oom' or 'sticky', got {kind!r}")
        self.base, self.kind, self.op, self.remaining = base, kind, op, int(times)
        self.info = getattr(base, "info", None)
        self.memory = getattr(base, "memory", None)
        self.simulated = getattr(base, "simulated", False)
        self._lock = threading.Lock()

    def before_run(self, op):
        with self._lock:
            hit = self.remaining > 0 and self.op in (None, op)
            if hit:
                self.remaining -= 1
        if not hit:
            if self.base is not None:
                self.base.before_run(op)
            return
        if self.kind == "oom":
            raise MemoryError(f"injected out-of-memory in {op}")
        raise SimulatedCUDAError(700)


@contextlib.contextmanager
def fake_gpu(free=16 << 30, total=32 << 30, name="Fake GPU"):
    """Make the calling thread see one GPU with ``free``/``total`` bytes; arrays stay NumPy.

    The GPU function is then called with NumPy arrays, so pair this with :func:`inject_fault`
    or with GPU functions that work on NumPy arrays.
    """
    with _device.use_provider(FakeGPU(free, total, name)) as prov:
        yield prov.info


@contextlib.contextmanager
def inject_fault(kind="oom", op=None, times=1):
    """Make the calling thread's next ``times`` GPU runs (of operation ``op``, or any) fail
    before they start, on the provider in force (a :func:`fake_gpu`, or the real GPU).

    Parameters
    ----------
    kind : {"oom", "sticky"}
        ``oom`` raises ``MemoryError``; ``sticky`` raises :class:`SimulatedCUDAError` (700).
    """
    with _device.use_provider(FaultyGPU(_device.installed(), kind, op, times)) as prov:
        yield prov


def reset_gpu_state():
    """Re-enable a GPU disabled by a (simulated) sticky error: for tests only."""
    with _device._lock:
        _device._state["disabled"] = None
