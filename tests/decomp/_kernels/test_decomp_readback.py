"""``_scalars_cuda.ReadBack``: a summary's words copied into pinned host memory on the stream
the read-back was made for, that stream synchronized after the copy, and a NumPy copy
returned (a later read-back reuses the pinned buffer and must not change an earlier result);
the summaries kept per thread and stream; ``MappedReadBack``: words a kernel writes into
mapped host memory, taken once the call's epoch is there. CUDA is replaced by host memory
and ``memmove`` here; the GPU tests of the fused routes read every verdict through these."""

import ctypes
import types

import numpy as np
import pytest

from gpulinalg.decomp._kernels._scalars_cuda import ReadBack


def _fake_cupy(log):
    def memcpy_async(dst, src, nbytes, kind, stream_ptr):
        log.append(("copy", nbytes, kind, stream_ptr))
        ctypes.memmove(dst, src, nbytes)
    runtime = types.SimpleNamespace(memcpyAsync=memcpy_async, memcpyDeviceToHost=2,
                                    streamSynchronize=lambda ptr: log.append(("sync", ptr)))
    cuda = types.SimpleNamespace(alloc_pinned_memory=bytearray, runtime=runtime)
    return types.SimpleNamespace(cuda=cuda)


def _device_view(words):
    return types.SimpleNamespace(nbytes=words.nbytes, dtype=words.dtype, size=words.size,
                                 data=types.SimpleNamespace(ptr=words.ctypes.data))


def test_read_back_copies_on_its_stream_then_synchronizes_that_stream():
    log = []
    device_words = np.array([0, 5, 9, 1, 2, 3, 4, 0], dtype=np.uint64)
    back = ReadBack(_fake_cupy(log), _device_view(device_words[4:7]), 7)
    first = back.get()
    assert first.dtype == np.uint64 and first.tolist() == [2, 3, 4]
    assert log == [("copy", 24, 2, 7), ("sync", 7)]
    device_words[4:7] = [7, 8, 9]
    second = back.get()
    assert second.tolist() == [7, 8, 9] and first.tolist() == [2, 3, 4]
    assert first is not second and not np.shares_memory(second, back.host)


def test_summary_buffers_are_per_stream_and_bounded(monkeypatch):
    """A thread keeps one summary per stream (launches on two streams of one thread may run
    at once), reuses it on the same stream, and lets all go past the bound."""
    from gpulinalg.decomp._kernels import _scalars_cuda
    log = []
    cupy = _fake_cupy(log)
    cupy.asarray = lambda host: _DeviceWords(host)
    monkeypatch.setattr(_scalars_cuda, "_per_thread", _scalars_cuda._PerThread())
    first = _scalars_cuda.summary_buffer(cupy, "trsm", 0, 0, 1, stream=11)
    assert _scalars_cuda.summary_buffer(cupy, "trsm", 0, 0, 1, stream=11) is first
    other = _scalars_cuda.summary_buffer(cupy, "trsm", 0, 0, 1, stream=12)
    assert other[0] is not first[0] and other[1] is not first[1]
    other[1].get()
    assert log == [("copy", 24, 2, 12), ("sync", 12)]  # read back on its own stream
    monkeypatch.setattr(_scalars_cuda, "_MAX_KEPT", 3)
    _scalars_cuda.summary_buffer(cupy, "trsm", 0, 0, 1, stream=13)
    _scalars_cuda.summary_buffer(cupy, "trsm", 0, 0, 1, stream=14)  # past the bound: made anew
    assert len(_scalars_cuda._per_thread.by_key) == 1
    assert _scalars_cuda.summary_buffer(cupy, "trsm", 0, 0, 1, stream=11) is not first


class _DeviceWords(np.ndarray):
    """Host words posing as a device array (``data.ptr``)."""

    def __new__(cls, host):
        return np.array(host).view(cls)

    def __array_finalize__(self, obj):
        pass

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _mapped_cupy(log):
    held = {}

    def host_alloc(nbytes, flags):
        buf = ctypes.create_string_buffer(nbytes)
        held[ctypes.addressof(buf)] = buf
        log.append(("alloc", nbytes, flags))
        return ctypes.addressof(buf)
    runtime = types.SimpleNamespace(
        hostAlloc=host_alloc, hostAllocMapped=2, freeHost=lambda p: log.append("free"),
        streamSynchronize=lambda p: log.append(("sync", p)),
        pointerGetAttributes=lambda p: types.SimpleNamespace(devicePointer=p + 4096))
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))


def test_mapped_read_back_waits_for_its_epoch(monkeypatch):
    """The kernel's words are taken once the call's epoch is there, without a
    synchronization; when it is not there within the spins, the stream is synchronized
    (which raises a failed kernel's error) and a missing epoch after that is an error."""
    from gpulinalg.decomp._kernels import _scalars_cuda
    from gpulinalg.decomp._kernels._scalars_cuda import MappedReadBack
    monkeypatch.setattr(_scalars_cuda, "_LOADS_IN_ORDER", True)  # an x86 host
    log = []
    back = MappedReadBack(_mapped_cupy(log), 5)
    assert log == [("alloc", 32, 2)] and back.device == back.words.ctypes.data + 4096
    epoch = back.arm()
    back.words[:] = [1, 2, 3, epoch]  # what the kernel writes, the epoch last
    got = back.get()
    assert got.tolist() == [1, 2, 3] and not np.shares_memory(got, back.words)
    assert log == [("alloc", 32, 2)]  # no synchronization
    monkeypatch.setattr(MappedReadBack, "SPINS", 3)
    back.arm()  # a launch whose epoch never comes
    with pytest.raises(RuntimeError, match="without writing its summary"):
        back.get()
    assert log[-1] == ("sync", 5)
    back.epoch = 0x7FFFFFFF
    assert back.arm() == 1  # epochs go round, never 0 (a launch without a read-back)
    del back
    assert log[-1] == "free"


def test_mapped_read_back_orders_its_loads_where_the_host_may_not(monkeypatch):
    """On a host that may reorder loads (Arm), the words are read after a synchronization of
    the stream once the epoch is seen."""
    from gpulinalg.decomp._kernels import _scalars_cuda
    monkeypatch.setattr(_scalars_cuda, "_LOADS_IN_ORDER", False)
    log = []
    back = _scalars_cuda.MappedReadBack(_mapped_cupy(log), 9)
    back.words[:] = [4, 5, 6, back.arm()]
    assert back.get().tolist() == [4, 5, 6] and log[-1] == ("sync", 9)
