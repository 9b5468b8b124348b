"""Large host-to-device copies through two pinned staging buffers: host threads fill one buffer
while the copy engine drains the other, so a NumPy array crosses to the GPU at the pinned rate
instead of the pageable one (a pageable copy goes through the driver's own small staging area,
one host thread).

:func:`upload` is the staged road of :func:`gpulinalg._runtime.arrays.to_device`; it declines
(returns ``False``) for small or non-contiguous arrays and while another thread is using the
buffers, and the caller then makes the plain copy.
"""

import os
import threading

import numpy as np

__all__ = ["upload", "parallel_copy", "STAGED_MIN_BYTES", "CHUNK_BYTES", "FILL_THREADS"]

#: Host arrays at least this large are staged; below it one plain copy costs less than the
#: thread hand-offs.
STAGED_MIN_BYTES = 16 << 20
#: Bytes of each of the two pinned staging buffers (allocated once per process).
CHUNK_BYTES = 16 << 20
#: Host threads of a copy into pinned memory (each copies at least :data:`_MIN_THREAD_BYTES`).
FILL_THREADS = max(1, min(16, os.cpu_count() or 1))
_MIN_THREAD_BYTES = 1 << 20

_lock = threading.Lock()
_pool_lock = threading.Lock()
_buffers: list = []  # [pinned uint8 array, event of its last copy or None] x 2
_pool = None


def upload(host, out, stream=None):
    """Copy NumPy array ``host`` into CuPy array ``out`` (same shape, dtype and memory order)
    on ``stream`` (default: the current one), staged through pinned buffers.

    Returns ``False``, having copied nothing, when the staged road does not apply: ``host``
    under :data:`STAGED_MIN_BYTES`, not contiguous, or the buffers in use by another thread.
    The copy is ordered on ``stream``; ``host`` may be changed as soon as this returns."""
    if host.nbytes < STAGED_MIN_BYTES or not (host.flags.c_contiguous
                                              or host.flags.f_contiguous):
        return False
    if not _lock.acquire(blocking=False):
        return False
    try:
        import cupy
        if stream is None:
            stream = cupy.cuda.get_current_stream()
        src = host.ravel(order="K").view(np.uint8)
        dst = out.data.ptr
        bufs = _staging_buffers(cupy)
        for i, start in enumerate(range(0, src.size, CHUNK_BYTES)):
            n = min(CHUNK_BYTES, src.size - start)
            slot = bufs[i % 2]
            if slot[1] is not None:
                slot[1].synchronize()  # the copy engine is done with this buffer
            parallel_copy(slot[0][:n], src[start:start + n])
            cupy.cuda.runtime.memcpyAsync(dst + start, slot[0].ctypes.data, n,
                                          cupy.cuda.runtime.memcpyHostToDevice, stream.ptr)
            slot[1] = stream.record()
        return True
    finally:
        _lock.release()


def _staging_buffers(cupy):
    if not _buffers:
        import cupyx
        _buffers.extend([cupyx.empty_pinned(CHUNK_BYTES, np.uint8), None] for _ in range(2))
    return _buffers


def parallel_copy(dst, src, casting="same_kind"):
    """``np.copyto(dst, src, casting=casting)`` in pieces of leading rows on up to
    :data:`FILL_THREADS` threads (NumPy's copy releases the GIL), each piece at least
    :data:`_MIN_THREAD_BYTES`: the host side of a copy into pinned memory keeps up with PCIe."""
    global _pool
    rows = dst.shape[0] if dst.ndim else 1
    threads = min(FILL_THREADS, rows, max(1, dst.nbytes // _MIN_THREAD_BYTES))
    if threads <= 1:
        np.copyto(dst, src, casting=casting)
        return
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor
            _pool = ThreadPoolExecutor(FILL_THREADS, thread_name_prefix="gpulinalg-copy")
    step = -(-rows // threads)
    jobs = [_pool.submit(np.copyto, dst[i:i + step], src[i:i + step], casting=casting)
            for i in range(step, rows, step)]
    np.copyto(dst[:step], src[:step], casting=casting)
    for job in jobs:
        job.result()
