"""``_scalars_cuda.ReadBack``: a summary's words copied into pinned host memory on the current
stream, that stream synchronized after the copy, and a NumPy copy returned (a later read-back
reuses the pinned buffer and must not change an earlier result). CUDA is replaced by host
memory and ``memmove`` here; the GPU tests of the fused routes read every verdict through it."""

import ctypes
import types

import numpy as np

from gpulinalg.decomp._scalars_cuda import ReadBack


def _fake_cupy(log):
    stream = types.SimpleNamespace(ptr=7, synchronize=lambda: log.append("sync"))

    def memcpy_async(dst, src, nbytes, kind, stream_ptr):
        log.append(("copy", nbytes, kind, stream_ptr))
        ctypes.memmove(dst, src, nbytes)
    runtime = types.SimpleNamespace(memcpyAsync=memcpy_async, memcpyDeviceToHost=2)
    cuda = types.SimpleNamespace(alloc_pinned_memory=bytearray, runtime=runtime,
                                 get_current_stream=lambda: stream)
    return types.SimpleNamespace(cuda=cuda)


def _device_view(words):
    return types.SimpleNamespace(nbytes=words.nbytes, dtype=words.dtype, size=words.size,
                                 data=types.SimpleNamespace(ptr=words.ctypes.data))


def test_read_back_copies_on_the_current_stream_then_synchronizes():
    log = []
    device_words = np.array([0, 5, 9, 1, 2, 3, 4, 0], dtype=np.uint64)
    back = ReadBack(_fake_cupy(log), _device_view(device_words[4:7]))
    first = back.get()
    assert first.dtype == np.uint64 and first.tolist() == [2, 3, 4]
    assert log == [("copy", 24, 2, 7), "sync"]
    device_words[4:7] = [7, 8, 9]
    second = back.get()
    assert second.tolist() == [7, 8, 9] and first.tolist() == [2, 3, 4]
    assert first is not second and not np.shares_memory(second, back.host)
