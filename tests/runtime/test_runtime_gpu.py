"""The runtime on a real GPU: discovery, memory, per-thread handles, real fallback and cleanup."""

import threading

import numpy as np
import pytest

import gpulinalg
from gpulinalg._runtime import arrays, streams
from gpulinalg._runtime.dispatch import Op, dispatch

from tests.support.threads import run_in_threads

pytestmark = pytest.mark.gpu



def test_discovery_and_memory_info():
    found = gpulinalg.gpus()
    assert found and found[0].compute_capability >= (7, 0) and found[0].total_memory > 1 << 30
    free, total = gpulinalg.memory_info(0)
    assert 0 < free <= total == found[0].total_memory


@pytest.mark.parametrize("library", ["cublas", "cublasLt", "cusolverDn", "cusolverSp"])
def test_handles_per_thread_distinct_and_reused(library):
    main = streams.get_handle(library)
    assert streams.get_handle(library) == main
    seen, barrier = [], threading.Barrier(8)

    def worker():
        h = streams.get_handle(library)
        barrier.wait()  # all alive at once: no handle can be recycled between threads
        seen.append((h, streams.get_handle(library), streams.get_stream().ptr))
    run_in_threads(lambda _: worker(), 8)
    assert all(a == b for a, b, _ in seen)
    if library != "cublasLt":  # cublasLtCreate hands every caller the context's one handle
        assert len({h for h, _, _ in seen} | {main}) == 9
    assert len({s for _, _, s in seen}) == 8


def test_cupy_in_cupy_out_and_host_in_host_out(xp_gpu):
    cp = xp_gpu
    twice = lambda x: x * 2  # noqa: E731
    out = dispatch(Op("test.twice", twice, twice, (cp.arange(4.0),)))
    assert isinstance(out, cp.ndarray) and gpulinalg.last_run().backend == "gpu"
    out = dispatch(Op("test.twice", twice, twice, (np.arange(4.0),)))
    assert isinstance(out, np.ndarray) and np.array_equal(out, np.arange(4.0) * 2)


def test_torch_cuda_round_trip(xp_gpu):
    torch = pytest.importorskip("torch")
    t = torch.arange(4.0, device="cuda")
    out = dispatch(Op("test.twice", lambda x: x * 2, None, (t,)))
    assert isinstance(out, torch.Tensor) and out.device.type == "cuda"
    assert torch.equal(out, t * 2)
    assert arrays.kind_of(arrays.to_device(t)) is arrays.Kind.CUPY


def test_pool_limit_below_estimate_routes_to_cpu_up_front(xp_gpu):
    cp = xp_gpu
    pool = cp.get_default_memory_pool()
    calls = []
    try:
        pool.set_limit(size=64 << 20)
        with pytest.warns(gpulinalg.FallbackWarning, match="available on the GPU"):
            dispatch(Op("test.big", lambda x: calls.append("gpu"), lambda x: calls.append("cpu"),
                        (np.ones(4),), nbytes=1 << 30))
    finally:
        pool.set_limit(size=0)
    assert calls == ["cpu"] and gpulinalg.last_run().fell_back


def test_real_oom_falls_back_and_memory_returns(xp_gpu):
    cp = xp_gpu
    pool = cp.get_default_memory_pool()
    x = cp.arange(1000.0)
    cp.cuda.Device().synchronize()
    pool.free_all_blocks()  # cached blocks from earlier tests would serve greedy under the limit
    before = pool.used_bytes()

    def greedy(a):
        keep = [cp.empty(32 << 20, dtype=cp.uint8) for _ in range(8)]  # 256 MiB > limit
        return a.sum() + len(keep)
    try:
        pool.set_limit(size=before + (128 << 20))
        with pytest.warns(gpulinalg.FallbackWarning, match="out of memory"):
            out = dispatch(Op("test.greedy", greedy, lambda a: a.sum(), (x,), nbytes=1 << 20))
    finally:
        pool.set_limit(size=0)
    assert float(out) == float(np.arange(1000.0).sum())
    assert gpulinalg.last_run().fell_back
    del out
    assert pool.used_bytes() <= before
    assert np.array_equal(x.get(), np.arange(1000.0))


def test_sixteen_threads_mixed_dispatch(xp_gpu):
    cp = xp_gpu
    results, errors = {}, []

    def worker(i):
        try:
            a = cp.full((256, 256), float(i))
            for _ in range(5):
                out = dispatch(Op("test.mm", lambda m: m @ m, lambda m: m @ m, (a,)))
            results[i] = float(out[0, 0])
        except Exception as exc:  # surfaced below
            errors.append(exc)
    run_in_threads(worker, 16)
    assert not errors
    assert results == {i: 256.0 * i * i for i in range(16)}


@pytest.mark.parametrize("own_stream", [True, False])
@pytest.mark.parametrize("same_package", [True, False])
def test_dispatch_stream_and_conversion_choices(own_stream, same_package):
    """own_stream: the thread's stream (ordered by events) or the caller's current stream;
    same_package: CuPy arguments reach the GPU function as the very same objects."""
    import cupy
    seen = {}

    def gpu_fn(x):
        seen["stream"], seen["x"] = cupy.cuda.get_current_stream(), x
        return x * 2

    caller = cupy.cuda.Stream(non_blocking=True)
    with caller:
        # made on the caller's stream: a non-blocking stream is not ordered after the null one
        x = cupy.arange(1 << 20, dtype=np.float64)
        out = dispatch(Op("test.streams", gpu_fn, lambda x: x * 2, (x,), nbytes=x.nbytes,
                          same_package=same_package, own_stream=own_stream))
        expect = x * 2  # queued on the caller's stream after the result: must see it done
        assert bool((out == expect).all())
    caller.synchronize()
    assert isinstance(out, cupy.ndarray) and seen["x"] is x
    if own_stream:
        assert seen["stream"] == streams.get_stream()
    else:
        assert seen["stream"] == caller
    rec = gpulinalg.last_run()
    assert rec.backend == "gpu" and not rec.fell_back


def test_dense_matmul_runs_on_the_callers_stream(rng):
    import cupy

    from gpulinalg.dense import matmul
    a = cupy.asarray(rng.standard_normal((256, 128)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal((128, 64)).astype(np.float32))
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        out = matmul(a, b, activation="relu")
        check = cupy.maximum(a @ b, 0)
    s.synchronize()
    assert cupy.allclose(out, check, rtol=1e-4, atol=1e-4)
