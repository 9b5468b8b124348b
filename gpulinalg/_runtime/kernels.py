"""The one cache of compiled CUDA kernels (CuPy ``RawKernel`` and ``ElementwiseKernel``), and
the one reader of their CUDA sources (``*.cu`` package data beside their launchers).

Kernels are compiled on first use, once per specialization (and device, for raw kernels, whose
attributes are per device), and kept for the life of the process. Only GPU functions call these.
"""

import functools
import threading
from typing import Any

__all__ = ["raw_kernel", "kernel_code", "kernel_source", "elementwise_kernel", "Launcher",
           "POINTER", "INT32", "INT64"]

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
        kern = cupy.RawKernel(kernel_code(source, types), name, options=tuple(options))
        if shared_bytes is not None:
            kern.max_dynamic_shared_size_bytes = shared_bytes
        with _lock:
            kern = _cache.setdefault(key, kern)
    return kern


@functools.cache
def kernel_source(package, name):
    """The text of the CUDA source ``name`` (a ``.cu`` file shipped in ``package``), read once.

    >>> "gl_transpose_copy" in kernel_source("gpulinalg.decomp._gpu", "transpose_copy.cu")
    True
    """
    from importlib import resources
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def kernel_code(source, types):
    """The whole code :func:`raw_kernel` compiles: CuPy's complex header, ``types`` declared,
    then ``source``.

    >>> print(kernel_code("// body", {"T": "float"}))
    #include <cupy/complex.cuh>
    typedef float T;
    // body
    """
    return "#include <cupy/complex.cuh>\n" + "".join(
        f"typedef {ctype} {alias};\n" for alias, ctype in types.items()) + source


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


#: A per-call argument of a :class:`Launcher`: a device array (its pointer is passed).
POINTER = object()
#: A per-call argument of a :class:`Launcher`: an ``int32`` value.
INT32 = object()
#: A per-call argument of a :class:`Launcher`: a 64-bit value (an address given as an int).
INT64 = object()


def _per_call(arg):
    return arg is POINTER or arg is INT32 or arg is INT64


class Launcher:
    """One launch configuration of a raw kernel with its constant arguments packed once, so a
    repeat passes only what changes per call, straight to ``cuLaunchKernel``.

    ``args`` is the kernel's argument list: NumPy scalars (constants, packed now) and the
    markers :data:`POINTER`, :data:`INT32` and :data:`INT64` (given per call, in order, to
    :meth:`launch`).
    Each argument sits in an 8-byte slot of a per-thread parameter block (little-endian, so
    an ``int32`` reads its slot's first 4 bytes). CuPy's own launch converts every argument
    on every call: with the 23 arguments of a triangular solve that is 14.7 µs of host time
    on an H200 host, against about 6 µs for a launch of this kind. A kernel without a driver
    handle (a stand-in) is called as a CuPy kernel with the arguments put together.

    Examples
    --------
    >>> import numpy as np
    >>> params = Launcher.pack((POINTER, np.int32(-2), np.int64(-3), INT32), (4096, 7))
    >>> np.frombuffer(params, np.int64).tolist()
    [4096, 4294967294, -3, 7]
    """

    __slots__ = ("kern", "fn", "grid", "block", "dims", "shared", "template", "_local", "_go",
                 "_function")

    def __init__(self, kern, grid, block, args, shared=0):
        self.kern, self.shared, self.template = kern, int(shared), tuple(args)
        self.grid, self.block = tuple(grid), tuple(block)
        self.dims = (*self.grid, *(1,) * (3 - len(self.grid)),
                     *self.block, *(1,) * (3 - len(self.block)))
        fn = self._function = getattr(kern, "kernel", None)  # compiled for the current device,
        self.fn = getattr(fn, "ptr", None)  # held here with its module while the handle is used
        self._local = threading.local()
        self._go: Any = None
        if self.fn is not None:
            from cupy_backends.cuda.api import driver
            self._go = driver.launchKernel

    @staticmethod
    def pack(template, values):
        """The parameter block of ``template`` with the per-call ``values`` (pointers as
        ints): 8 bytes an argument."""
        import ctypes
        block = (ctypes.c_uint64 * len(template))()
        it = iter(values)
        for i, arg in enumerate(template):
            v = int(next(it)) if _per_call(arg) else int.from_bytes(arg.tobytes(), "little")
            block[i] = v & (0xFFFFFFFF if arg is INT32 else 0xFFFFFFFFFFFFFFFF)
        return block

    def _params(self):
        """The calling thread's ``(block, pointers, per-call slot indices)``."""
        got = getattr(self._local, "p", None)
        if got is None:
            import ctypes
            t = self.template
            block = self.pack(t, [0] * sum(map(_per_call, t)))
            base = ctypes.addressof(block)
            ptrs = (ctypes.c_void_p * len(t))(*(base + 8 * i for i in range(len(t))))
            slots = tuple(i for i, a in enumerate(t) if _per_call(a))
            got = self._local.p = (block, ptrs, ctypes.addressof(ptrs), slots)
        return got

    def launch(self, stream_ptr, *values):
        """Launch on the stream ``stream_ptr`` with ``values`` (arrays for :data:`POINTER`,
        ints or NumPy integers for :data:`INT32` and :data:`INT64`) in the slots' order."""
        if self.fn is None:
            it = iter(values)
            args = tuple(next(it) if _per_call(a) else a for a in self.template)
            self.kern(self.grid, self.block, args, shared_mem=self.shared)
            return
        block, _, address, slots = self._params()
        template = self.template
        for i, v in zip(slots, values):
            kind = template[i]
            block[i] = v.data.ptr if kind is POINTER else \
                int(v) & (0xFFFFFFFF if kind is INT32 else 0xFFFFFFFFFFFFFFFF)
        self._go(self.fn, *self.dims, self.shared, stream_ptr, address, 0)
