"""Device helpers shared by decomp's fused small-stack kernels (:mod:`._fused_cuda`,
:mod:`._fused_qr_cuda`), for the four element types ``float``, ``double`` and their
``complex``: real part, conjugate, magnitude in float64, NaN-sticky ``max``/``min`` of
non-negative doubles, and warp shuffles (:data:`SCALAR_PREAMBLE`, which each kernel module
puts in front of its source); :func:`size_class`, the compiled size a stack runs; and
:func:`summary_buffer`, the buffer per thread and stream a kernel folds its figures into,
with its read-back (:class:`ReadBack`, or :class:`MappedReadBack` for a kernel that writes
host memory itself), all kept by :func:`per_thread`. Part of decomp's internal layer.
"""

import ctypes
import platform
import threading
import weakref

import numpy as np

from ..._runtime.kernels import kernel_source

__all__ = ["SCALAR_PREAMBLE", "SUMMARY_PREAMBLE", "KERNEL_TYPES", "size_class", "ReadBack",
           "MappedReadBack", "mapped_read_back", "summary_buffer", "per_thread"]

#: dtype -> (the kernel's element type ``T``, its real type ``R``).
KERNEL_TYPES = {np.dtype(np.float32): ("float", "float"),
                np.dtype(np.float64): ("double", "double"),
                np.dtype(np.complex64): ("complex<float>", "float"),
                np.dtype(np.complex128): ("complex<double>", "double")}

#: ``gl_re``, ``gl_cj``, ``gl_mag``, ``gl_max``, ``gl_min``, ``gl_part``, ``gl_shfl``, ``gl_xor``.
SCALAR_PREAMBLE = kernel_source(__package__, "scalar_preamble.cu")


def size_class(n, sizes, kernel):
    """The smallest compiled size in ``sizes`` (ascending) that holds ``n`` (rows or order) of
    the fused ``kernel`` (a name for the error)."""
    for size in sizes:
        if n <= size:
            return size
    raise ValueError(f"no fused {kernel} kernel for order {n}")


class _PerThread(threading.local):
    def __init__(self):
        self.by_key = {}


_per_thread = _PerThread()

#: Most objects a thread keeps (:func:`per_thread`); past it they are all let go and made again.
_MAX_KEPT = 256


def per_thread(cupy, key, make, args=(), size=0):
    """The calling thread's device object ``key`` (it names the device and the stream it
    serves): ``make(*args)`` once per thread and CuPy module, and again when the one kept is
    shorter than ``size`` (its ``.size``). A thread's launches on one stream run one after
    another, so a buffer per thread and stream (a summary, a workspace the launch leaves at
    rest) serves all of them. A thread that has made :data:`_MAX_KEPT` lets them all go first
    (a device buffer goes back to CuPy's pool for its stream, so no later work can touch it
    before the launches queued on it are done). A repeat makes no closure and calls nothing
    but the lookup: it sits on the road of every fused solve."""
    kept = _per_thread.by_key
    got = kept.get(key)
    if got is None or got[0] is not cupy or (size and got[1].size < size):
        if got is None and len(kept) >= _MAX_KEPT:
            kept.clear()
        got = kept[key] = (cupy, make(*args))
    return got[1]


#: ``gl_summary``: the device side of :func:`summary_buffer` (``GL_NONE``: "none", the identity
#: of a minimum over the packed words).
SUMMARY_PREAMBLE = kernel_source(__package__, "summary_preamble.cu")


class ReadBack:
    """The read-back of a few device words ``view`` into pinned host memory of their own, on
    the stream ``stream`` (a pointer): ``get()`` returns a NumPy copy, as
    ``cupy.ndarray.get`` does, after one asynchronous copy on that stream and its
    synchronization (10.4 µs on an H200 where ``get()`` into pageable memory took 15.5 µs).
    One per thread and stream, as its buffer."""

    __slots__ = ("_runtime", "_pinned", "host", "_dst", "_src", "_nbytes", "_stream")

    def __init__(self, cupy, view, stream):
        self._runtime = cupy.cuda.runtime
        self._pinned = cupy.cuda.alloc_pinned_memory(view.nbytes)
        self.host = np.frombuffer(self._pinned, view.dtype, view.size)
        self._dst, self._src, self._nbytes = self.host.ctypes.data, view.data.ptr, view.nbytes
        self._stream = stream

    def get(self):
        runtime = self._runtime
        runtime.memcpyAsync(self._dst, self._src, self._nbytes, runtime.memcpyDeviceToHost,
                            self._stream)
        runtime.streamSynchronize(self._stream)
        return self.host.copy()


#: Whether the host keeps its loads in program order (x86's total store order): the words
#: read after the epoch are then the kernel's. Elsewhere (Arm) a synchronization orders them.
_LOADS_IN_ORDER = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


class MappedReadBack:
    """Three summary words that a kernel writes straight into mapped pinned host memory, then
    an epoch (word 3): the host spins on the epoch instead of a copy and a synchronization.

    :meth:`arm` gives the next epoch, passed to the launch with :attr:`device` (the buffer's
    device address); :meth:`get` returns a NumPy copy of the words once that epoch is there.
    It spins at most :data:`SPINS` reads (some 0.2 ms: a short kernel's time), then lets
    CUDA synchronize the stream (the GIL released), which also raises the error of a kernel
    that failed; a kernel that finished without its epoch is an error. One per thread and
    stream, as the buffers of :func:`summary_buffer`.
    """

    __slots__ = ("_runtime", "_host", "words", "device", "epoch", "_stream", "__weakref__")

    #: Reads of the epoch before the stream is synchronized instead.
    SPINS = 2048

    def __init__(self, cupy, stream):
        runtime = self._runtime = cupy.cuda.runtime
        self._host = runtime.hostAlloc(32, runtime.hostAllocMapped)
        self.words = np.ctypeslib.as_array((ctypes.c_uint64 * 4).from_address(self._host))
        self.words[:] = 0
        self.device = runtime.pointerGetAttributes(self._host).devicePointer
        self.epoch, self._stream = 0, stream
        weakref.finalize(self, runtime.freeHost, self._host).atexit = False

    def arm(self):
        """The epoch of the next launch (1 to 2^31 - 1, then round again)."""
        self.epoch = self.epoch % 0x7FFFFFFF + 1
        return self.epoch

    def get(self):
        words, epoch = self.words, self.epoch
        for _ in range(self.SPINS):
            if words[3] == epoch:
                if not _LOADS_IN_ORDER:  # the words' loads may pass the epoch's: a barrier
                    self._runtime.streamSynchronize(self._stream)
                return words[:3].copy()
        self._runtime.streamSynchronize(self._stream)
        if words[3] != epoch:
            raise RuntimeError("a decomp kernel finished without writing its summary")
        return words[:3].copy()


def mapped_read_back(cupy, key, device, stream):
    """The calling thread's :class:`MappedReadBack` ``key`` on ``device`` for ``stream``."""
    return per_thread(cupy, ("mapped", key, device, stream), MappedReadBack, (cupy, stream))


def summary_buffer(cupy, key, device, id1, id2, stream=None, rows=1):
    """``(buffer, totals)``: the calling thread's summary buffer ``key`` on ``device`` for the
    stream ``stream`` (a pointer; default: the current one): 8 uint64 words
    (:func:`summary_row`), made once with the identities ``id1`` and ``id2`` of words 1 and 2
    in place (the last block of a launch puts them back), and the :class:`ReadBack` of its 3
    read-back words on that stream. A launch on one stream runs after the one before it
    there, so one buffer per thread and stream serves all their launches. ``rows`` > 1: that
    many such rows, one per launch of a chain, and the read-back of them all."""
    if stream is None:
        stream = cupy.cuda.get_current_stream().ptr
    return per_thread(cupy, ("summary", key, device, stream), _new_summary,
                      (cupy, id1, id2, stream, rows))


def summary_row(id1, id2):
    """The 8 words of a summary at rest: the accumulators (flags, word 1, word 2, the
    blocks' count), then the read-back words (the last launch's totals) and a spare."""
    return np.array([0, id1, id2, 0, 0, id1, id2, 0], dtype=np.uint64)


def _new_summary(cupy, id1, id2, stream, rows):
    buf = cupy.asarray(np.tile(summary_row(id1, id2), rows))
    return buf, ReadBack(cupy, buf[4:7] if rows == 1 else buf, stream)
