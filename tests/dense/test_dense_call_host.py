"""The public per-call road of ``matmul`` on the CPU, with stand-in C calls
(``benchmarks.dense_torch_host.stand_in``: CPU tensors pass for CUDA ones;
``benchmarks.dense_overhead.cupy_stand_in``: CuPy arrays over host memory): the key is
``_calls.call_key``'s, a repeat makes no plan, no full dispatch, no CuPy object on the torch
road, binds no unchanged epilog pointer, and an input that changed is validated again (the
same errors as on a first call)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from benchmarks.suites import dense_overhead  # noqa: E402
from benchmarks.suites import dense_torch_host as harness  # noqa: E402
from gpulinalg import last_run  # noqa: E402
from gpulinalg._runtime import dispatch  # noqa: E402
from gpulinalg.dense import _calls, _matmul_api, _plans_cuda, _tensors_cuda, matmul  # noqa: E402


def _counting(monkeypatch):
    counts = {"plans": 0, "dispatch": 0}

    def wrap(owner, name, what):
        inner = getattr(owner, name)

        def counted(*args, **kwargs):
            counts[what] += 1
            return inner(*args, **kwargs)
        monkeypatch.setattr(owner, name, counted)
    wrap(_plans_cuda, "_insert", "plans")
    wrap(dispatch, "_decide_and_run", "dispatch")  # the full road: a fresh decision
    return counts


def _tensors(m=8, k=16, n=16, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(m, k, generator=g, dtype=dtype), torch.randn(k, n, generator=g,
                                                                      dtype=dtype),
            torch.randn(n, generator=g, dtype=dtype))


def test_the_key_is_call_keys():
    """``_matmul_api._key`` builds ``_calls.call_key``'s tuple (FusedLinear finds matmul's
    entries by the latter), conjugate bits of complex tensors included."""
    a, b, bias = _tensors()
    z = torch.randn(4, 4, dtype=torch.complex64)
    p = torch.nn.Parameter(b.clone())
    cases = [(a, b, bias, None), (a, b, None, None), (a, p, bias, None), (a, b.t(), None, a),
             (z, z.conj(), None, None), (z.conj(), z, z[0].conj(), None), (a, b, [1.0], None),
             (a, np.ones((16, 16)), None, None), (np.ones((2, 2)), np.ones((2, 2)), None, None)]
    for x, y, v, c in cases:
        for opts in (("relu", 1.0, 0.0, False, None, None), (None, 2, 1.0, True, "tf32", True)):
            assert _matmul_api._key(x, y, v, c, *opts) == _calls.call_key(x, y, v, c, *opts)
    assert _matmul_api._key(z, z.conj(), None, None, None, 1.0, 0.0, False, None, None) != \
        _matmul_api._key(z, z, None, None, None, 1.0, 0.0, False, None, None)


def test_the_key_is_call_keys_for_cupy_arrays():
    pytest.importorskip("cupy")
    a, b, bias = (dense_overhead.cupy_array(x.numpy()) for x in _tensors())
    c = dense_overhead.cupy_array(np.ones((8, 16)))
    t = _tensors()[0]
    _calls.call_key(a, b, None, None, None, 1.0, 0.0, False, None, None)  # resolves cupy.ndarray
    for x, y, v, w in [(a, b, bias, None), (a, b, None, None), (a, b, bias, c), (a, b, t, None),
                       (a, b.T, None, None), (a, t, None, None), (a[1:], b, bias[1:], None)]:
        for opts in (("gelu", 1.0, 0.0, True, None, None), (None, 1 + 0j, 2, False, "tf32", 1)):
            assert _matmul_api._key(x, y, v, w, *opts) == _calls.call_key(x, y, v, w, *opts)


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("aux", [False, True])
def test_torch_repeats_take_the_short_road(monkeypatch, activation, with_bias, aux):
    a, b, bias = _tensors()
    bias = bias if with_bias else None
    with harness.stand_in():
        first = matmul(a, b, bias=bias, activation=activation, return_aux=aux)
        counts = _counting(monkeypatch)

        def no_cupy(*args, **kwargs):
            raise AssertionError("a CuPy object on the torch repeat road")
        monkeypatch.setattr(_tensors_cuda, "_view", no_cupy)
        monkeypatch.setattr(_tensors_cuda, "_OnTorchStream", no_cupy)
        for _ in range(3):
            res = matmul(a, b, bias=bias, activation=activation, return_aux=aux)
            rec = last_run()
            assert rec.backend == "gpu" and rec.reason.endswith("(decided at the first call)")
    assert counts == {"plans": 0, "dispatch": 0}
    out = res[0] if aux else res
    ref = first[0] if aux else first
    assert type(out) is torch.Tensor and out.shape == ref.shape and out.dtype == ref.dtype
    assert out.stride() == ref.stride()
    if aux:
        assert (res[1] is None) == (activation is None)


def test_cupy_repeats_take_the_short_road(monkeypatch):
    pytest.importorskip("cupy")
    a, b, bias = (dense_overhead.cupy_array(x.numpy()) for x in _tensors())
    with dense_overhead.cupy_stand_in():
        matmul(a, b, bias=bias, activation="gelu")
        counts = _counting(monkeypatch)
        out = matmul(a, b, bias=bias, activation="gelu")
        assert last_run().reason.endswith("(decided at the first call)")
    assert counts == {"plans": 0, "dispatch": 0}
    assert type(out) is type(a) and out.shape == (8, 16)


def _error(fn):
    with pytest.raises((TypeError, ValueError)) as info:
        fn()
    return type(info.value), str(info.value)


def test_changed_inputs_are_validated_again():
    """After repeats, an input whose dtype, shape, package or layout changed raises what a
    first call raises (or runs, for a new valid layout), as without the memo."""
    a, b, bias = _tensors()
    bad = {
        "dtype": lambda: matmul(a, b.double(), bias=bias, activation="relu"),
        "shape": lambda: matmul(a, b[:8], bias=bias, activation="relu"),
        "bias shape": lambda: matmul(a, b, bias=bias[:4], activation="relu"),
        "package": lambda: matmul(a, b.numpy(), bias=bias, activation="relu"),
        "activation": lambda: matmul(a, b, bias=bias, activation="tanh"),
        "complex activation": lambda: matmul(a.cfloat(), b.cfloat(), activation="relu"),
    }
    fresh = {}
    for name, fn in bad.items():
        _calls.clear()
        fresh[name] = _error(fn)
    with harness.stand_in():
        for _ in range(3):
            matmul(a, b, bias=bias, activation="relu")
        for name, fn in bad.items():
            assert _error(fn) == fresh[name], name
            matmul(a, b, bias=bias, activation="relu")
        # new strides and contiguity: a new key, validated and planned, then repeated
        for x, y in ((a.t().contiguous().t(), b), (a, b.t().contiguous().t()), (a[:, ::2], b[::2])):
            for _ in range(2):
                out = matmul(x, y, bias=bias, activation="relu")
                assert out.shape == (8, 16) and last_run().backend == "gpu"


def test_a_launch_with_the_pointers_of_the_last_sets_no_attribute():
    plan = harness._StandInPlan(16, 8, torch.float32, "GELU_AUX_BIAS")
    writes = []
    plan.set_attribute = lambda desc, attr, buf, size: writes.append(attr)
    for ptrs in ((64, 128), (64, 128), (64, 256), (64, 256), (512, 256)):
        plan.execute(1, 2, 0, 1.0, 0.0, ptrs, 3, 0, 0)
    bias_attr, aux_attr = plan.pointers
    assert writes == [bias_attr, aux_attr, aux_attr, bias_attr]
    plan.bound.clear()  # forgotten (benchmarks.dense does so around nvmath's own execute)
    plan.execute(1, 2, 0, 1.0, 0.0, (512, 256), 3, 0, 0)
    assert writes[-2:] == [bias_attr, aux_attr] and plan.launches == 6


def test_the_breakdown_times_every_step_on_the_short_road():
    """``benchmarks.dense_overhead.breakdown`` (steps interleaved, the repeat controls) runs
    on the harness: every step timed, no full dispatch in its timed loops, the decision held,
    and the dispatcher patched back."""
    real = dispatch.dispatch
    for kind in ("torch", "cupy") if dense_overhead._have_cupy() else ("torch",):
        info = {}
        steps = dense_overhead.breakdown(kind, calls=5, rounds=2, info=info)
        assert info["full_dispatches"] == 0 and info["decision_held"] is True
        assert {"whole call", "repeat + engine", "engine", "repeat around a no-op engine",
                "perf_counter", "repeat (without the engine)"} <= set(steps)
        assert all(v == v and abs(v) < float("inf") for v in steps.values())
        if kind == "torch":
            assert "engine: Plan.execute" in steps
    assert dispatch.dispatch is real


def test_a_launch_allocates_its_workspace_per_call_and_keeps_none():
    """A plan with a workspace: each launch takes one of the plan's size from torch's allocator
    and passes its pointer to cuBLASLt, and the plan keeps none (under a CUDA graph every
    allocation of a call belongs to the graph's memory pool)."""
    plan = harness._StandInPlan(16, 8, torch.float32, "RELU_BIAS")
    plan.ws_size = 256
    seen, made = [], []
    plan.launch = lambda *args: seen.append(args[13])  # the workspace pointer

    def empty(shape, strides, dtype, device):
        made.append(torch.empty_strided(shape, strides, dtype=dtype, device=device))
        return made[-1]
    saved, saved_empty = list(_tensors_cuda._mods()), list(_tensors_cuda._empty)
    _tensors_cuda._torch[:] = [torch, lambda dev: 0, torch.uint8]
    _tensors_cuda._empty[:] = [empty]
    try:
        run = _tensors_cuda._Launch(plan, True)
        dev = torch.device("cpu")
        for stream in (7, 7, 9):
            out, bufs = run.launch(1, 2, (3,), 1.0, dev, stream)
            assert out.shape == (8, 16) and bufs == ()
    finally:
        _tensors_cuda._torch[:] = saved
        _tensors_cuda._empty[:] = saved_empty
    workspaces = [t for t in made if t.dtype == torch.uint8]
    assert [t.shape for t in workspaces] == [(256,)] * 3
    assert seen == [t.data_ptr() for t in workspaces]
    assert not hasattr(plan, "torch_ws")
