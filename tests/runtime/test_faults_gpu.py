"""Fault injection on the GPU (issue 18): out-of-memory at the k-th device allocation inside every
public operation, a pool limit below the estimate, a sticky CUDA error.

For each public operation and input kind the test first counts the device allocations an
unfailed call makes (CuPy's allocator, wrapped: every CuPy array, nvmath workspace and cuSOLVER
buffer goes through it; torch inputs reach the engines through DLPack, so theirs do too), then
refuses allocation k for k = 1..count (``GPULINALG_FAULTS_MAX_K`` of them spread evenly when
there are more), once under ``fallback="cpu"`` (the call must return the CPU result with the
fallback recorded and warned) and once under ``fallback="raise"`` (it must raise
``MemoryError``). Every trial checks that the inputs are bit-identical afterwards and that the
device bytes in use (CuPy's pool, and torch's allocator) are back to their level before the call.

``GPULINALG_FAULTS_JSON=path`` writes the figures there;
``python -m benchmarks.studies.faults_report path`` renders ``docs/reliability/faults.md`` from
them. The tests without the ``gpu`` mark check the bookkeeping on a machine without a GPU.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
import types
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import gpulinalg
from gpulinalg import testing
from tests.support import fake_gpu as fakes

from tests.support import faults as _faults

#: Allocation numbers tried per operation and input kind (all of them up to this many).
MAX_K = int(os.environ.get("GPULINALG_FAULTS_MAX_K", "40"))
_SUMMARY: dict = {"operations": [], "pool_limit": [], "sticky": None}


# -- the operations ------------------------------------------------------------------------------

def _data(seed=18):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((96, 64))
    spd = a.T @ a + 64 * np.eye(64)
    lap = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(200, 200), format="csr")
    x = rng.standard_normal((80, 3))
    y = np.sin(x).sum(axis=1)
    return dict(a=a, spd=spd, b=rng.standard_normal((64, 3)), lap=lap, rhs=np.ones(200),
                w=rng.standard_normal((64, 40)), bias=rng.standard_normal(40), x=x, y=y,
                xq=rng.standard_normal((30, 3)), g=rng.standard_normal((96, 40)))


def _converter(kind):
    if kind == "numpy":
        return lambda x: x
    if kind == "cupy":
        import cupy
        import cupyx.scipy.sparse as csp
        return lambda x: csp.csr_matrix(x) if sp.issparse(x) else cupy.asarray(x)
    import torch
    return lambda x: torch.as_tensor(x, device="cuda")


def _gpr(d):
    from sklearn.gaussian_process.kernels import RBF
    return gpulinalg.gp.GaussianProcessRegressor(RBF(1.0), alpha=1e-2, optimizer=None)


def _setup(name, kind):
    """``(call, inputs)`` of operation ``name`` on inputs of package ``kind``; state an
    operation needs (a factor, a fitted model) is made here, outside the faulted call."""
    d, cv = _data(), _converter(kind)
    dec, dense = gpulinalg.decomp, gpulinalg.dense
    a, spd, b = cv(d["a"]), cv(d["spd"]), cv(d["b"])
    if name == "dense.matmul":
        w, bias = cv(d["w"]), cv(d["bias"])
        return lambda: dense.matmul(a, w, bias=bias, activation="relu", return_aux=True), \
            (a, w, bias)
    if name == "dense.matmul_backward":
        w, g = cv(d["w"]), cv(d["g"])
        with gpulinalg.config(backend="cpu"):
            _, aux = dense.matmul(a, w, bias=cv(d["bias"]), activation="gelu", return_aux=True)
        return lambda: tuple(dense.matmul_backward(g, a, w, aux=aux, activation="gelu",
                                                   bias=True)), (g, a, w, aux.data)
    if name == "decomp.qr":
        return lambda: tuple(dec.qr(a)), (a,)
    if name == "decomp.svd":
        return lambda: tuple(dec.svd(a)), (a,)
    if name == "decomp.cholesky":
        return lambda: dec.cholesky(spd), (spd,)
    if name == "decomp.cho_factor":
        return lambda: dec.cho_factor(spd), (spd,)
    if name == "decomp.solve_triangular":
        tri = cv(np.tril(d["spd"]))
        return lambda: dec.solve_triangular(tri, b, lower=True), (tri, b)
    if name in ("decomp.cho_solve", "decomp.logdet_cholesky"):
        with gpulinalg.config(backend="cpu"):
            factor, lower = dec.cho_factor(d["spd"])
        c = cv(factor)
        if name == "decomp.cho_solve":
            return lambda: dec.cho_solve((c, lower), b), (c, b)
        return lambda: dec.logdet_cholesky((c, lower)), (c,)
    if name == "decomp.truncated_svd":
        return lambda: tuple(dec.truncated_svd(a, 5, random_state=0, out_of_core=False)), (a,)
    if name == "decomp.PCA.fit":
        return lambda: _pca_attrs(dec.PCA(5, random_state=0).fit(a)), (a,)
    if name == "decomp.PCA.transform":
        with gpulinalg.config(backend="gpu"):
            model = dec.PCA(5, random_state=0).fit(a)
        return lambda: model.transform(a), (a,)
    if name == "sparse.solve":
        lap, rhs = cv(d["lap"]), cv(d["rhs"])
        return lambda: gpulinalg.sparse.solve(lap, rhs), (lap, rhs)
    if name == "sparse.factorize+solve":
        lap, rhs = cv(d["lap"]), cv(d["rhs"])

        def call():
            with gpulinalg.sparse.factorize(lap) as fac:
                return fac.solve(rhs)
        return call, (lap, rhs)
    if name == "gp.exact_gp_solve":
        return lambda: tuple(gpulinalg.gp.exact_gp_solve(spd, b)), (spd, b)
    x, y = d["x"], d["y"]
    if name == "gp.GaussianProcessRegressor.fit":
        return lambda: _gpr_attrs(_gpr(d).fit(x, y)), (x, y)
    if name == "gp.GaussianProcessRegressor.predict":
        with gpulinalg.config(backend="gpu"):
            model = _gpr(d).fit(x, y)
        xq = d["xq"]
        return lambda: model.predict(xq, return_std=True), (xq,)
    raise KeyError(name)


def _pca_attrs(m):
    return (m.components_, m.explained_variance_, m.singular_values_, m.mean_)


def _gpr_attrs(m):
    return (m.alpha_, m.L_, m.log_marginal_likelihood_value_)


#: operation -> input kinds it is tried with (numpy inputs run on the GPU under backend="gpu").
OPERATIONS = {
    "dense.matmul": ("numpy", "cupy", "torch"),
    "dense.matmul_backward": ("numpy", "cupy", "torch"),
    "decomp.qr": ("numpy", "cupy"),
    "decomp.svd": ("numpy", "cupy"),
    "decomp.cholesky": ("numpy", "cupy"),
    "decomp.cho_factor": ("numpy", "cupy"),
    "decomp.cho_solve": ("numpy", "cupy"),
    "decomp.solve_triangular": ("numpy", "cupy"),
    "decomp.logdet_cholesky": ("numpy", "cupy"),
    "decomp.truncated_svd": ("numpy", "cupy"),
    "decomp.PCA.fit": ("numpy", "cupy"),
    "decomp.PCA.transform": ("numpy",),
    "sparse.solve": ("numpy", "cupy"),
    "sparse.factorize+solve": ("numpy", "cupy"),
    "gp.exact_gp_solve": ("numpy", "cupy"),
    "gp.GaussianProcessRegressor.fit": ("numpy",),
    "gp.GaussianProcessRegressor.predict": ("numpy",),
}
CASES = [(op, kind) for op, kinds in OPERATIONS.items() for kind in kinds]
#: Operations whose host-input GPU route streams (out-of-core) when the estimate does not fit.
STREAMING = {"decomp.PCA.fit", "decomp.PCA.transform"}


def _need(kind):
    cupy = pytest.importorskip("cupy")
    if kind == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("torch without CUDA")
    return cupy


@pytest.fixture(scope="module", autouse=True)
def _write_summary():
    yield
    path = os.environ.get("GPULINALG_FAULTS_JSON")
    if path and (_SUMMARY["operations"] or _SUMMARY["pool_limit"] or _SUMMARY["sticky"]):
        _SUMMARY["environment"] = _environment()
        with open(path, "w") as f:
            json.dump(_SUMMARY, f, indent=1, default=str)


def _environment():
    env = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "max_k": MAX_K,
           "gpulinalg": gpulinalg.__version__}
    for name in ("cupy", "nvmath", "torch", "numpy", "scipy"):
        mod = sys.modules.get(name)
        if mod is not None:
            env[name] = getattr(mod, "__version__", "?")
    cupy = sys.modules.get("cupy")
    if cupy is not None and gpulinalg.gpu_available():
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        env["device"] = props["name"].decode() if isinstance(props["name"], bytes) \
            else str(props["name"])
    return env


# -- out of memory at every allocation -----------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("op, kind", CASES, ids=[f"{o}-{k}" for o, k in CASES])
def test_oom_at_every_allocation(op, kind):
    cupy = _need(kind)
    testing.reset_gpu_state()
    call, inputs = _setup(op, kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gpulinalg.config(backend="cpu"):
            reference = _faults.to_host(call())
        with gpulinalg.config(backend="gpu"):
            for _ in range(2):  # warm: plans, kernels, analyses cached as in steady use
                call()
    with _faults.counting_allocator(cupy) as counter, _faults.dispatch_log() as runs, \
            gpulinalg.config(backend="gpu"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call()
    count = counter.count
    assert runs and all(r.route.startswith("gpu") for r in runs), runs
    assert count > 0, f"{op} made no device allocation through CuPy's allocator or torch's"
    single = len(runs) == 1
    trials, start = [], time.perf_counter()
    for k in _faults.ks_to_try(count, MAX_K):
        for mode in ("cpu", "raise"):
            trials.append(_faults.run_trial(cupy, call, inputs, reference, k, mode, single))
    row = _faults.summarize(op, kind, count, trials)
    row["seconds"] = round(time.perf_counter() - start, 3)
    _SUMMARY["operations"].append(row)
    assert row["failures"] == 0, row["problems"]
    assert row["leaks"] == 0
    assert row["fallbacks"] >= 1 and row["clean_errors"] >= 1


# -- a pool limit below the estimate: the CPU, before any allocation -----------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("op", [o for o in OPERATIONS if o not in STREAMING])
def test_pool_limit_below_the_estimate_routes_to_cpu_up_front(op):
    cupy = _need("numpy")
    testing.reset_gpu_state()
    call, inputs = _setup(op, "numpy")
    with gpulinalg.config(backend="cpu"):
        reference = _faults.to_host(call())
    pool = cupy.get_default_memory_pool()
    limit = pool.get_limit()
    pool.set_limit(size=pool.used_bytes() + 1)  # 0 would mean "no limit"
    try:
        with _faults.counting_allocator(cupy) as counter, _faults.dispatch_log() as runs, \
                gpulinalg.config(backend="gpu"), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = _faults.to_host(call())
    finally:
        pool.set_limit(size=limit)
    fallbacks = [w for w in caught if issubclass(w.category, gpulinalg.FallbackWarning)]
    _SUMMARY["pool_limit"].append({"op": op, "allocations": counter.count,
                                   "runs": [r.route for r in runs],
                                   "fell_back": any(r.fell_back for r in runs)})
    assert counter.count == 0, f"{counter.count} device allocations despite the limit"
    assert runs and all(r.route == "cpu" for r in runs), runs
    assert any(r.fell_back for r in runs) and fallbacks
    assert any("estimate" in str(w.message) for w in fallbacks)
    assert _faults.mismatch(got, reference) is None


# -- a sticky CUDA error, in a process of its own ------------------------------------------------

_STICKY = textwrap.dedent(r'''
    import json, warnings
    import numpy as np, scipy.sparse as sp, scipy.sparse.linalg as spla, cupy
    import gpulinalg
    from gpulinalg import decomp, dense, sparse
    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512))
    spd = a @ a.T + 512 * np.eye(512)
    lap = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(2000, 2000), format="csr")
    out = {"calls": []}
    with gpulinalg.config(backend="gpu"):
        dense.matmul(a, a)
    out["before"] = gpulinalg.last_run().backend
    kernel = cupy.RawKernel(r"""
    extern "C" __global__ void write_far(float* p) { p[(size_t)1 << 40] = 1.0f; }
    """, "write_far")
    x = cupy.zeros(4, dtype=cupy.float32)
    kernel((1,), (1,), (x,))
    try:
        cupy.cuda.runtime.deviceSynchronize()
        out["kernel"] = None
    except Exception as exc:
        out["kernel"] = [type(exc).__name__, str(exc), getattr(exc, "status", None)]
    calls = [
        ("dense.matmul", lambda: dense.matmul(a, a), lambda: a @ a, "gpu"),
        ("decomp.cholesky", lambda: decomp.cholesky(spd, lower=True),
         lambda: np.linalg.cholesky(spd), "auto"),
        ("decomp.qr", lambda: decomp.qr(a)[1], lambda: None, "auto"),
        ("sparse.solve", lambda: sparse.solve(lap, np.ones(2000)),
         lambda: spla.spsolve(lap, np.ones(2000)), "auto"),
        ("dense.matmul again", lambda: dense.matmul(a, a), lambda: a @ a, "auto"),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name, fn, ref, backend in calls:
            with gpulinalg.config(backend=backend):
                got = fn()
            rec = gpulinalg.last_run()
            want = ref()
            ok = want is None or bool(np.allclose(got, want, rtol=1e-8, atol=1e-8))
            out["calls"].append({"name": name, "backend": rec.backend,
                                 "fell_back": rec.fell_back, "reason": rec.reason, "ok": ok})
    out["warnings"] = [str(w.message) for w in caught
                       if issubclass(w.category, gpulinalg.FallbackWarning)]
    out["gpu_available"] = gpulinalg.gpu_available()
    print("RESULT " + json.dumps(out), flush=True)
    import os
    os._exit(0)  # skip tearing down a poisoned CUDA context at exit
''')


@pytest.mark.gpu
def test_sticky_cuda_error_disables_the_gpu_once():
    _need("numpy")
    proc = subprocess.run([sys.executable, "-c", _STICKY], capture_output=True, text=True,
                          timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT "):])
    _SUMMARY["sticky"] = out
    assert out["before"] == "gpu"
    assert out["kernel"] is not None, "the out-of-bounds kernel did not fault"
    first, later = out["calls"][0], out["calls"][1:]
    assert first["backend"] == "cpu" and first["fell_back"] and "sticky" in first["reason"]
    assert all(c["ok"] for c in out["calls"]), out["calls"]
    assert all(c["backend"] == "cpu" and not c["fell_back"] for c in later), later
    assert len(out["warnings"]) == 1, out["warnings"]
    assert out["gpu_available"] is False


# -- the bookkeeping, on any machine -------------------------------------------------------------

class _FakePool:
    def __init__(self):
        self.used, self.blocks = 0, []

    def malloc(self, size):
        self.used += size
        self.blocks.append(size)
        return ("block", size)

    def used_bytes(self):
        return self.used

    def free_all_blocks(self):
        pass


class _FakeOOM(MemoryError):
    def __init__(self, size, total, limit=0):
        super().__init__(f"out of memory allocating {size} bytes (allocated so far: {total})")


def _fake_cupy():
    pool = _FakePool()
    state = {"allocator": pool.malloc}
    cuda = types.SimpleNamespace(
        get_allocator=lambda: state["allocator"],
        set_allocator=lambda f: state.update(allocator=f),
        memory=types.SimpleNamespace(OutOfMemoryError=_FakeOOM),
        get_current_stream=lambda: types.SimpleNamespace(synchronize=lambda: None))
    return types.SimpleNamespace(cuda=cuda, get_default_memory_pool=lambda: pool), pool


def test_counting_allocator_fails_only_the_kth_and_restores():
    cupy, pool = _fake_cupy()
    original = cupy.cuda.get_allocator()
    with pytest.raises(RuntimeError), _faults.counting_allocator(cupy, fail_at=3) as counter:
        alloc = cupy.cuda.get_allocator()
        assert alloc(8) == ("block", 8) and alloc(16) == ("block", 16)
        with pytest.raises(MemoryError) as info:
            alloc(32)
        assert isinstance(info.value, _FakeOOM) and "32 bytes" in str(info.value)
        assert alloc(64) == ("block", 64)  # only the k-th fails
        raise RuntimeError("the block ends by an error")
    assert cupy.cuda.get_allocator() == original  # restored, also after an error
    assert (counter.count, counter.failed, counter.failed_size) == (4, True, 32)
    assert "test_counting_allocator_fails_only_the_kth_and_restores" in counter.failed_at
    assert pool.blocks == [8, 16, 64] and counter.served_bytes == 88


def test_counting_without_a_failure():
    cupy, pool = _fake_cupy()
    with _faults.counting_allocator(cupy) as counter:
        for size in (1, 2, 3):
            cupy.cuda.get_allocator()(size)
    assert (counter.count, counter.failed, pool.used) == (3, False, 6)


def test_ks_to_try():
    assert _faults.ks_to_try(0, 5) == []
    assert _faults.ks_to_try(4, 4) == [1, 2, 3, 4]
    ks = _faults.ks_to_try(1000, 40)
    assert ks[0] == 1 and ks[-1] == 1000 and len(ks) == 40 and ks == sorted(set(ks))


def test_dispatch_log_sees_fallbacks(fake_gpu):
    a = np.eye(3)
    with _faults.dispatch_log() as runs, gpulinalg.config(backend="gpu"), \
            testing.inject_fault("oom"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpulinalg.dense.matmul(a, a)
    assert runs == [_faults.Run("dense.matmul", "cpu", True)]


def _trial(cupy, call, inputs, reference, mode, k=1):
    with fakes.fake_gpu():
        out = _faults.run_trial(cupy, call, inputs, reference, k, mode, True)
    testing.reset_gpu_state()
    return out


def test_run_trial_classifies_a_fallback_and_a_clean_error():
    cupy, pool = _fake_cupy()
    a = np.arange(9.0).reshape(3, 3)

    def call():  # an allocation that fails, and a GPU run that runs out of memory
        try:
            cupy.cuda.get_allocator()(8)
        except MemoryError:
            pass
        with testing.inject_fault("oom"):
            return gpulinalg.dense.matmul(a, a)
    ok = _trial(cupy, call, (a,), a @ a, "cpu")
    assert (ok.hit, ok.outcome, ok.problems) == (True, "fallback", [])
    raised = _trial(cupy, call, (a,), a @ a, "raise")
    assert (raised.outcome, raised.problems) == ("clean_error", [])
    missed = _trial(cupy, call, (a,), a @ a, "cpu", k=2)
    assert (missed.hit, missed.outcome) == (False, "no_fault")


def test_run_trial_reports_leaks_changed_inputs_and_wrong_results():
    cupy, pool = _fake_cupy()
    a = np.arange(4.0).reshape(2, 2)

    def leaky():
        with testing.inject_fault("oom"):
            out = gpulinalg.dense.matmul(a, a)
        with pytest.raises(MemoryError):
            cupy.cuda.get_allocator()(8)  # k=1 fails ...
        cupy.cuda.get_allocator()(40)  # ... and 40 bytes are never given back
        a[0, 0] += 1
        return out
    bad = _trial(cupy, leaky, (a,), np.zeros((2, 2)), "cpu")
    assert bad.outcome == "bad" and bad.leaked_bytes == 40
    text = " | ".join(bad.problems)
    assert "grew by 40" in text and "input changed" in text and "not the CPU result" in text


def test_mismatch_and_same_bits():
    x = np.array([1.0, 2.0, np.nan])
    assert _faults.mismatch((x, 3.0), (x.copy(), 3.0)) is None
    assert _faults.mismatch((x + 1e-6,), (x,)) is not None
    assert _faults.mismatch((x,), (x, x)) is not None
    assert _faults.same_bits((x, [x]), (x.copy(), [x.copy()]))
    assert not _faults.same_bits((x,), (x.astype(np.float32),))
    assert not _faults.same_bits((x,), (-x,))


def test_to_host_reads_sparse_and_nested():
    m = sp.random(5, 5, density=0.4, format="csr", random_state=0)
    data, indices, indptr = _faults.to_host(m)
    assert np.array_equal(data, m.data) and np.array_equal(indptr, m.indptr)
    tree = _faults.to_host({"a": (np.ones(2), [np.zeros(1)]), "b": None})
    assert [x.tolist() if x is not None else x for x in _faults.leaves(tree)] == \
        [[1.0, 1.0], [0.0], None]


def test_first_sticky_error_warns_once(fake_gpu):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with testing.inject_fault("sticky"), gpulinalg.config(backend="gpu"):
            gpulinalg.dense.matmul(np.eye(3), np.eye(3))
    assert gpulinalg.last_run().fell_back
    assert len([w for w in caught if issubclass(w.category, gpulinalg.FallbackWarning)]) == 1


def test_report_renders_the_figures():
    from benchmarks.studies.faults_report import render
    trials = [_faults.Trial(1, "cpu", True, "fallback", 0, []),
              _faults.Trial(1, "raise", True, "clean_error", 0, []),
              _faults.Trial(2, "cpu", True, "bad", 64, ["device bytes in use grew by 64"])]
    summary = {"operations": [_faults.summarize("decomp.qr", "numpy", 2, trials)],
               "pool_limit": [{"op": "decomp.qr", "allocations": 0, "runs": ["cpu"],
                               "fell_back": True}],
               "environment": {"device": "Test GPU", "date": "today", "max_k": 40}}
    text = render(summary)
    assert "| `decomp.qr` | numpy | 2 | 2 | 1 | 1 | 1 | 1 |" in text
    assert "| **all** | 1 cases | **2** | **2** | **1** | **1** | **1** | **1** |" in text
    assert "grew by 64" in text and "Test GPU" in text and "LAPACK" in text


def test_the_page_holds_no_figures_until_a_gpu_run_wrote_it():
    import pathlib
    page = pathlib.Path(__file__).resolve().parents[2] / "docs" / "reliability" / "faults.md"
    text = page.read_text()
    assert "Not generated yet" in text or "Generated by `tests/runtime/test_faults_gpu.py`" in text
    if "Not generated yet" in text:
        assert "| " not in text  # no table of figures
