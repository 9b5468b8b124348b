"""Memory budget and the host-to-GPU cost model the dispatcher uses.

Thresholds (documented, deliberately simple):

* a job *fits* when its byte estimate is at most the device's free memory plus the bytes
  CuPy's pool holds unused, minus ``vram_headroom`` × total memory, and at most what is left
  under the pool's limit when one is set (``cupy.get_default_memory_pool().set_limit``);
* for host (NumPy) inputs, :func:`model_seconds` estimates both sides: the GPU
  ``GPU_CALL_S + 2 * bytes / PCIE_BYTES_PER_S + flops / GPU_FLOPS`` (``bytes``: the host
  arguments, there and about as much back), the CPU
  ``CPU_CALL_S + bytes / CPU_BYTES_PER_S + flops / CPU_FLOPS`` (the checks and copies that
  read the arguments); :mod:`.measured` times both sides where the two are close.

Reading the free memory (``cudaMemGetInfo``) costs tens of microseconds, more than a small
product: a reading is reused for ``FREE_CACHE_S`` seconds by jobs that need at most
``FREE_CACHE_FRACTION`` of the free memory it showed. The pool limit is checked on every call.
"""

import math
import sys
import time

import numpy as np

from . import device as _device
from .config import get_config

__all__ = ["nbytes_of", "available_bytes", "fits", "model_seconds"]

#: A GPU call on small host inputs: uploads, a few launches, a synchronization, the download.
GPU_CALL_S = 300e-6
PCIE_BYTES_PER_S = 20e9
GPU_FLOPS = 30e12
#: A CPU call's own cost (checks, dispatch), and the rate of its passes over the arguments.
CPU_CALL_S = 20e-6
CPU_BYTES_PER_S = 4e9
CPU_FLOPS = 100e9
FREE_CACHE_S = 0.25
FREE_CACHE_FRACTION = 0.25

_readings: dict = {}  # device index -> (monotonic time, free bytes, total bytes)


def nbytes_of(*specs):
    """Bytes of arrays described as ``(shape, dtype)`` pairs (or arrays).

    Examples
    --------
    >>> nbytes_of(((1000, 1000), "float64"), ((1000,), "float32"))
    8004000
    """
    total = 0
    for s in specs:
        if hasattr(s, "shape") and hasattr(s, "dtype"):
            shape, dtype = s.shape, s.dtype
        else:
            shape, dtype = s
        total += int(math.prod(shape)) * _itemsize(dtype)
    return total


def _itemsize(dtype):
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # torch dtype
        return dtype.itemsize


def _provided_memory():
    """The ``(free, total)`` a device provider installed in the calling thread reports (see
    :func:`gpulinalg._runtime.device.installed`), else ``None``: its figures are neither kept
    as readings of the real device nor checked against CuPy's pool."""
    prov = _device.installed()
    return None if prov is None else prov.memory


def available_bytes(device=None):
    """Bytes a new job may use on ``device`` under the configured headroom."""
    free, total = _device.memory_info(device)
    if _provided_memory() is None:
        dev = _device.current_device() if device is None else int(device)
        _readings[dev] = (time.monotonic(), free, total)
    return _under_headroom_and_limit(free, total)


def _under_headroom_and_limit(free, total):
    avail = free - int(get_config().vram_headroom * total)
    limit_left = _pool_limit_left()
    if limit_left is not None:
        avail = min(avail, limit_left)
    return max(avail, 0)


def _pool_limit_left():
    cupy = sys.modules.get("cupy")
    if cupy is None or _provided_memory() is not None:
        return None
    pool = cupy.get_default_memory_pool()
    limit = pool.get_limit()
    return None if limit == 0 else limit - pool.used_bytes()


def fits(nbytes, device=None):
    """``(ok, available)``: whether ``nbytes`` fits on ``device`` now, and the bytes available."""
    nbytes = int(nbytes)
    avail = _available_from_recent_reading(nbytes, device)
    if avail is None:
        avail = available_bytes(device)
    return nbytes <= avail, avail


def _available_from_recent_reading(nbytes, device):
    """What :func:`available_bytes` would say from a recent reading, for a small job (else None)."""
    if not _readings or _provided_memory() is not None:
        return None
    reading = _readings.get(_device.current_device() if device is None else device)
    if reading is None:
        return None
    when, free, total = reading
    if nbytes > FREE_CACHE_FRACTION * free or time.monotonic() - when > FREE_CACHE_S:
        return None
    return _under_headroom_and_limit(free, total)


def model_seconds(flops, host_bytes):
    """``(cpu_s, gpu_s)``: the modelled seconds of a call on host inputs of ``host_bytes``
    doing ``flops`` on each side (see the module notes)."""
    cpu = CPU_CALL_S + host_bytes / CPU_BYTES_PER_S + flops / CPU_FLOPS
    gpu = GPU_CALL_S + 2 * host_bytes / PCIE_BYTES_PER_S + flops / GPU_FLOPS
    return cpu, gpu
