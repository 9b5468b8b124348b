"""Host-to-device copies staged through pinned buffers (:mod:`gpulinalg._runtime.staging`):
what arrives on the GPU equals the host array, for every layout and size, from many threads."""

import threading

import numpy as np
import pytest

from gpulinalg._runtime import arrays, staging

from tests.support.threads import run_in_threads


def test_fill_in_threads_copies_every_byte(monkeypatch):
    monkeypatch.setattr(staging, "_MIN_THREAD_BYTES", 1000)
    src = np.random.default_rng(0).integers(0, 256, 12_345, dtype=np.uint8)
    dst = np.zeros_like(src)
    staging.parallel_copy(dst, src)
    np.testing.assert_array_equal(dst, src)


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 64 KiB staged from 100 KiB: many chunks, both buffers reused, in a fast test."""
    monkeypatch.setattr(staging, "STAGED_MIN_BYTES", 100 << 10)
    monkeypatch.setattr(staging, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(staging, "_MIN_THREAD_BYTES", 8 << 10)
    staging._buffers.clear()  # buffers of the patched size
    yield
    staging._buffers.clear()


@pytest.mark.gpu
@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128, np.int8])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(401, 333), (64 << 10, 1), (3, 200, 61)])
def test_staged_upload_equals_host(dtype, order, shape):
    rng = np.random.default_rng(1)
    host = np.asarray(rng.standard_normal(shape) * 100, dtype=dtype, order=order)
    expected = host.copy(order="K")
    staged = arrays.to_device(host)
    host[...] = 0  # the copy is done with host once to_device returns
    assert staged.flags.c_contiguous == expected.flags.c_contiguous
    np.testing.assert_array_equal(staged.get(), expected)


@pytest.mark.gpu
@pytest.mark.usefixtures("small_chunks")
def test_staged_upload_is_ordered_on_the_callers_stream():
    import cupy
    host = np.arange(300_000, dtype=np.float64)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        dev = arrays.to_device(host)
        total = float(dev.sum())  # same stream: runs after the staged copies
    assert total == float(host.sum())


@pytest.mark.gpu
@pytest.mark.usefixtures("small_chunks")
def test_declined_inputs_still_arrive(monkeypatch):
    calls = []
    real = staging.upload
    monkeypatch.setattr(staging, "upload", lambda *a: calls.append(real(*a)) or calls[-1])
    big = np.random.default_rng(2).standard_normal((600, 400))
    for host in (big[:, ::2], big[:10], big):  # strided, small, staged
        np.testing.assert_array_equal(arrays.to_device(host).get(), host)
    assert calls == [False, False, True]


@pytest.mark.gpu
@pytest.mark.usefixtures("small_chunks")
def test_staged_uploads_from_sixteen_threads():
    hosts = [np.full((300, 100), i, dtype=np.float64) for i in range(16)]
    got = [None] * 16
    barrier = threading.Barrier(16)

    def worker(i):
        barrier.wait()  # all at once: most find the buffers busy and copy plainly
        got[i] = float(arrays.to_device(hosts[i]).sum())
    run_in_threads(worker, 16)
    assert got == [float(h.sum()) for h in hosts]
