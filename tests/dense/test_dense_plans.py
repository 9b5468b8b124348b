"""The plan cache: LRU bookkeeping (CPU), hits/misses/eviction and 16 threads (GPU), overhead."""

import threading

import numpy as np
import pytest

import gpulinalg
from gpulinalg._runtime import memo as _memo  # noqa: E402
from gpulinalg.dense import _plans_cuda as _plans
from gpulinalg.dense import clear_plan_cache, matmul, plan_cache_info

from tests.support.threads import run_in_threads


class _DummyPlan:
    def __init__(self):
        self.freed = False

    def free(self):
        self.freed = True



def test_lru_eviction_order():
    clear_plan_cache()
    cache = _plans._cache
    plans = [_DummyPlan() for _ in range(4)]
    with gpulinalg.config(plan_cache_size=2):
        _plans._insert(cache, "k0", plans[0])
        _plans._insert(cache, "k1", plans[1])
        cache.plans.move_to_end("k0")  # a hit on k0: k1 is now least recently used
        _plans._insert(cache, "k2", plans[2])
        assert list(cache.plans) == ["k0", "k2"] and plans[1].freed and not plans[0].freed
        info = plan_cache_info()
        assert (info.size, info.maxsize, info.evictions) == (2, 2, 1)
    clear_plan_cache()
    assert plans[0].freed and plans[2].freed and plan_cache_info().size == 0


def test_clear_reaches_other_threads():
    seen = {}

    def worker(step):
        if step == "fill":
            _plans._insert(_plans._cache, "k", seen.setdefault("plan", _DummyPlan()))
        else:
            if _plans._cache.generation != _plans._generation[0]:
                _plans._drop_all(_plans._cache)
            seen["size"] = len(_plans._cache.plans)

    t = threading.Thread(target=lambda: (worker("fill"), barrier.wait(), barrier.wait(),
                                         worker("check")))
    barrier = threading.Barrier(2)
    t.start()
    barrier.wait()
    clear_plan_cache()
    barrier.wait()
    t.join()
    assert seen["plan"].freed and seen["size"] == 0


def test_compute_type_table_names_exist():
    from nvmath.bindings import cublas

    from gpulinalg.dense._spec import COMPUTE_TYPES
    for name in set(COMPUTE_TYPES.values()):
        assert hasattr(cublas.ComputeType, name)


def test_epilog_names_exist():
    from nvmath.linalg.advanced import MatmulEpilog

    from gpulinalg.dense._spec import forward_epilog
    names = {forward_epilog(act, bias, aux) for act in (None, "relu", "gelu")
             for bias in (False, True) for aux in (False, True)} - {None}
    names |= {"DRELU", "DRELU_BGRAD", "DGELU", "DGELU_BGRAD", "BGRADA", "BGRADB"}
    for name in names:
        assert hasattr(MatmulEpilog, name), name


@pytest.mark.gpu
def test_hits_misses_eviction(rng):
    import cupy
    clear_plan_cache()
    before = plan_cache_info()
    a = cupy.asarray(rng.standard_normal((32, 16)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal((16, 8)).astype(np.float32))
    matmul(a, b)
    matmul(a + 1, b)  # same shapes/strides/dtype: a hit, with the new operand bound
    info = plan_cache_info()
    assert info.misses - before.misses == 1 and info.hits - before.hits == 1
    assert cupy.allclose(matmul(a + 1, b), (a + 1) @ b, rtol=1e-5, atol=1e-5)
    matmul(a, b, activation="relu")  # another epilog: a miss
    assert plan_cache_info().misses - before.misses == 2
    with gpulinalg.config(plan_cache_size=2):
        for n in (3, 4, 5):
            matmul(a[:, :n], b[:n])
        info = plan_cache_info()
        assert info.size == 2 and info.evictions - before.evictions >= 3
    clear_plan_cache()
    assert plan_cache_info().size == 0


@pytest.mark.gpu
def test_repeated_calls_reuse_their_plan_through_evictions_and_clears(rng):
    """A repeated call (same key: the memo of validated calls) runs the plan it found before;
    after that plan was evicted or the cache cleared it plans again, and every answer is right."""
    import cupy

    clear_plan_cache()
    a = [cupy.asarray(rng.standard_normal((24, 16 + i)).astype(np.float32)) for i in range(2)]
    b = [cupy.asarray(rng.standard_normal((16 + i, 8)).astype(np.float32)) for i in range(2)]
    bias = cupy.asarray(rng.standard_normal(8).astype(np.float32))

    def check(i, alpha=1.0):
        out = matmul(a[i], b[i], bias=bias, activation="relu", alpha=alpha)
        ref = cupy.maximum(alpha * (a[i] @ b[i]) + bias, 0)
        assert cupy.allclose(out, ref, rtol=1e-5, atol=1e-5)

    check(0)
    before = plan_cache_info()
    for alpha in (1.0, 1.0, 2.0, 1.0):  # alpha is written to the plan only when it changes
        check(0, alpha)
    info = plan_cache_info()
    assert (info.hits - before.hits, info.misses - before.misses) == (4, 0)
    spec = next(k.tail[-1] for k in _memo.entries().values() if k.tail[-1].out_shape == (24, 8))
    assert spec.plan is not None and spec.plan.key is not None
    with gpulinalg.config(plan_cache_size=1):
        for i in (0, 1, 0, 1, 1):
            check(i)
        assert plan_cache_info().evictions - info.evictions >= 3
    clear_plan_cache()
    assert spec.plan.key is None  # freed: the next repeat plans again
    check(0)
    assert plan_cache_info().size == 1


def test_small_products_plan_with_a_small_workspace():
    import types
    small = types.SimpleNamespace(shape=(512, 512), ndim=2)
    batched = types.SimpleNamespace(shape=(64, 512, 512), ndim=3)
    assert _plans._workspace_limit(small, small) == _plans.SMALL_WORKSPACE_LIMIT
    assert _plans._workspace_limit(batched, small) == _plans.WORKSPACE_LIMIT
    big = types.SimpleNamespace(shape=(2048, 2048), ndim=2)
    assert _plans._workspace_limit(big, big) == _plans.WORKSPACE_LIMIT


@pytest.mark.gpu
def test_small_fp32_product_takes_no_large_workspace(rng):
    """512^3 fp32 would take a split-K algorithm (6 MB of workspace) without the small cap."""
    import cupy
    clear_plan_cache()
    a, b = (cupy.asarray(rng.standard_normal((512, 512)).astype(np.float32)) for _ in "ab")
    bias = cupy.asarray(rng.standard_normal(512).astype(np.float32))
    out = matmul(a, b, bias=bias, activation="relu")
    assert cupy.allclose(out, cupy.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)
    plan = next(reversed(_plans._cache.plans.values()))
    assert plan.ws_size <= _plans.SMALL_WORKSPACE_LIMIT + 16


@pytest.mark.gpu
def test_autotune_cached_with_plan(rng):
    import cupy
    clear_plan_cache()
    before = plan_cache_info()
    a = cupy.asarray(rng.standard_normal((256, 128)).astype(np.float16))
    b = cupy.asarray(rng.standard_normal((128, 64)).astype(np.float16))
    bias = cupy.asarray(rng.standard_normal(64).astype(np.float16))
    out1 = matmul(a, b, bias=bias, activation="relu", autotune=True)
    out2 = matmul(a, b, bias=bias, activation="relu", autotune=True)
    info = plan_cache_info()
    assert info.misses - before.misses == 1 and info.hits - before.hits == 1
    ref = cupy.maximum(a.astype(cupy.float32) @ b.astype(cupy.float32) + bias, 0)
    assert cupy.allclose(out1, ref, rtol=1e-2, atol=5e-2) and cupy.array_equal(out1, out2)
    with gpulinalg.config(autotune=True):
        matmul(a, b, bias=bias, activation="relu")
    assert plan_cache_info().hits - before.hits == 2


@pytest.mark.gpu
def test_sixteen_threads_share_nothing_and_agree(rng):
    import cupy
    inputs = [(rng.standard_normal((64, 48)).astype(np.float32),
               rng.standard_normal((48, 40)).astype(np.float32),
               rng.standard_normal(40).astype(np.float32)) for _ in range(4)]
    expected = [np.maximum(a @ b + bias, 0) for a, b, bias in inputs]
    errors, results = [], {}

    def worker(t):
        try:
            with gpulinalg.config(backend="gpu"):
                for rep in range(20):
                    i = (t + rep) % len(inputs)
                    a, b, bias = (cupy.asarray(x) for x in inputs[i])
                    out = matmul(a, b, bias=bias, activation="relu")
                    results[t, rep] = (i, cupy.asnumpy(out))
        except Exception as exc:  # reported below
            errors.append(exc)

    run_in_threads(worker, 16)
    assert not errors, errors
    for i, out in results.values():
        assert np.allclose(out, expected[i], rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_pool_limit_routes_to_cpu(rng):
    import cupy
    pool = cupy.get_default_memory_pool()
    a = rng.standard_normal((512, 512)).astype(np.float32)
    old = pool.get_limit()
    pool.set_limit(size=pool.used_bytes() + 1024)
    try:
        with pytest.warns(gpulinalg.FallbackWarning):
            with gpulinalg.config(backend="gpu"):
                out = matmul(a, a, activation="relu")
    finally:
        pool.set_limit(size=old)
    assert gpulinalg.last_run().backend == "cpu"
    assert np.allclose(out, np.maximum(a @ a, 0), rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_nvmath_execute_path_agrees(rng, activation):
    """Hits through nvmath's reset_operands_unchecked + execute (the benchmark's comparison
    path, patched in by ``benchmarks.suites.dense``) equal the direct launch."""
    import cupy
    a = cupy.asarray(rng.standard_normal((96, 64)).astype(np.float32))
    b = cupy.asarray(rng.standard_normal((64, 80)).astype(np.float32))
    bias1 = cupy.asarray(rng.standard_normal(80).astype(np.float32))
    bias2 = bias1 + 1
    direct = [matmul(a, b, bias=x, activation=activation, return_aux=True) for x in (bias1, bias2)]
    from benchmarks.suites.dense import through_nvmath_execute
    with through_nvmath_execute():
        public = [matmul(a, b, bias=x, activation=activation, return_aux=True)
                  for x in (bias2, bias1)][::-1]
    again = matmul(a, b, bias=bias2, activation=activation, return_aux=True)
    from gpulinalg.dense import _epilogs_xp, _matmul_cuda

    def meaning(aux):  # padding is not written
        if activation == "relu":
            return _epilogs_xp.relu_mask(aux, cupy, _matmul_cuda.unpack_bits)
        return _epilogs_xp.preactivation(aux, cupy)
    for (o1, x1), (o2, x2) in zip(direct, public):
        assert cupy.allclose(o1, o2)
        assert cupy.array_equal(meaning(x1), meaning(x2))
    assert cupy.allclose(again[0], direct[1][0])


@pytest.mark.gpu
def test_one_plan_on_two_streams_keeps_a_workspace_per_stream(rng):
    """Hits run on the caller's current stream; two streams never share a plan's workspace."""
    import cupy
    clear_plan_cache()
    host = [(rng.standard_normal((2048, 1024)).astype(np.float16),
             rng.standard_normal((1024, 2048)).astype(np.float16),
             rng.standard_normal(2048).astype(np.float16)) for _ in range(2)]
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    outs = []
    for _ in range(3):
        for (a, b, bias), s in zip(host, streams):
            with s:
                outs.append(matmul(*(cupy.asarray(x) for x in (a, b)),
                                   bias=cupy.asarray(bias), activation="relu"))
    for s in streams:
        s.synchronize()
    for i, out in enumerate(outs):
        a, b, bias = (x.astype(np.float32) for x in host[i % 2])
        assert np.allclose(cupy.asnumpy(out).astype(np.float32), np.maximum(a @ b + bias, 0),
                           rtol=2e-2, atol=2e-1)
    (plan,) = _plans._cache.plans.values()
    assert len(plan.ws) == (2 if plan.ws_size else 0)
