"""The host-memory budget: whether a CPU run's estimate fits the memory the machine can give.

The dispatcher asks :func:`host_fits` before every CPU run (``backend="cpu"``, no GPU, a
fallback): a job whose estimate is over ``host_memory_share`` x the available host memory is
not started (:class:`~gpulinalg._runtime.errors.OutOfMemoryError`). The available memory is

* ``psutil.virtual_memory().available`` when psutil is installed, else ``MemAvailable`` of
  ``/proc/meminfo``, else ``os.sysconf`` (free pages; no page cache counted), else unknown
  (every job passes). On Linux psutil's figure *is* ``MemAvailable``: ``/proc/meminfo`` is
  read directly there unless psutil is imported already (importing it costs ~20 ms);
* at most what a cgroup v2 memory limit leaves (``memory.max - memory.current``), where one
  is set: a container's limit is what its out-of-memory killer enforces;
* at most what the address-space limit (``ulimit -v``, ``RLIMIT_AS``) leaves above the
  process's virtual size (``VmSize``), where one is set: past it an allocation fails.

A reading costs 30-70 microseconds, more than a small call: it is reused for ``HOST_CACHE_S``
seconds by jobs of at most ``HOST_CACHE_FRACTION`` of the memory it showed (the check is then a
clock read and a few comparisons). A larger job reads afresh.
"""

import os
import sys
import time

from .config import get_config

__all__ = ["host_available_bytes", "host_fits", "HOST_CACHE_S", "HOST_CACHE_FRACTION"]

HOST_CACHE_S = 1.0
HOST_CACHE_FRACTION = 0.25
_CGROUP = "/sys/fs/cgroup/"

_reading: tuple = (-1e9, None)  # (monotonic time, available bytes) of the last reading
_clock = time.monotonic
_source: list = []  # the reader found to work, once


def _psutil():
    import psutil  # optional: present in most scientific environments
    return int(psutil.virtual_memory().available)


def _meminfo():
    with open("/proc/meminfo", "rb") as f:
        for line in f:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise OSError("no MemAvailable in /proc/meminfo")


def _sysconf():
    return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def _cgroup_left():
    """Bytes a cgroup v2 memory limit leaves the process, ``None`` without a limit."""
    try:
        with open(_CGROUP + "memory.max", "rb") as f:
            limit = f.read().strip()
        if limit == b"max":
            return None
        with open(_CGROUP + "memory.current", "rb") as f:
            return max(int(limit) - int(f.read()), 0)
    except (OSError, ValueError):
        return None


def _address_space_left():
    """Bytes the soft ``RLIMIT_AS`` leaves above the process's ``VmSize``, ``None`` without a
    limit (or where the platform has neither)."""
    try:
        import resource
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY or limit < 0:
            return None
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmSize:"):
                    return max(limit - int(line.split()[1]) * 1024, 0)
    except (ImportError, OSError, ValueError):
        pass
    return None


def _read():
    """Available host bytes now (``None`` when no source works)."""
    if not _source:
        readers = (_psutil, _meminfo, _sysconf) if "psutil" in sys.modules else \
            (_meminfo, _psutil, _sysconf)
        for reader in readers:
            try:
                reader()
            except (ImportError, OSError, ValueError, AttributeError):
                continue
            _source.append(reader)
            break
        else:
            _source.append(None)
    reader = _source[0]
    if reader is None:
        return None
    avail = reader()
    for left in (_cgroup_left(), _address_space_left()):
        if left is not None:
            avail = min(avail, left)
    return avail


def host_available_bytes():
    """Host bytes available to a new job now (a fresh reading, kept for the next checks);
    ``None`` when the machine does not say."""
    global _reading
    avail = _read()
    _reading = (_clock(), avail)
    return avail


def host_fits(nbytes, share=None):
    """``(ok, allowed, available)``: whether a CPU job of ``nbytes`` host bytes may start,
    the bytes it may use (``share`` x ``available``; ``share``: the ``host_memory_share``
    setting in force unless given) and the available bytes (``allowed`` and ``available``
    are ``None`` when the machine does not say).

    Examples
    --------
    >>> host_fits(0)[0], host_fits(1 << 70)[0]
    (True, False)
    """
    if share is None:
        share = get_config().host_memory_share
    when, avail = _reading
    if (avail is None or nbytes > HOST_CACHE_FRACTION * avail
            or _clock() - when > HOST_CACHE_S):
        if nbytes <= 0:
            return True, None, None
        avail = host_available_bytes()
        if avail is None:
            return True, None, None
    allowed = int(share * avail)
    return nbytes <= allowed, allowed, avail
