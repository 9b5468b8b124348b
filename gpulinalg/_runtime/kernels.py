"""The one cache of compiled CUDA kernels (CuPy ``RawKernel`` and ``ElementwiseKernel``).

Kernels are compiled on first use, once per specialization (and device, for raw kernels, whose
attributes are per device), and kept for the life of the process. Only GPU functions call these.
"""

import threading

__all__ = ["raw_kernel", "elementwise_kernel"]

_lock = threading.Lock()
_cache: dict = {}


def raw_kernel(name, source, types, options=(), shared_bytes=None):
    """``cupy.RawKernel`` ``name`` of ``source`` for the current device.

    ``types`` maps the type names the source uses to C++ types (``{"T": "float"}``); they are
    declared in front of it, after CuPy's complex header. ``shared_bytes``: dynamic shared
    memory the kernel may opt into above 48 KiB (an attribute of each device's copy).
    """
    import cupy
    key = ("raw", name, source, tuple(types.items()), tuple(options), cupy.cuda.Device().id)
    kern = _cache.get(key)
    if kern is None:
        prelude = "#include <cupy/complex.cuh>\n" + "".join(
            f"typedef {ctype} {alias};\n" for alias, ctype in types.items())
        kern = cupy.RawKernel(prelude + source, name, options=tuple(options))
        if shared_bytes is not None:
            kern.max_dynamic_shared_size_bytes = shared_bytes
        with _lock:
            kern = _cache.setdefault(key, kern)
    return kern


def elementwise_kernel(in_params, out_params, operation, name, **options):
    """``cupy.ElementwiseKernel(in_params, out_params, operation, name, **options)``, made once
    (CuPy compiles it per dtype and device on first launch and keeps those itself)."""
    key = ("elementwise", in_params, out_params, operation, name, tuple(sorted(options.items())))
    kern = _cache.get(key)
    if kern is None:
        import cupy
        kern = cupy.ElementwiseKernel(in_params, out_params, operation, name, **options)
        with _lock:
            kern = _cache.setdefault(key, kern)
    return kern


def cached_count():
    """Number of kernels in the cache (for tests and ``gpulinalg info``)."""
    return len(_cache)
