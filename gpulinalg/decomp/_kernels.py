"""The decomposition module's own CUDA kernels, compiled once per specialization and device."""

__all__ = ["raw_kernel"]

_cache = {}


def raw_kernel(name, source, types, options=(), shared_bytes=None):
    """``cupy.RawKernel`` ``name`` of ``source`` for the current device.

    ``types`` maps the type names the source uses to C++ types (``{"T": "float"}``); they are
    declared in front of it, after CuPy's complex header. ``shared_bytes``: dynamic shared
    memory the kernel may opt into above 48 KiB (an attribute of each device's copy).
    """
    import cupy
    key = (name, tuple(types.items()), cupy.cuda.Device().id)
    kern = _cache.get(key)
    if kern is None:
        prelude = "#include <cupy/complex.cuh>\n" + "".join(
            f"typedef {ctype} {alias};\n" for alias, ctype in types.items())
        kern = cupy.RawKernel(prelude + source, name, options=tuple(options))
        if shared_bytes is not None:
            kern.max_dynamic_shared_size_bytes = shared_bytes
        _cache[key] = kern
    return kern
