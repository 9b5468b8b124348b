"""FusedLinear's repeats on the CUDA torch path, counted on the CPU (the stubbed host harness of
``benchmarks.dense_torch_host``: CPU tensors pass for CUDA ones, plans are real plans whose
``cublasLtMatmul`` launch is a stand-in that counts): a training step, first layer included,
reuses its memo entries and plans (no plan made, no public-road call, no fresh dispatch
decision per step) and launches only the products asked for; the backward pass runs under the
forward's settings, also on another thread (torch's autograd worker thread for CUDA tensors)."""

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from benchmarks.suites import dense_torch_host as harness  # noqa: E402
from gpulinalg import config_context, get_config  # noqa: E402
from gpulinalg._runtime import memo as _memo  # noqa: E402
from gpulinalg.dense import _linear_torch, _plans_cuda  # noqa: E402
from gpulinalg.dense import plan_cache_info  # noqa: E402


def _launches():
    return sum(getattr(p, "launches", 0) for p in _plans_cuda._cache.plans.values())


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("first", [False, True], ids=["inner", "first-layer"])
def test_step_reuses_its_memo_and_plans(activation, first):
    ours, _, x, grad = harness._layers(8, 16, activation)
    x.requires_grad_(not first)
    step = harness._step(ours, x, grad)
    with harness.stand_in():
        step()
        step()  # the first step's keys, then the repeats' (the output gradient's alignment)
        memo, before, launched = len(_memo.entries()), plan_cache_info(), _launches()
        steps = 5
        with harness.SlowRoads() as counts:
            for _ in range(steps):
                step()
        after = plan_cache_info()
        assert counts == {"plans_made": 0, "public_calls": 0, "full_dispatches": 0}
        assert len(_memo.entries()) == memo
        assert after.misses == before.misses and after.size == before.size
        # forward, grad_W (+ grad_b from its epilog), and grad_x unless it is a first layer
        assert (_launches() - launched) == steps * (2 if first else 3)
        assert (x.grad is None) == first
        assert ours.weight.grad is not None and ours.bias.grad is not None


def test_backward_runs_under_the_forward_settings(monkeypatch):
    """A backward pass on another thread (where the forward's config_context is not in force)
    sees the forward's settings object (the fused route on CPU tensors)."""
    monkeypatch.setattr(_linear_torch, "on_torch_cpu", lambda: False)
    seen = []
    inner = _linear_torch._backward

    def spy(*args):
        seen.append(get_config())
        return inner(*args)
    layer = _linear_torch.FusedLinear(16, 8, activation="gelu", dtype=torch.float64)
    x = torch.randn(4, 16, dtype=torch.float64, requires_grad=True)
    _linear_torch._backward = spy
    try:
        with config_context(autotune=True) as settings:
            out = layer(x)
        worker = threading.Thread(target=out.backward, args=(torch.ones_like(out),))
        worker.start()
        worker.join()
        layer(x).backward(torch.ones(4, 8, dtype=torch.float64))  # same thread, default
    finally:
        _linear_torch._backward = inner
    assert seen[0] is settings and seen[1] is get_config()
    assert get_config() is not settings
    assert x.grad is not None


def test_inference_repeat_is_one_launch_without_a_node():
    """Under ``torch.no_grad`` a repeat call on the CUDA path is the memoized product alone:
    one launch, no plan made, no public-road call, no fresh dispatch, no autograd node."""
    ours, _, x, _ = harness._layers(8, 16, "gelu")
    with harness.stand_in(), torch.no_grad():
        ours(x)
        before = _launches()
        with harness.SlowRoads() as slow:
            y = ours(x)
        assert _launches() - before == 1 and y.grad_fn is None
        assert slow == {"plans_made": 0, "public_calls": 0, "full_dispatches": 0}


def test_measure_parts_names_every_part():
    parts = harness.measure_parts(calls=3, runs=1)
    assert {"engine launch", "FusedLinear forward", "FusedLinear forward, no grad",
            "empty autograd.Function", "torch nn.Linear + ReLU forward"} <= set(parts)
    assert all(0 < us < float("inf") for us in parts.values())


@pytest.mark.parametrize("make", ["linear", "mlp"])
def test_numpy_input_is_a_clear_type_error(make):
    from gpulinalg.dense import FusedLinear, FusedMLP
    layer = FusedLinear(4, 3) if make == "linear" else FusedMLP([4, 3, 2])
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer(np.ones((2, 4), dtype=np.float32))
