"""Repeats of a call decide once: the dispatcher's front door keeps a call's plan and GPU decision
under its key (the per-call hot path of dense for CUDA torch tensors and CuPy arrays), and dense's
memo entries that hold one."""

import numpy as np
import pytest

import gpulinalg
from gpulinalg._runtime import budget as _budget
from gpulinalg._runtime import device as _device
from gpulinalg import testing
from tests.support import fake_gpu as fakes
from gpulinalg._runtime.config import config_context, get_config
from gpulinalg._runtime import memo
from gpulinalg._runtime.dispatch import Op, dispatch


@pytest.fixture
def own_gpu(monkeypatch):
    """The machine's own GPU (no device provider), pretended: discovery, memory, device."""
    monkeypatch.setitem(_device._state, "probed", True)
    monkeypatch.setitem(_device._state, "gpus", (_device.GPUInfo(0, "pretend", (9, 0), 80 << 30),))
    monkeypatch.setitem(_device._state, "why_not", None)
    monkeypatch.setitem(_device._state, "disabled", None)
    monkeypatch.setattr(_device, "memory_info", lambda device=None: (64 << 30, 80 << 30))
    monkeypatch.setattr(_device, "_get_device", lambda: 0)
    monkeypatch.setattr(_budget, "_pool_limit_left", lambda: None)


class _Keyed:
    """One keyed call of the front door, as a memoized ``_api`` function makes it."""

    def __init__(self, calls, nbytes=1000, fail=False):
        def gpu(x):
            calls.append("gpu")
            if fail:
                raise ValueError("engine failed")
            return x + 1

        def cpu(x):
            calls.append("cpu")
            return x + 1
        self.key = ("test.repeat", id(self))
        self.op = Op("test.repeat", gpu, cpu, nbytes=nbytes, own_stream=False, convert=False)

    def __call__(self, x):
        return dispatch(lambda x: self.op._replace(args=(x,)), x, key=self.key, lead=(x,))

    @property
    def held(self):
        """Whether the memo keeps a GPU decision for the key."""
        kept = memo.lookup(self.key)
        return kept is not None and kept.dev is not None

    def swap_gpu(self, fn):
        self.op = self.op._replace(gpu_fn=fn)
        kept = memo.lookup(self.key)
        if kept is not None:
            kept.hold_op(kept.op._replace(gpu_fn=fn))


def test_a_kept_gpu_decision_runs_the_engine_at_once(own_gpu):
    calls, x = [], np.zeros(2)
    d = _Keyed(calls)
    with config_context(backend="gpu"):
        d(x)
        assert d.held and calls == ["gpu"]
        assert gpulinalg.last_run().backend == "gpu"
        out = d(x)
        rec = gpulinalg.last_run()
    assert calls == ["gpu", "gpu"] and np.array_equal(out, x + 1)
    assert rec.op == "test.repeat" and rec.backend == "gpu" and rec.device == 0
    assert rec.reason.endswith("(decided at the first call)") and not rec.fell_back


def test_other_settings_decide_afresh(own_gpu):
    calls, x = [], np.zeros(2)
    d = _Keyed(calls)
    with config_context(backend="gpu"):
        d(x)
    with config_context(backend="cpu"):
        d(x)
        assert gpulinalg.last_run().backend == "cpu"
    assert calls == ["gpu", "cpu"]


def test_a_disabled_gpu_and_providers_are_never_skipped(own_gpu):
    calls, x = [], np.zeros(2)
    d = _Keyed(calls)
    with config_context(backend="auto"):
        d(x)
        _device._state["disabled"] = "an injected sticky error"
        d(x)
        assert gpulinalg.last_run().backend == "cpu"
        testing.reset_gpu_state()
        with fakes.fake_gpu(), testing.inject_fault("oom", op="test.repeat"), \
                pytest.warns(gpulinalg.FallbackWarning):
            d(x)  # the provider's fault: the full road falls back
        assert gpulinalg.last_run().fell_back
    assert calls == ["gpu", "cpu", "cpu"]


def test_an_exception_of_a_repeat_goes_through_the_full_road(own_gpu):
    calls, x = [], np.zeros(2)
    d = _Keyed(calls)
    with config_context(backend="gpu"):
        d(x)
        d.swap_gpu(_Keyed(calls, fail=True).op.gpu_fn)
        with pytest.raises(ValueError, match="engine failed"):
            d(x)
        assert "raised" in gpulinalg.last_run().details
    assert calls == ["gpu", "gpu", "gpu"] and not d.held


def test_large_jobs_and_provider_runs_decide_every_time(own_gpu):
    calls, x = [], np.zeros(2)
    big = _Keyed(calls, nbytes=40 << 30)  # over a quarter of the free 64 GiB
    small = _Keyed(calls)
    with config_context(backend="gpu"):
        big(x)
        with fakes.fake_gpu():
            small(x)
    assert calls == ["gpu", "gpu"] and not big.held and not small.held


def test_memo_entries_serve_only_their_settings():
    torch = pytest.importorskip("torch")
    from gpulinalg.dense import _calls, matmul
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    _calls.clear()
    matmul(a, b)
    key = _calls.call_key(a, b, None, None, None, 1.0, 0.0, False, None, None)
    kept = _calls.lookup(key)
    assert kept.settings is get_config() and kept.tail[-1].autotune == "auto"
    with config_context(autotune=True):
        matmul(a, b)
        assert _calls.lookup(key).tail[-1].autotune is True  # planned again under the new settings
    assert gpulinalg.last_run().backend == "cpu"


@pytest.mark.parametrize("mode", ["cpu", "raise"])
def test_a_repeat_out_of_memory_falls_back_without_a_second_gpu_run(own_gpu, mode):
    """Out of memory in a repeat is handled as in a first call: the CPU run (fallback='cpu') or
    a MemoryError (fallback='raise'), recorded, and the GPU is not tried a second time."""
    calls, x = [], np.zeros(2)
    d = _Keyed(calls)
    with config_context(backend="gpu", fallback=mode):
        d(x)

        def oom(x):
            calls.append("gpu")
            raise MemoryError("out of memory")
        d.swap_gpu(oom)
        if mode == "cpu":
            with pytest.warns(gpulinalg.FallbackWarning):
                assert np.array_equal(d(x), x + 1)
            assert gpulinalg.last_run().fell_back and gpulinalg.last_run().backend == "cpu"
        else:
            with pytest.raises(MemoryError):
                d(x)
            assert "raised" in gpulinalg.last_run().details
    assert calls == ["gpu", "gpu"] + (["cpu"] if mode == "cpu" else []) and not d.held


@pytest.mark.parametrize("mode", ["cpu", "raise"])
def test_torch_out_of_memory_is_a_memory_error_to_the_dispatcher(fake_gpu, mode):
    """torch's caching allocator raises torch.OutOfMemoryError (a RuntimeError): the dispatcher
    falls back on it, or raises it as a MemoryError, as for CuPy's."""
    torch = pytest.importorskip("torch")

    def gpu(x):
        raise torch.OutOfMemoryError("CUDA out of memory")

    with gpulinalg.config_context(backend="gpu", fallback=mode):
        if mode == "cpu":
            with pytest.warns(gpulinalg.FallbackWarning):
                out = dispatch(Op("test.torch_oom", gpu, lambda x: x + 1, (np.zeros(2),)))
            assert np.array_equal(out, [1.0, 1.0]) and gpulinalg.last_run().fell_back
        else:
            with pytest.raises(MemoryError, match="torch's allocator") as info:
                dispatch(Op("test.torch_oom", gpu, lambda x: x + 1, (np.zeros(2),)))
            assert isinstance(info.value.__cause__, torch.OutOfMemoryError)
