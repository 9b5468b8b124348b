"""``benchmarks.dense_torch``'s ``tflops_kernels`` section runs on a CPU-only torch (``--quick``):
per activation, ours with the heuristic's plan, ours autotuned and torch, each row with its
rate, its kernels (none without CUDA) and, for ours, the first call."""

import pytest

pytest.importorskip("torch")

from benchmarks.suites import dense_torch  # noqa: E402


def test_tflops_kernels_rows_on_the_cpu():
    rows = dense_torch.run(quick=True, sections=("tflops_kernels",))
    cases = sorted({r["case"] for r in rows})
    assert cases == [f"tflops kernels 64^3 float32 bias+{act}" for act in ("gelu", "relu")]
    for case in cases:
        got = {r["impl"]: r for r in rows if r["case"] == case}
        assert set(got) == {"gpulinalg heuristic", "gpulinalg autotuned",
                            "torch _addmm_activation"}
        assert all(r["tflops"] > 0 and r["kernels"] == [] for r in got.values())
        assert got["torch _addmm_activation"]["cold_first_call_s"] is None
        assert got["gpulinalg autotuned"]["cold_first_call_s"] > 0
    lines = dense_torch.summarize(rows)
    assert len(lines) == 6 and all("TFLOP/s" in line for line in lines)
    assert sum("gpulinalg autotuned" in line for line in lines) == 2
