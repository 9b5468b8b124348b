"""The host-memory budget: a CPU run that cannot fit the machine's RAM is not started."""

import pickle
import time
import tracemalloc
import warnings

import numpy as np
import pytest

import gpulinalg
import gpulinalg.decomp  # imported here: an import under tracemalloc is slow
import gpulinalg.gp
from gpulinalg._runtime import budget_host, host_check
from gpulinalg._runtime import dispatch as _dispatch

MiB = 1 << 20


def _op(calls, x, **kw):
    def cpu(a):
        calls.append("cpu")
        return a * 2
    return _dispatch.Op("test.host", lambda a: calls.append("gpu") or a * 2, cpu, (x,), **kw)


@pytest.fixture
def avail():
    """The host bytes available now (skips where the machine does not say)."""
    value = budget_host.host_available_bytes()
    if value is None:
        pytest.skip("this machine reports no available memory")
    return value


def _refused_quickly(call):
    """Run ``call`` (which must raise gpulinalg.OutOfMemoryError) under tracemalloc: the error,
    the seconds it took, and the peak bytes traced meanwhile."""
    tracemalloc.start()
    try:
        start = time.perf_counter()
        with pytest.raises(gpulinalg.OutOfMemoryError) as info:
            call()
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return info.value, seconds, peak


def test_readings_and_share(avail):
    assert avail > 0
    ok, allowed, seen = budget_host.host_fits(1)
    assert ok and 0 < allowed <= seen
    with gpulinalg.config(host_memory_share=0.5):
        assert budget_host.host_fits(1)[1] == int(0.5 * budget_host.host_fits(1)[2])
    assert not budget_host.host_fits(10 * avail)[0]


@pytest.mark.parametrize("share", [0.0, 1.5, -1])
def test_share_is_validated(share):
    with pytest.raises(ValueError, match="host_memory_share"):
        gpulinalg.config(host_memory_share=share)


def test_low_share_refuses_a_small_cpu_run(avail):
    calls, x = [], np.ones(4)
    share = 4 * MiB / avail  # 4 MiB may be used
    with gpulinalg.config(backend="cpu", host_memory_share=share):
        assert np.all(_dispatch.dispatch(_op(calls, x, nbytes=1 * MiB)) == 2)
        with pytest.raises(MemoryError) as info:  # SciPy users catch MemoryError
            _dispatch.dispatch(_op(calls, x, nbytes=64 * MiB))
    exc = info.value
    assert isinstance(exc, gpulinalg.OutOfMemoryError) and calls == ["cpu"]
    assert exc.needed == 64 * MiB and exc.allowed < exc.needed <= exc.available
    assert exc.where == "host"
    for words in ("test.host was not started", "64 MiB", "available", "host_memory_share",
                  'precision="mixed"', "Dask", "a smaller problem", "backend='cpu'"):
        assert words in str(exc), words
    rec = gpulinalg.last_run()
    assert rec.op == "test.host" and rec.backend == "cpu" and rec.seconds == 0.0
    assert "not started" in rec.reason and rec.details["host_bytes"] == 64 * MiB
    assert rec.details["raised"].startswith("OutOfMemoryError")
    assert rec.details["host_allowed"] == exc.allowed
    again = pickle.loads(pickle.dumps(exc))
    assert str(again) == str(exc) and again.needed == exc.needed


def test_host_nbytes_wins_over_the_device_estimate(avail):
    calls = []
    with gpulinalg.config(backend="cpu"):
        _dispatch.dispatch(_op(calls, np.ones(2), nbytes=100 * avail, host_nbytes=16))
        assert gpulinalg.last_run().details["host_bytes"] == 16
        with pytest.raises(gpulinalg.OutOfMemoryError):
            _dispatch.dispatch(_op(calls, np.ones(2), host_nbytes=lambda: 100 * avail))
    assert calls == ["cpu"]


def test_callable_device_estimate_is_never_called_for_the_cpu(avail):
    def device_estimate():
        raise AssertionError("asked a GPU library for a CPU run")
    x = np.ones(1000)
    with gpulinalg.config(backend="cpu"):
        _dispatch.dispatch(_op([], x, nbytes=device_estimate))
    assert gpulinalg.last_run().details["host_bytes"] == host_check.HOST_ARGS_FACTOR * x.nbytes


def test_fallback_from_the_gpu_is_checked_too(fake_gpu, avail):
    """Too big for the (pretend) GPU and for the host: one clear error, no fallback warning,
    no run anywhere."""
    calls = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", gpulinalg.FallbackWarning)
        with pytest.raises(gpulinalg.OutOfMemoryError, match="available on the GPU"):
            _dispatch.dispatch(_op(calls, np.ones(3), nbytes=100 * avail))
    assert calls == []
    rec = gpulinalg.last_run()
    assert rec.fell_back and rec.backend == "cpu" and "not started" in rec.reason


def test_cholesky_of_a_view_too_big_for_ram(avail):
    n = 200_000  # a 200000^2 float64 factor: 320 GB
    if 8 * n * n < avail:
        pytest.skip("this machine could hold the factor")
    big = np.broadcast_to(np.float64(1.0), (n, n))  # no memory behind it
    exc, seconds, peak = _refused_quickly(
        lambda: gpulinalg.decomp.cholesky(big, check_finite=False))
    assert seconds < 0.5 and peak < 16 * MiB
    assert exc.needed >= 8 * n * n and "decomp.cholesky was not started" in str(exc)
    assert gpulinalg.last_run().op == "decomp.cholesky"


def test_gp_fit_too_big_for_ram_is_refused_within_a_second(avail):
    from gpulinalg.gp import GaussianProcessRegressor
    n = 250_000  # a 250000^2 float64 kernel matrix: 500 GB
    if 8 * n * n < avail:
        pytest.skip("this machine could hold the kernel matrix")
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((n, 2)), rng.standard_normal(n)
    inputs = X.nbytes + y.nbytes
    # the Cholesky path
    exc, seconds, peak = _refused_quickly(
        lambda: GaussianProcessRegressor(solver="cholesky").fit(X, y))
    assert seconds < 1.0 and peak < 8 * inputs  # copies of X and y, nothing n x n
    assert exc.needed >= 8 * n * n and "GaussianProcessRegressor" in str(exc)
    rec = gpulinalg.last_run()
    assert rec.op.startswith("gp.") and "not started" in rec.reason
    exc, seconds, peak = _refused_quickly(
        lambda: GaussianProcessRegressor(optimizer=None, precision="mixed",
                                         solver="cholesky").fit(X, y))
    assert seconds < 1.0 and peak < 8 * inputs and gpulinalg.last_run().op == "gp.fit"
    assert 4 * n * n <= exc.needed < 8 * n * n  # the float32 matrix
    # the defaults: the matrix-free rung fits, but is modelled to run too long on the CPU
    exc, seconds, peak = _refused_quickly(lambda: GaussianProcessRegressor().fit(X, y))
    assert seconds < 1.0 and peak < 8 * inputs and exc.needed >= 8 * n * n
    assert "solver='cg' fits in host memory" in str(exc) and "would run about" in str(exc)


def test_normal_calls_unaffected_and_recorded():
    a = np.array([[4.0, 2.0], [2.0, 3.0]])
    with gpulinalg.config(backend="cpu"):
        c = gpulinalg.decomp.cholesky(a)
    assert np.allclose(c.T @ c, a)
    rec = gpulinalg.last_run()
    assert rec.backend == "cpu" and rec.details["host_bytes"] > 0
    assert "raised" not in rec.details


def test_the_check_is_cheap(monkeypatch):
    """A small job's check reads the clock and the cached reading: no reading per call; a
    large job, or an old reading, reads afresh."""
    reads = []
    real = budget_host._read
    monkeypatch.setattr(budget_host, "_read", lambda: reads.append(1) or real())
    now = [100.0]
    monkeypatch.setattr(budget_host, "_clock", lambda: now[0])
    monkeypatch.setattr(budget_host, "_reading", (-1e9, None))
    budget_host.host_fits(1 << 20)  # a fresh reading
    for _ in range(1000):
        budget_host.host_fits(1 << 20)
    assert len(reads) == 1
    now[0] += 2 * budget_host.HOST_CACHE_S
    budget_host.host_fits(1 << 20)
    assert len(reads) == 2
    budget_host.host_fits(1 << 60)  # over the cached reading's fraction
    assert len(reads) == 3


def test_exact_gp_solve_of_a_view_too_big_for_ram(avail):
    n = 200_000
    if 8 * n * n < avail:
        pytest.skip("this machine could hold the kernel matrix")
    K = np.broadcast_to(np.float64(1.0), (n, n))
    exc, seconds, peak = _refused_quickly(lambda: gpulinalg.gp.exact_gp_solve(K, np.ones(n)))
    assert seconds < 1.0 and peak < 16 * MiB and exc.needed >= 8 * n * n
    assert gpulinalg.last_run().op.startswith("gp.")


def test_sparse_inputs_are_checked_not_their_fill(avail):
    import scipy.sparse as sp
    n = 20_000
    A = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], (n, n), format="csr")
    b = np.ones(n)
    with gpulinalg.config(backend="cpu"):
        x = gpulinalg.sparse.solve(A, b)
        rec = gpulinalg.last_run()
        assert np.allclose(A @ x, b) and rec.details["host_bytes"] < 40 * A.nnz  # no fill guess
        with gpulinalg.config(host_memory_share=(A.data.nbytes // 2) / avail):
            with pytest.raises(gpulinalg.OutOfMemoryError, match="sparse"):
                gpulinalg.sparse.solve(A, b)


def test_lu_family_declares_its_host_bytes():
    """The LU family's CPU runs are checked on their own estimates (a copy of ``a`` and the
    outputs), not the generic three times the arguments."""
    from gpulinalg.decomp import inv, lu, lu_factor, solve
    a, b = np.eye(64) * 2.0, np.ones(64)
    for call, want in ((lambda: solve(a, b), a.nbytes + 2 * b.nbytes),
                       (lambda: solve(a, b, precision="mixed"), 1.5 * a.nbytes + 2 * b.nbytes),
                       (lambda: lu_factor(a), a.nbytes), (lambda: inv(a), 2 * a.nbytes),
                       (lambda: lu(a), 3 * a.nbytes)):
        with gpulinalg.config_context(backend="cpu"):
            call()
        assert gpulinalg.last_run().details["host_bytes"] == want


def test_pca_of_a_view_larger_than_memory_is_refused_without_a_mask():
    """PCA's finiteness check reads a broadcast view's distinct entries (it allocated a
    37 GiB boolean mask for this one): the budget refuses the fit, nothing X-sized made."""
    from gpulinalg.decomp import PCA
    x = np.broadcast_to(np.linspace(0.0, 1.0, 20000), (2_000_000, 20000))
    with gpulinalg.config_context(backend="cpu"):
        err, seconds, peak = _refused_quickly(lambda: PCA(2).fit(x))
    assert err.needed > x.nbytes // 2 and peak < 64 << 20, (err.needed, peak)
    bad = np.broadcast_to(np.r_[1.0, np.nan], (10**7, 2))
    with pytest.raises(ValueError, match="NaN or infinity"):
        PCA(1).fit(bad)


def test_an_address_space_limit_caps_the_budget(avail):
    """Under ``ulimit -v`` an allocation past the limit fails whatever RAM is free: the budget
    is what the limit leaves above the process's virtual size (read in a child process, whose
    limit this test may lower)."""
    import subprocess
    import sys
    code = ("import resource; from gpulinalg._runtime import budget_host as b;"
            "import re; vm = int(re.search(rb'VmSize:\\s+(\\d+)', open('/proc/self/status','rb')"
            ".read()).group(1)) * 1024;"
            "resource.setrlimit(resource.RLIMIT_AS, (vm + (512 << 20), resource.RLIM_INFINITY));"
            "print(b.host_available_bytes(), b.host_fits(1 << 30)[0])")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, check=True).stdout.split()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"no address-space limit here: {exc.stderr[-200:]}")
    left, fits = int(out[0]), out[1] == "True"
    assert 0 < left <= 512 << 20 and not fits
