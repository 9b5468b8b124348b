"""Lazy, cached GPU discovery. Nothing here raises because a GPU or CUDA library is missing."""

import dataclasses
import logging
import threading

__all__ = ["GPUInfo", "gpu_available", "gpus", "memory_info", "disable_gpu", "disabled_reason"]

log = logging.getLogger("gpulinalg")

_lock = threading.Lock()
_state = {"probed": False, "gpus": (), "why_not": None, "disabled": None}


class _FakeHook(threading.local):
    """Per-thread fake-GPU state (test hook: see gpulinalg._runtime.testing.fake_gpu).

    Class-level defaults make the dispatcher's per-call ``getattr(_fake, ..., None)`` a plain
    lookup instead of a caught ``AttributeError`` (microseconds per call otherwise).
    """

    info = None
    memory = None


_fake = _FakeHook()


@dataclasses.dataclass(frozen=True)
class GPUInfo:
    """One CUDA device as seen at discovery."""

    index: int
    name: str
    compute_capability: tuple
    total_memory: int


def _probe():
    try:
        import cupy
        from cupy.cuda import runtime
    except Exception as exc:  # ImportError, or a broken CUDA install raising anything at all
        return (), f"cupy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = runtime.getDeviceCount()
        found = []
        for i in range(count):
            props = runtime.getDeviceProperties(i)
            name = props["name"]
            found.append(GPUInfo(i, name.decode() if isinstance(name, bytes) else str(name),
                                 (props["major"], props["minor"]), int(props["totalGlobalMem"])))
    except Exception as exc:  # CUDARuntimeError without a driver / device
        return (), f"no CUDA device ({type(exc).__name__}: {exc})"
    if not found:
        return (), "no CUDA device"
    del cupy
    return tuple(found), None


def _ensure():
    if not _state["probed"]:
        with _lock:
            if not _state["probed"]:
                _state["gpus"], _state["why_not"] = _probe()
                _state["probed"] = True
                log.debug("GPU discovery: %s", _state["gpus"] or _state["why_not"])


def gpus():
    """Return the tuple of :class:`GPUInfo` found (empty without a usable GPU)."""
    fake = getattr(_fake, "info", None)
    if fake is not None:
        return (fake,)
    _ensure()
    return _state["gpus"]


def gpu_available():
    """True when a GPU is present, CuPy works and the GPU has not been disabled."""
    if _fake.info is not None:
        return True
    if not _state["probed"]:
        _ensure()
    return bool(_state["gpus"]) and _state["disabled"] is None


def unavailable_reason():
    """Why :func:`gpu_available` is False (``None`` when it is True)."""
    if gpu_available():
        return None
    return _state["disabled"] or _state["why_not"] or "no GPU"


def disabled_reason():
    """The reason the GPU was disabled for this process, or ``None``."""
    return _state["disabled"]


def disable_gpu(reason):
    """Disable the GPU for the rest of the process (after a sticky CUDA error)."""
    with _lock:
        first = _state["disabled"] is None
        if first:
            _state["disabled"] = str(reason)
    return first


def memory_info(device=None):
    """Return ``(free, total)`` bytes of ``device`` (default: the current one).

    ``free`` counts both the driver's free memory and the bytes CuPy's default pool holds but
    does not use, since those are available to the next allocation.
    """
    fake = getattr(_fake, "memory", None)
    if fake is not None:
        return fake
    if not gpus():
        raise RuntimeError("memory_info: no GPU")
    import cupy
    if device is None:  # the current device: no device switch needed (the per-call hot path)
        return _free_total(cupy)
    with cupy.cuda.Device(device):
        return _free_total(cupy)


def _free_total(cupy):
    free, total = cupy.cuda.runtime.memGetInfo()
    return int(free + cupy.get_default_memory_pool().free_bytes()), int(total)


def current_device():
    """Index of the calling thread's current CUDA device (0 without a GPU)."""
    if _fake.info is not None:
        return 0
    if not _state["probed"]:
        _ensure()
    if not _state["gpus"]:
        return 0
    return _get_device()


def _get_device():
    """``cupy.cuda.runtime.getDevice`` looked up once (called several times per operation)."""
    global _get_device
    import cupy
    _get_device = cupy.cuda.runtime.getDevice
    return _get_device()
