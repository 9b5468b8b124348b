"""The benchmark report step turns result JSON into Markdown (and PNG when matplotlib exists)."""

import json

from benchmarks import report, timing


def test_report_writes_table(tmp_path):
    rows = [timing.row("dense", "128^3 fp16", "gpulinalg", {"median_s": 2e-5, "min_s": 1e-5,
                                                           "runs": 3}, tflops=0.2),
            timing.absent("dense", "128^3 fp16", "torch", "not installed")]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"environment": {"date": "d", "gpus": []}, "rows": rows}))
    assert report.write([str(path)], str(tmp_path / "out")) == ["dense"]
    md = (tmp_path / "out" / "dense.md").read_text()
    assert "| 128^3 fp16 | gpulinalg | 0.02 |" in md and "not installed" in md


def test_time_cpu_counts_runs():
    calls = []
    t = timing.time_cpu(lambda: calls.append(1), warmup=2, repeat=4)
    assert len(calls) == 6 and t["runs"] == 4 and 0 <= t["min_s"] <= t["median_s"]
