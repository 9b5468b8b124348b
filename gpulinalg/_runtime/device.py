"""Lazy, cached GPU discovery. Nothing here raises because a GPU or CUDA library is missing."""

import contextlib
import dataclasses
import logging
import threading

__all__ = ["GPUInfo", "gpu_available", "gpu_is_real", "gpus", "memory_info", "disable_gpu",
           "disabled_reason", "installed", "use_provider", "attribute"]

log = logging.getLogger("gpulinalg")

_lock = threading.Lock()
_state: dict = {"probed": False, "gpus": (), "why_not": None, "disabled": None}


class _Installed(threading.local):
    """The device provider installed in the calling thread (``None``: the machine's own CUDA).

    A class-level default makes the dispatcher's per-call read a plain attribute lookup.
    """

    provider = None


_installed = _Installed()


def installed():
    """The device provider installed in the calling thread by :func:`use_provider`, or ``None``.

    A provider stands in for the machine's CUDA devices (the protocol is
    :class:`gpulinalg.testing.DeviceProvider`): ``info`` (the :class:`GPUInfo` of the one device
    it shows, or ``None`` to keep the real devices), ``memory`` (its ``(free, total)`` bytes, or
    ``None`` for the real figures), ``before_run(op)`` (called by the dispatcher just before a
    GPU function runs; it may raise, to inject a fault), ``to_device(x)`` (how an array
    argument reaches a GPU function) and ``stream()`` (the context a GPU function that wants the
    thread's own stream runs in). :func:`gpulinalg.testing.inject_fault` installs one; the
    tests install their pretend GPU the same way.
    """
    return _installed.provider


@contextlib.contextmanager
def use_provider(provider):
    """Install ``provider`` in the calling thread for a ``with`` block (blocks nest)."""
    prev = _installed.provider
    _installed.provider = provider
    try:
        yield provider
    finally:
        _installed.provider = prev


@dataclasses.dataclass(frozen=True)
class GPUInfo:
    """One CUDA device as seen at discovery."""

    index: int
    name: str
    compute_capability: tuple
    total_memory: int


def _why_not(detail):
    """The diagnosis's line and what to do (``gpulinalg info`` says the same), then the
    runtime's own ``detail``."""
    import os
    import platform

    from .diagnosis import classify, cupy_cuda_major, driver_cuda_version
    driver = driver_cuda_version()
    cupy_major, problem = cupy_cuda_major() if driver is not None else (None, None)
    status = classify(driver, cupy_major, problem, (), None, [], detail=detail,
                      visible=os.environ.get("CUDA_VISIBLE_DEVICES"), system=platform.system())
    line = status.line.removeprefix("no GPU: ").replace("; running on the CPU (NumPy/SciPy)", "")
    hint = f"; {status.hint}" if status.hint else ""
    return f"{line}{hint} [{detail}]"


def _probe():
    from .diagnosis import driver_cuda_version
    if driver_cuda_version() is None:  # no driver: CuPy and the CUDA runtime are not loaded
        return (), _why_not("no NVIDIA driver library (libcuda) could be loaded")
    try:
        import cupy
        from cupy.cuda import runtime
    except Exception as exc:  # ImportError, or a broken CUDA install raising anything at all
        return (), _why_not(f"cupy is not importable ({type(exc).__name__}: {exc})")
    try:
        count = runtime.getDeviceCount()
        found = []
        for i in range(count):
            props = runtime.getDeviceProperties(i)
            name = props["name"]
            found.append(GPUInfo(i, name.decode() if isinstance(name, bytes) else str(name),
                                 (props["major"], props["minor"]), int(props["totalGlobalMem"])))
    except Exception as exc:  # CUDARuntimeError without a driver / device
        return (), _why_not(f"{type(exc).__name__}: {exc}")
    if not found:
        return (), _why_not("no CUDA device")
    del cupy
    return tuple(found), None


def _ensure():
    if not _state["probed"]:
        with _lock:
            if not _state["probed"]:
                _state["gpus"], _state["why_not"] = _probe()
                _state["probed"] = True
                if _state["gpus"]:
                    log.debug("GPU discovery: %s", _state["gpus"])
                else:  # once per process: where calls will run, and why
                    log.info("no GPU, gpulinalg runs on the CPU: %s", _state["why_not"])


def gpus() -> tuple[GPUInfo, ...]:
    """Return the tuple of :class:`GPUInfo` found (empty without a usable GPU)."""
    prov = _installed.provider
    if prov is not None and prov.info is not None:
        return (prov.info,)
    _ensure()
    return _state["gpus"]


def gpu_available() -> bool:
    """True when a GPU is present, CuPy works and the GPU has not been disabled."""
    prov = _installed.provider
    if prov is not None and prov.info is not None:
        return True
    if not _state["probed"]:
        _ensure()
    return bool(_state["gpus"]) and _state["disabled"] is None


def gpu_is_real() -> bool:
    """True when :func:`gpu_available` shows the machine's own devices (no provider installed
    in the calling thread shows a device of its own): the one question production code may ask
    about the device beyond what the dispatcher decided."""
    prov = _installed.provider
    if prov is not None and prov.info is not None:
        return False
    return gpu_available()


def unavailable_reason() -> str | None:
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


def memory_info(device: int | None = None) -> tuple[int, int]:
    """Return ``(free, total)`` bytes of ``device`` (default: the current one).

    ``free`` counts both the driver's free memory and the bytes CuPy's default pool holds but
    does not use, since those are available to the next allocation.
    """
    prov = _installed.provider
    if prov is not None and prov.memory is not None:
        return prov.memory
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


_attributes: dict = {}


def attribute(name: str, default: int | None = None) -> int | None:
    """A CUDA attribute of the current device, read once per device: CuPy's name, the
    ``cudaDevAttr`` prefix dropped (``"MultiProcessorCount"``); ``default`` where CuPy does
    not know the name. For GPU functions (CuPy is imported)."""
    import cupy
    dev = cupy.cuda.Device()
    key = (dev.id, name)
    if key not in _attributes:
        _attributes[key] = dev.attributes.get(name, default)
    return _attributes[key]


def current_device() -> int:
    """Index of the calling thread's current CUDA device (0 without a GPU)."""
    prov = _installed.provider
    if prov is not None and prov.info is not None:
        return prov.info.index
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
