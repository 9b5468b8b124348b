"""``benchmarks.dense_torch_steps``: its Python-level reference layer computes what
``nn.Linear`` + ReLU computes; the ``phases`` rows on a CPU-only torch (both autograd threading
settings, put back afterwards); on a GPU the ``graphed`` rows (replays match eager steps) and
the ``wgrad`` rows (kernels listed)."""

import pytest

torch = pytest.importorskip("torch")

from benchmarks.suites import dense_torch_steps as steps  # noqa: E402


def test_python_reference_layer_matches_linear_relu():
    torch.manual_seed(0)
    linear = torch.nn.Linear(6, 5, dtype=torch.float64)
    model = steps.TorchKernelsLinear(linear)
    x = torch.randn(7, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(model, (x,))
    g = torch.randn(7, 5, dtype=torch.float64)
    model(x).backward(g)
    got = [t.grad.clone() for t in (x, linear.weight, linear.bias)]
    for t in (x, linear.weight, linear.bias):
        t.grad = None
    torch.relu(linear(x)).backward(g)
    for a, t in zip(got, (x, linear.weight, linear.bias)):
        torch.testing.assert_close(a, t.grad)


def test_phase_rows_on_the_cpu():
    before = torch.autograd.is_multithreading_enabled()
    rows = steps.run(quick=True, sections=("phases",))
    assert torch.autograd.is_multithreading_enabled() is before
    assert len(rows) == 6
    for threads in ("on", "off"):
        got = {r["impl"]: r for r in rows if r["case"].endswith(threads)}
        assert set(got) == {steps.OURS, steps.TORCH, steps.PYTHON}
        for r in got.values():
            assert r["fwd_host_us"] > 0 and r["bwd_host_us"] > 0
            # a step holds its forward and its backward
            assert r["step_us"] >= 0.5 * (r["fwd_host_us"] + r["bwd_host_us"])
            assert r["runs"] == 3 and r["steps_per_sample"] == 5
    assert len(steps.summarize(rows)) == 6


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU-less answer")
def test_graphed_compiled_wgrad_and_floor_need_cuda():
    rows = steps.run(quick=True, sections=("graphed", "compiled", "wgrad", "floor"))
    assert [r.get("absent") for r in rows] == ["no CUDA device"] * 4


@pytest.mark.gpu
def test_gpu_graphed_replays_match_eager_steps():
    rows = steps.run(quick=True, sections=("graphed",))
    timed = [r for r in rows if "us" in r]
    assert {r["impl"] for r in timed} == {steps.OURS, steps.TORCH}
    for r in timed:
        assert r["us"] > 0 and r["replay_vs_eager_max_abs"] <= 1e-5
    (ratio,) = [r for r in rows if "ratio" in r]
    assert ratio["ratio"] > 0


@pytest.mark.gpu
def test_gpu_wgrad_rows_list_the_kernels():
    rows = steps.run(quick=True, sections=("wgrad",))
    assert len(rows) == 4  # three forms, one algorithm each, and torch
    for r in rows:
        assert r["kernels"] and r["us"] > 0
        assert all(c >= 1 and t > 0 for _, c, t in r["kernels"])
    assert len(steps.summarize(rows)) == 4


@pytest.mark.gpu
def test_gpu_compiled_reduce_overhead_steps_match_eager():
    rows = steps.run(quick=True, sections=("compiled",))
    timed = [r for r in rows if "us" in r]
    assert {r["impl"] for r in timed} == {steps.OURS, steps.TORCH}
    for r in timed:  # float32, 16 x 32: compiled and eager gradients agree closely
        assert r["us"] > 0 and r["cold_first_call_s"] > 0
        assert r["compiled_vs_eager_max_abs"] <= 1e-4


@pytest.mark.gpu
def test_gpu_floor_rows_time_both_steps_and_the_bare_products():
    rows = steps.run(quick=True, sections=("floor",))
    timed = {r["impl"]: r for r in rows if "us" in r}
    assert set(timed) == {steps.OURS, steps.TORCH, steps.PRODUCTS}
    assert all(r["us"] > 0 for r in timed.values())
    assert timed[steps.PRODUCTS]["eager"] is False and timed[steps.OURS]["eager"] is True
    ratios = {r["impl"]: r["ratio"] for r in rows if "ratio" in r}
    assert set(ratios) == {"ratio ours/torch", "ratio products/torch"}
    # the graphed products are a part of torch's eager step: less time than all of it
    assert 0 < ratios["ratio products/torch"] < 1
    assert len(steps.summarize(rows)) == 5
