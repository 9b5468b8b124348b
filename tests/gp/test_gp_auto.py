"""``GaussianProcessRegressor(precision="auto")``, the default: float64 where its estimate fits,
else the float32 factor refined to float64 (``"mixed"``) where that fits, else the clear
``OutOfMemoryError``. The dispatcher chooses from the fit's own estimates (``Op.lighter``);
here the memory it sees is set small: a pretend GPU's free bytes (``fake_gpu``, the GPU
functions swapped for the CPU's), the host's available bytes, or, on the GPU (``gpu`` mark),
CuPy's pool limit."""

import pickle
import time
import tracemalloc

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import ExpSineSquared, WhiteKernel

import gpulinalg
from gpulinalg._runtime import budget_host
from gpulinalg.gp import GaussianProcessRegressor, _engine_cuda, _engine_host
from gpulinalg.gp._regressor_api import _fit_cost
from tests.gp.test_gp_formulas import D, problem, rel
from tests.support.fake_gpu import fake_gpu

#: The mixed path's documented agreement with float64 (docs/gp.md, tests/gp/test_gp_mixed.py).
MIXED_RTOL = 1e-10
N, M = 500, 40


def estimates(n=N, t=1, d=D, jitter=None):
    """``(float64, mixed)`` byte estimates of ``fit``'s final factorization."""
    return _fit_cost(n, t, d, jitter)[0], _fit_cost(n, t, d, jitter, item=4)[0]


def fitted(x, y, kernel, **kw):
    """A fit on the Cholesky path (``solver="auto"``'s matrix-free rung past it:
    ``tests/gp/test_gp_auto_solver.py``)."""
    kw.setdefault("solver", "cholesky")
    return GaussianProcessRegressor(kernel, optimizer=None, **kw).fit(x, y)


@pytest.fixture
def gpu_bytes(monkeypatch):
    """``gpu_bytes(b)``: a context with a pretend GPU of ``b`` bytes available under the
    default headroom; its GPU functions are the CPU's (they get NumPy arrays)."""
    monkeypatch.setattr(_engine_cuda, "fit", _engine_host.fit)
    monkeypatch.setattr(_engine_cuda, "predict", _engine_host.predict)
    total = 1 << 40

    def pretend(nbytes):
        headroom = int(gpulinalg.get_config().vram_headroom * total)
        return fake_gpu(free=int(nbytes) + headroom, total=total)
    yield pretend
    gpulinalg.testing.reset_gpu_state()


@pytest.fixture(scope="module")
def reference():
    """The float64 fit (explicit) and its predictions, on the CPU."""
    x, y, xq, kernel = problem(N, M, seed=21)
    with gpulinalg.config(backend="cpu"):
        gp = fitted(x, y, kernel, precision="float64")
        mean, std = gp.predict(xq, return_std=True)
    return x, y, xq, kernel, gp, mean, std


def _same_answers(gp, reference, exact):
    x, y, xq, kernel, ref, mean_r, std_r = reference
    with gpulinalg.config(backend="cpu"):
        mean, std = gp.predict(xq, return_std=True)
    if exact:
        np.testing.assert_array_equal(gp.alpha_, ref.alpha_)
        np.testing.assert_array_equal(mean, mean_r)
    assert rel(gp.alpha_, ref.alpha_) < MIXED_RTOL
    assert rel(mean, mean_r) < MIXED_RTOL and rel(std, std_r) < MIXED_RTOL


def test_default_is_auto_and_sklearn_api_keeps_it():
    gp = GaussianProcessRegressor()
    assert gp.get_params()["precision"] == "auto"
    assert clone(gp).precision == "auto"
    assert clone(gp.set_params(precision="mixed")).precision == "mixed"
    assert "precision_" not in vars(GaussianProcessRegressor())


def test_float64_when_it_fits(reference):
    x, y, _, kernel, *_ = reference
    with gpulinalg.config(backend="cpu"):
        gp = fitted(x, y, kernel)
    rec = gpulinalg.last_run()
    assert gp.precision_ == "float64" and gp.L_.dtype == np.float64
    assert rec.op == "gp.fit" and rec.backend == "cpu" and rec.details["precision"] == "float64"
    assert "precision='float64': host estimate" in rec.reason and "within" in rec.reason
    _same_answers(gp, reference, exact=True)
    assert pickle.loads(pickle.dumps(gp)).precision_ == "float64"


def test_host_budget_forces_mixed(reference, host_bytes):
    x, y, _, kernel, *_ = reference
    f64, mixed = estimates()
    host_bytes((f64 + mixed) // 2)
    with gpulinalg.config(backend="cpu", host_memory_share=1.0):
        gp = fitted(x, y, kernel)
    rec = gpulinalg.last_run()
    assert gp.precision_ == "mixed" and gp.L_.dtype == np.float32
    assert rec.backend == "cpu" and not rec.fell_back and rec.details["precision"] == "mixed"
    assert rec.details["host_bytes"] == mixed
    assert f"precision='float64': host estimate {f64} B over" in rec.reason
    assert f"precision='mixed': host estimate {mixed} B within" in rec.reason
    _same_answers(gp, reference, exact=False)


def test_nothing_fits_the_host(reference, host_bytes):
    x, y, _, kernel, *_ = reference
    f64, mixed = estimates()
    host_bytes(mixed - 1)
    with gpulinalg.config(backend="cpu", host_memory_share=1.0), \
            pytest.raises(gpulinalg.OutOfMemoryError) as info:
        fitted(x, y, kernel)
    exc = info.value
    assert exc.where == "host" and exc.needed == mixed and exc.available == mixed - 1
    text = str(exc)
    for words in ("gp.fit was not started", f"host memory with precision='mixed' "
                  f"(precision='float64': {f64 / 2**20:.3g} MiB ({f64} B))", "available",
                  "Dask", "a smaller problem", "backend='cpu'"):
        assert words in text, words
    assert 'precision="mixed" where the call has it' not in text  # tried already
    rec = gpulinalg.last_run()
    assert rec.op == "gp.fit" and rec.seconds == 0.0 and "not started" in rec.reason
    assert rec.details["raised"].startswith("OutOfMemoryError")
    assert "precision" not in rec.details  # nothing ran


def test_gpu_budget_forces_mixed(reference, gpu_bytes):
    x, y, xq, kernel, *_ = reference
    f64, mixed = estimates()
    with gpu_bytes((f64 + mixed) // 2), gpulinalg.config(backend="gpu"):
        gp = fitted(x, y, kernel)
        rec = gpulinalg.last_run()
        gp.predict(xq, return_std=True)
        assert gpulinalg.last_run().backend == "gpu"
    assert gp.precision_ == "mixed" and gp.L_.dtype == np.float32
    assert rec.backend == "gpu" and not rec.fell_back and rec.details["precision"] == "mixed"
    assert rec.reason.startswith(f"precision='float64': estimate {f64} B > ")
    assert f"; precision='mixed': estimate {mixed} B fits in" in rec.reason
    _same_answers(gp, reference, exact=False)


def test_gpu_budget_fits_float64(reference, gpu_bytes):
    x, y, _, kernel, *_ = reference
    f64, _ = estimates()
    with gpu_bytes(f64), gpulinalg.config(backend="gpu"):
        gp = fitted(x, y, kernel)
    rec = gpulinalg.last_run()
    assert gp.precision_ == "float64" and rec.backend == "gpu"
    assert rec.details["precision"] == "float64" and f"estimate {f64} B fits" in rec.reason
    _same_answers(gp, reference, exact=True)


@pytest.mark.parametrize("host", ["float64", "mixed"])
def test_too_big_for_the_gpu_takes_the_cpu_rungs(reference, gpu_bytes, host_bytes, host):
    """Neither variant fits the GPU: the CPU fallback takes float64 where the host holds it,
    else mixed; the fallback warns and the reason names all four estimates' verdicts."""
    x, y, _, kernel, *_ = reference
    f64, mixed = estimates()
    host_bytes(f64 if host == "float64" else (f64 + mixed) // 2)
    with gpu_bytes(mixed - 1), gpulinalg.config(backend="gpu", host_memory_share=1.0), \
            pytest.warns(gpulinalg.FallbackWarning, match="ran on the CPU"):
        gp = fitted(x, y, kernel)
    rec = gpulinalg.last_run()
    assert gp.precision_ == host and rec.details["precision"] == host
    assert rec.backend == "cpu" and rec.fell_back
    assert "available on the GPU" in rec.reason and f"precision='mixed': estimate {mixed} B >" \
        in rec.reason
    assert f"precision='{host}': host estimate" in rec.reason
    _same_answers(gp, reference, exact=host == "float64")


def test_fallback_raise_names_both_estimates(reference, gpu_bytes):
    x, y, _, kernel, *_ = reference
    f64, mixed = estimates()
    with gpu_bytes(mixed - 1), gpulinalg.config(backend="gpu", fallback="raise"), \
            pytest.raises(gpulinalg.OutOfMemoryError) as info:
        fitted(x, y, kernel)
    assert info.value.where == "gpu" and info.value.needed == mixed
    assert f"precision='float64': estimate {f64} B" in str(info.value)
    assert f"precision='mixed': estimate {mixed} B" in str(info.value)


def test_explicit_precisions_are_not_changed(reference, host_bytes):
    """``"float64"`` asked for is refused where only mixed would fit; ``"mixed"`` runs mixed
    where float64 would fit."""
    x, y, _, kernel, *_ = reference
    f64, mixed = estimates()
    with gpulinalg.config(backend="cpu"):
        gp = fitted(x, y, kernel, precision="mixed")
    assert gp.precision_ == "mixed" and gpulinalg.last_run().details["precision"] == "mixed"
    host_bytes((f64 + mixed) // 2)
    with gpulinalg.config(backend="cpu", host_memory_share=1.0), \
            pytest.raises(gpulinalg.OutOfMemoryError) as info:
        fitted(x, y, kernel, precision="float64")
    assert info.value.needed == f64 and 'precision="mixed" where the call has it' in \
        str(info.value)


def test_kernels_without_a_plan_and_cg_take_float64(host_bytes):
    x, y, _, kernel = problem(120, 1, seed=22)
    with gpulinalg.config(backend="cpu"):
        gp = fitted(x[:, :1], y, ExpSineSquared() + WhiteKernel())
        assert gp.precision_ == "float64" and gpulinalg.last_run().details["precision"] == \
            "float64"
        cg = fitted(x, y, kernel, solver="cg")
        assert cg.precision_ == "float64" and cg.solver_ == "cg"
        with pytest.raises(ValueError, match="precision must be 'float64'"):
            fitted(x, y, kernel, solver="cg", precision="mixed")
        with pytest.raises(ValueError, match="precision must be one of"):
            fitted(x, y, kernel, precision="half")
    f64, _ = estimates(120, d=0)  # no plan: the kernel matrix comes from scikit-learn
    host_bytes(f64 // 2)  # no lighter variant without a plan: refused as float64
    with gpulinalg.config(backend="cpu", host_memory_share=1.0), \
            pytest.raises(gpulinalg.OutOfMemoryError, match='precision="mixed"'):
        fitted(x[:, :1], y, ExpSineSquared() + WhiteKernel())


def test_dask_inputs_take_float64():
    da = pytest.importorskip("dask.array")
    x, y, _, kernel = problem(40, 1)
    gp = fitted(da.from_array(x, chunks=20), da.from_array(y, chunks=20), kernel)
    assert gp.precision_ == "float64"


def test_refused_within_a_second_when_nothing_fits_the_host():
    """n = 250 000 (float64 500 GB, mixed 250 GB) on the Cholesky path, on a machine with
    less: the clear error, before anything n x n is allocated."""
    n = 250_000
    avail = budget_host.host_available_bytes()
    f64, mixed = estimates(n, d=2)
    if avail is None or mixed < avail:
        pytest.skip("this machine could hold the float32 kernel matrix")
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((n, 2)), rng.standard_normal(n)
    tracemalloc.start()
    try:
        start = time.perf_counter()
        with pytest.raises(gpulinalg.OutOfMemoryError) as info:
            GaussianProcessRegressor(optimizer=None, solver="cholesky").fit(X, y)
        seconds, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seconds < 1.0 and peak < 8 * (X.nbytes + y.nbytes)
    exc = info.value
    assert exc.needed == mixed and f"precision='float64': {f64 / 2**30:.3g} GiB" in str(exc)
    assert "GaussianProcessRegressor" in str(exc) or "gp.fit" in str(exc)


@pytest.mark.gpu
def test_gpu_pool_limit_forces_mixed(xp_gpu):
    """On the GPU: CuPy's pool limit between the two estimates (n = 6000); auto takes mixed
    there and answers as float64 does without the limit."""
    n = 6000
    x, y, xq, kernel = problem(n, 300, seed=23)
    pool = xp_gpu.get_default_memory_pool()
    with gpulinalg.config(backend="gpu"):
        ref = fitted(x, y, kernel)
        assert ref.precision_ == "float64" and gpulinalg.last_run().backend == "gpu"
        mean_r, std_r = ref.predict(xq, return_std=True)
        del ref
        pool.free_all_blocks()
        f64, mixed = estimates(n)
        limit = pool.get_limit()
        pool.set_limit(size=pool.used_bytes() + (f64 + mixed) // 2)
        try:
            gp = fitted(x, y, kernel)
            rec = gpulinalg.last_run()
            mean, std = gp.predict(xq, return_std=True)
        finally:
            pool.set_limit(size=limit)
    assert gp.precision_ == "mixed" and rec.backend == "gpu" and rec.details["precision"] == \
        "mixed"
    assert "precision='mixed': estimate" in rec.reason and "fits" in rec.reason
    assert rel(mean, mean_r) < 1e-9 and rel(std, std_r) < 1e-9


@pytest.mark.gpu
def test_n_100000_on_an_80_gb_card_picks_mixed(xp_gpu):
    """Issue 41's proof: n = 100 000 with default settings (a fixed kernel) on an 80 GB card:
    float64's estimate (83 GB) does not fit, mixed's (43 GB) does, and the fit runs there.
    ``alpha_`` is checked by its float64 residual (the kernel rebuilt tile by tile)."""
    from gpulinalg.gp._kernels_xp import compile_kernel
    from gpulinalg.gp._mixed_xp import Operator
    total = xp_gpu.cuda.Device().mem_info[1]
    if total > 100e9:
        pytest.skip("float64 fits this card (the test is for an 80 GB one)")
    n = 100_000
    rng = np.random.default_rng(41)
    x = rng.uniform(0, 1, (n, 3))
    y = np.sin(6 * x[:, 0]) + np.cos(4 * x[:, 1]) + 0.1 * rng.standard_normal(n)
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    kernel = ConstantKernel(1.0, "fixed") * RBF(0.3, "fixed")
    start = time.perf_counter()
    gp = GaussianProcessRegressor(kernel, alpha=1e-2, optimizer=None).fit(x, y)
    seconds = time.perf_counter() - start
    rec = gpulinalg.last_run()
    assert gp.precision_ == "mixed" and rec.backend == "gpu" and not rec.fell_back
    assert rec.details["precision"] == "mixed" and "precision='float64': estimate" in rec.reason
    xd, ad = xp_gpu.asarray(x), xp_gpu.asarray(gp.alpha_)
    residual = xp_gpu.asnumpy(Operator(compile_kernel(kernel, 3), xd, 1e-2 + gp.jitter_)(ad))
    assert np.linalg.norm(y - residual) <= 1e-8 * np.linalg.norm(y), seconds
    mean, std = gp.predict(x[:1000], return_std=True)
    assert np.isfinite(mean).all() and (std > 0).all()
    assert rel(mean, y[:1000]) < 0.2
