"""Per-thread, per-device CUDA streams and library handles.

Every handle belongs to exactly one (thread, device, library) and is bound to that thread's
stream on that device, so 16 threads never share a handle. Handles are created on first use,
destroyed when their thread ends (best effort) and at interpreter exit.
"""

import atexit
import importlib
import threading
import weakref

from . import device as _device

__all__ = ["get_stream", "get_handle", "op_stream", "LIBRARIES", "release_all"]

#: library name -> nvmath.bindings module that creates, binds and destroys its handle.
LIBRARIES = {
    "cublas": "nvmath.bindings.cublas",
    "cublasLt": "nvmath.bindings.cublasLt",
    "cusolverDn": "nvmath.bindings.cusolverDn",
    "cusolverSp": "nvmath.bindings.cusolverSp",
    "cudss": "nvmath.bindings.cudss",
}
_BINDS_STREAM = {"cublas", "cusolverDn", "cusolverSp", "cudss"}

_registry_lock = threading.Lock()
_registry: dict = {}  # (thread ident, device, library) -> handle, for atexit


class _ThreadResources:
    """Streams and handles of one thread; released when the thread's locals are collected."""

    def __init__(self):
        self.streams = {}
        self.handles: dict = {}
        self.events = {}
        self.ident = threading.get_ident()
        weakref.finalize(self, _release, self.ident, self.handles)


_local = threading.local()


def _resources():
    res = getattr(_local, "res", None)
    if res is None:
        res = _local.res = _ThreadResources()
    return res


def get_stream(device=None):
    """The calling thread's non-blocking CuPy stream on ``device`` (default: current)."""
    import cupy
    dev = _device.current_device() if device is None else int(device)
    res = _resources()
    stream = res.streams.get(dev)
    if stream is None:
        with cupy.cuda.Device(dev):
            stream = res.streams[dev] = cupy.cuda.Stream(non_blocking=True)
    return stream


def get_handle(library, device=None):
    """The calling thread's handle of ``library`` on ``device``, bound to :func:`get_stream`.

    Parameters
    ----------
    library : {"cublas", "cublasLt", "cusolverDn", "cusolverSp", "cudss"}
    """
    if library not in LIBRARIES:
        raise ValueError(f"unknown library {library!r}; known: {sorted(LIBRARIES)}")
    import cupy
    dev = _device.current_device() if device is None else int(device)
    res = _resources()
    key = (dev, library)
    handle = res.handles.get(key)
    if handle is None:
        mod = importlib.import_module(LIBRARIES[library])
        with cupy.cuda.Device(dev):
            handle = mod.create()
            if library in _BINDS_STREAM:
                mod.set_stream(handle, get_stream(dev).ptr)
        res.handles[key] = handle
        with _registry_lock:
            _registry[(res.ident, dev, library)] = handle
    return handle


class op_stream:
    """Run a block on the thread's stream, ordered after and before the caller's current stream.

    Work the caller queued on its current stream finishes before the block's work starts, and
    the caller's stream waits for the block's work: CuPy results are safe to use on it at once.
    (When the block raises, the caller's stream is not made to wait.) A class rather than a
    generator-based context manager: it is entered on every GPU call.
    """

    __slots__ = ("device", "stream", "caller", "after")

    def __init__(self, device=None):
        self.device = device

    def __enter__(self):
        import cupy
        stream = self.stream = get_stream(self.device)
        caller = self.caller = cupy.cuda.get_current_stream()
        if caller == stream:
            self.after = None
        else:
            before, self.after = _events(stream)
            stream.wait_event(caller.record(before))
        stream.__enter__()
        return stream

    def __exit__(self, exc_type, exc, tb):
        self.stream.__exit__(exc_type, exc, tb)
        if self.after is not None and exc_type is None:
            self.caller.wait_event(self.stream.record(self.after))
        return False


def _events(stream):
    """Two reusable timing-free events of the thread's ``stream`` (ordering only).

    Re-recording an event is safe: a wait already enqueued keeps waiting on the record that was
    current when it was enqueued. Reusing them saves two event creations per operation.
    """
    import cupy
    res = _resources()
    pair = res.events.get(stream.ptr)
    if pair is None:
        dev = getattr(stream, "device_id", -1)
        with cupy.cuda.Device(dev if dev >= 0 else None):
            pair = res.events[stream.ptr] = (cupy.cuda.Event(disable_timing=True),
                                             cupy.cuda.Event(disable_timing=True))
    return pair


def _release(ident, handles):
    for (dev, library), handle in list(handles.items()):
        with _registry_lock:
            if _registry.pop((ident, dev, library), None) is None:
                continue
        _destroy(library, dev, handle)
    handles.clear()


def _destroy(library, dev, handle):
    try:
        mod = importlib.import_module(LIBRARIES[library])
        import cupy
        with cupy.cuda.Device(dev):
            mod.destroy(handle)
    except Exception:  # interpreter shutdown or a dead context: nothing left to free
        pass


@atexit.register
def release_all():
    """Destroy every handle still alive (called at interpreter exit)."""
    with _registry_lock:
        items = list(_registry.items())
        _registry.clear()
    for (_ident, dev, library), handle in items:
        _destroy(library, dev, handle)
