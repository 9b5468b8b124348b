"""The benchmark report step turns result JSON into Markdown (and PNG when matplotlib exists)."""

import json

from benchmarks import _harness
from benchmarks import report


def test_report_writes_table(tmp_path):
    rows = [_harness.row("dense", "128^3 fp16", "gpulinalg", {"median_s": 2e-5, "min_s": 1e-5,
                                                           "runs": 3}, tflops=0.2),
            _harness.absent("dense", "128^3 fp16", "torch", "not installed")]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"environment": {"date": "d", "gpus": []}, "rows": rows}))
    assert report.write([str(path)], str(tmp_path / "out")) == ["dense"]
    md = (tmp_path / "out" / "dense.md").read_text()
    assert "| 128^3 fp16 | gpulinalg | 0.02 |" in md and "not installed" in md


def test_time_cpu_counts_runs():
    calls = []
    t = _harness.time_cpu(lambda: calls.append(1), warmup=2, repeat=4)
    assert len(calls) == 6 and t["runs"] == 4 and 0 <= t["min_s"] <= t["median_s"]


def test_batched_rows_count_runs_from_a_warm_call(monkeypatch):
    """The first call (compiling kernels) is the row's cold time; the warm second one sets how
    many runs the median takes: a slow first call no longer leaves a fast row one run."""
    import time

    from benchmarks.suites import decomp_batched
    monkeypatch.setattr(_harness, "sync", lambda: None)
    budget = type("Budget", (), {"left": lambda self: 100.0})()
    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.3)  # the cold call
        return len(calls)
    timing_, out = decomp_batched._measured(fn, budget)
    assert timing_["cold_s"] >= 0.3 and timing_["runs"] == 30
    assert timing_["median_s"] < 0.3 and len(calls) == 2 + 1 + 30 and out == len(calls)


def test_grid_cases_leave_kernel_rows_to_the_kernels_section():
    """``--cases wide:1:4096,...`` names a kernel row: the grid took it for a call of its own
    (an SVD, timed under the name "wide") before."""
    from benchmarks.suites import decomp_batched
    picked = decomp_batched._pick_calls("wide:1:4096,solve_triangular:1:1024,svd:512:32",
                                        decomp_batched.GRID)
    assert picked == [("svd", 512, 32), ("solve_triangular", 1, 1024)]


def test_svdvals_summary_line_names_the_full_svd_road_and_the_values_error():
    from benchmarks.suites import decomp_batched
    case = "svdvals 4096x4096 float32"
    rows = [{"case": case, "impl": "ours", "median_s": 0.6, "values_err": 2e-7},
            {"case": case, "impl": "ours via full svd", "median_s": 0.3, "values_err": 1e-7},
            {"case": case, "impl": "cupy", "median_s": 0.9, "values_err": 3e-7},
            {"case": case, "impl": "torch", "median_s": 0.5, "values_err": 4e-7}]
    line, = decomp_batched.summary(rows)
    assert line == (f"{case}: ours 600 (via full svd 300) cupy 900 torch 500 ms x1.20 "
                    "err 2e-07/4e-07")
