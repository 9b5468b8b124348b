"""Test helpers for code that calls gpulinalg: make its GPU runs fail on purpose, and check
that your code survives gpulinalg's fallbacks.

gpulinalg asks one *device provider* per thread what GPU there is (the machine's CUDA devices,
unless a provider is installed). :func:`inject_fault` installs one that makes the next GPU runs
fail before they start, as running out of device memory or a sticky CUDA error would; the
dispatcher then falls back to the CPU (with a :class:`~gpulinalg.FallbackWarning`) or raises,
as it would for the real failure. A provider of your own (any object with the attributes of
:class:`DeviceProvider`) is installed with :func:`use_provider`.

Examples
--------
>>> import warnings, numpy as np, gpulinalg
>>> from gpulinalg.testing import inject_fault
>>> with inject_fault("oom"), warnings.catch_warnings(record=True):
...     x = gpulinalg.decomp.cholesky(np.eye(3))  # on a GPU: the CPU's answer, and a warning
>>> bool(np.allclose(x, np.eye(3)))
True
"""

import contextlib
import threading
from typing import Any, Protocol, runtime_checkable

from ._runtime import device as _device
from ._runtime.arrays import to_device as _to_device
from ._runtime.streams import op_stream as _op_stream

__all__ = ["DeviceProvider", "InjectedCUDAError", "inject_fault", "use_provider",
           "reset_gpu_state"]


@runtime_checkable
class DeviceProvider(Protocol):
    """What gpulinalg asks the device provider of a thread.

    Attributes
    ----------
    info : gpulinalg.GPUInfo or None
        The one device the provider shows (``gpulinalg.gpus()`` returns it, and the dispatcher
        takes the GPU as present), or ``None`` to keep the machine's devices.
    memory : tuple of (int, int) or None
        The ``(free, total)`` bytes the budget judges estimates against, or ``None`` for the
        real figures.

    Methods
    -------
    before_run(op)
        Called by the dispatcher just before a GPU function of operation ``op`` (``"decomp.qr"``)
        runs; raising here is raising in the GPU run (``MemoryError``: out of memory; an
        exception with a sticky CUDA ``status``, such as :class:`InjectedCUDAError`: a poisoned
        context).
    to_device(x)
        How an array argument reaches a GPU function (the machine's own route: CuPy).
    stream()
        A context manager around a GPU function that runs on the thread's own stream (the
        machine's own: :func:`gpulinalg._runtime.streams.op_stream`).

    Examples
    --------
    >>> import numpy as np
    >>> class Roomy:
    ...     info, memory = None, None
    ...     def before_run(self, op): pass
    ...     def to_device(self, x): return x
    ...     def stream(self): return contextlib.nullcontext()
    >>> import contextlib
    >>> isinstance(Roomy(), DeviceProvider)
    True
    """

    info: Any
    memory: Any

    def before_run(self, op: str) -> None: ...

    def to_device(self, x: Any) -> Any: ...

    def stream(self) -> contextlib.AbstractContextManager: ...


class InjectedCUDAError(RuntimeError):
    """Stands in for a sticky CUDA error; ``status`` is a CUDA error code (700: illegal address).

    Examples
    --------
    >>> InjectedCUDAError(719).status
    719
    """

    def __init__(self, status: int = 700) -> None:
        self.status = status
        super().__init__(f"injected CUDA error {status}")


class _Faulty:
    """The provider of :func:`inject_fault`: the provider it wraps (``None``: the machine's
    devices), failing the next ``times`` GPU runs of ``op`` (``None``: any)."""

    def __init__(self, base, kind, op, times):
        if kind not in ("oom", "sticky"):
            raise ValueError(f"kind must be 'oom' or 'sticky', got {kind!r}")
        self.base, self.kind, self.op, self.remaining = base, kind, op, int(times)
        self.info = getattr(base, "info", None)
        self.memory = getattr(base, "memory", None)
        self._lock = threading.Lock()

    def to_device(self, x):
        return _to_device(x) if self.base is None else self.base.to_device(x)

    def stream(self):
        return _op_stream() if self.base is None else self.base.stream()

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
        raise InjectedCUDAError(700)


@contextlib.contextmanager
def use_provider(provider: DeviceProvider):
    """Install ``provider`` (a :class:`DeviceProvider`) in the calling thread for a ``with``
    block; blocks nest, and other threads keep theirs.

    Examples
    --------
    >>> class Roomy:
    ...     info, memory = None, None
    ...     def before_run(self, op): pass
    ...     def to_device(self, x): return x
    ...     def stream(self): return contextlib.nullcontext()
    >>> with use_provider(Roomy()) as p:
    ...     isinstance(p, Roomy)
    True
    """
    with _device.use_provider(provider) as prov:
        yield prov


@contextlib.contextmanager
def inject_fault(kind: str = "oom", op: str | None = None, times: int = 1):
    """Make the calling thread's next ``times`` GPU runs (of operation ``op``, or any) fail
    before they start, on the provider in force (the machine's GPU, or one of yours).

    Parameters
    ----------
    kind : {"oom", "sticky"}
        ``oom`` raises ``MemoryError`` (the dispatcher frees its pools and falls back, or raises
        under ``fallback="raise"``); ``sticky`` raises :class:`InjectedCUDAError` (700), after
        which the GPU is disabled for the process (see :func:`reset_gpu_state`).
    op : str, optional
        The operation's name as :func:`gpulinalg.last_run` reports it (``"decomp.svd"``).
    times : int
        How many GPU runs fail.

    Yields
    ------
    provider
        Its ``remaining`` attribute counts the failures not yet injected.

    Examples
    --------
    >>> with inject_fault("oom", op="decomp.qr", times=2) as fault:
    ...     fault.remaining
    2
    """
    with _device.use_provider(_Faulty(_device.installed(), kind, op, times)) as prov:
        yield prov


def reset_gpu_state() -> None:
    """Re-enable a GPU disabled by a sticky CUDA error (an injected one): for tests only.

    Examples
    --------
    >>> reset_gpu_state()
    >>> import gpulinalg._runtime.device as d
    >>> d.disabled_reason() is None
    True
    """
    with _device._lock:
        _device._state["disabled"] = None
