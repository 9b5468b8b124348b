"""Reliability of the dense factorizations on a real GPU: allocation failures at every step,
16 threads, torch CUDA tensors, and memory returning to its level after a failure."""

import threading
import warnings

import numpy as np
import pytest

import gpulinalg
from gpulinalg import FallbackWarning, NotPositiveDefiniteError
from gpulinalg.decomp import cho_factor, cho_solve, cholesky, qr, solve_triangular, svd

from tests.support.decomp_dense_ref import backward_ratio, random, spd
from tests.support.threads import run_in_threads

pytestmark = pytest.mark.gpu

# check_finite=False: the validation pass runs before the dispatcher, and what is exercised
# here is an allocation failure inside the GPU function.
CALLS = {
    "qr": lambda a, s: qr(a, check_finite=False),
    "svd": lambda a, s: svd(a, check_finite=False),
    "cholesky": lambda a, s: cholesky(s, check_finite=False),
    "cho_solve": lambda a, s: cho_solve(cho_factor(s, check_finite=False), a[..., :40, :3],
                                        check_finite=False),
    "solve_triangular": lambda a, s: solve_triangular(s, a[..., :40, :3], lower=True,
                                                      check_finite=False),
}



def _inputs(xp, rng, batch=()):
    a = xp.asarray(random(rng, batch + (120, 40), np.float64))
    s = xp.asarray(spd(rng, 40, np.float64, batch=batch))
    return a, s


class _FailingAllocator:
    """Fail the k-th device allocation with CuPy's OutOfMemoryError."""

    def __init__(self, cupy, k):
        self.cupy, self.k, self.count = cupy, k, 0
        self.pool = cupy.get_default_memory_pool()

    def __call__(self, size):
        self.count += 1
        if self.count == self.k:
            raise self.cupy.cuda.memory.OutOfMemoryError(size, 0, 0)
        return self.pool.malloc(size)


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("batch", [(), (3,)])
def test_oom_at_each_allocation_falls_back(xp_gpu, rng, name, batch):
    a, s = _inputs(xp_gpu, rng, batch)
    with gpulinalg.config(backend="cpu"):
        ref = CALLS[name](a.get(), s.get())
    k = 1
    while True:
        alloc = _FailingAllocator(xp_gpu, k)
        xp_gpu.cuda.Device().synchronize()
        before = xp_gpu.get_default_memory_pool().used_bytes()
        xp_gpu.cuda.set_allocator(alloc)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = CALLS[name](a, s)
        finally:
            xp_gpu.cuda.set_allocator(xp_gpu.get_default_memory_pool().malloc)
        fell = any(issubclass(w.category, FallbackWarning) for w in caught)
        got = [x.get() if hasattr(x, "get") else x for x in (out if isinstance(out, tuple)
                                                               else (out,))]
        want = ref if isinstance(ref, tuple) else (ref,)
        for g, w in zip(got, want):
            if name in ("qr", "svd"):
                g, w = np.abs(g), np.abs(w)
            assert np.allclose(g, w, atol=1e-8), (name, k)
        del out, got
        if not fell:  # the k-th allocation was past the last one: every step covered
            break
        if name != "cho_solve":  # two operations there: the one that fell back may be first
            assert gpulinalg.last_run().fell_back
        xp_gpu.cuda.Device().synchronize()
        assert xp_gpu.get_default_memory_pool().used_bytes() <= before + (1 << 20)
        k += 1
    assert k > 1  # at least one allocation was made to fail


def test_sixteen_threads_match_one(xp_gpu, rng):
    a, s = _inputs(xp_gpu, rng)
    names = sorted(CALLS)
    expected = {n: CALLS[n](a, s) for n in names}
    errors, barrier = [], threading.Barrier(16)

    def worker(i):
        try:
            barrier.wait()
            for j in range(6):
                n = names[(i + j) % len(names)]
                out = CALLS[n](a, s)
                outs = out if isinstance(out, tuple) else (out,)
                exp = expected[n] if isinstance(expected[n], tuple) else (expected[n],)
                for o, e in zip(outs, exp):
                    assert xp_gpu.allclose(o, e, atol=1e-10), n
        except Exception as exc:  # reported below, on the main thread
            errors.append(exc)
    run_in_threads(worker, 16)
    assert not errors, errors[:3]


def test_torch_cuda_in_torch_cuda_out(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    a = torch.from_numpy(random(rng, (64, 16), np.float64)).cuda()
    q, r = qr(a)
    assert q.is_cuda and torch.allclose(q @ r, a)
    u, s, vh = svd(a, full_matrices=False)
    assert u.is_cuda and torch.allclose((u * s) @ vh, a)
    k = torch.from_numpy(spd(rng, 16, np.float64)).cuda()
    c, low = cho_factor(k)
    assert c.is_cuda and float(torch.linalg.norm(k @ cho_solve((c, low), a[:16]) - a[:16])) < 1e-8


def test_large_cholesky_and_svd_accuracy(xp_gpu, rng):
    a = xp_gpu.asarray(spd(rng, 1500, np.float64, cond=1e6))
    c = cholesky(a, lower=True)
    assert backward_ratio(a, c @ c.T, np.float64) <= 30
    m = xp_gpu.asarray(random(rng, (3000, 600), np.float64))
    u, s, vh = svd(m, full_matrices=False)
    assert backward_ratio(m, (u * s) @ vh, np.float64) <= 50
    assert gpulinalg.last_run().details["qr_first"]


def test_not_pd_large_single(xp_gpu, rng):
    a = xp_gpu.asarray(spd(rng, 600, np.float64))
    a[300, 300] = -1.0
    with pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(a)
    assert info.value.minor == 301 and info.value.batch_index is None


def test_workspace_queries_answer_on_the_device(xp_gpu):
    from gpulinalg.decomp._gpu import _cusolver_cuda as _cusolver
    for routine in ("potrf", "geqrf", "gesvd", "gesvdp"):
        for dtype in ("<f4", "<f8", "<c8", "<c16"):
            got = _cusolver._queried(routine, 3000, 500, dtype, 0)  # raises if refused
            assert isinstance(got, int) and got >= 0


@pytest.mark.parametrize("lower", [True, False])
def test_overwrite_a_too_big_for_a_copy_factors_in_place(xp_gpu, rng, lower):
    # The layout the fast kernel does not want (C order for lower=True, F for lower=False):
    # with room for the input but not for a working copy, the dispatcher's oversize route
    # factors the caller's array in place with the other triangle's kernel.
    host_a = spd(rng, 1024, np.float64)
    a = xp_gpu.asarray(host_a, order="C" if lower else "F")
    pool = xp_gpu.get_default_memory_pool()
    old = pool.get_limit()
    pool.set_limit(size=pool.used_bytes() + a.nbytes)
    try:
        with gpulinalg.config(backend="gpu"):
            c = cholesky(a, lower=lower, overwrite_a=True, check_finite=False)
        rec = gpulinalg.last_run()
    finally:
        pool.set_limit(size=old)
    assert rec.backend == "gpu-out-of-core" and not rec.fell_back
    assert c.data.ptr == a.data.ptr
    ref = np.linalg.cholesky(host_a)
    assert np.allclose(c.get(), ref if lower else ref.T, atol=1e-10)
