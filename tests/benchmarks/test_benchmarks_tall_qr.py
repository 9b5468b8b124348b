"""``benchmarks.decomp_tall_qr``: a forced route is undone after its call (also when the call
raises), the summary puts ours against the best peer, and without a GPU the run says so in one
row; ``benchmarks._harness.stream_to`` writes each row as it is made."""

import json
import math

import pytest

from benchmarks import _harness
from benchmarks.suites import decomp_tall_qr
from gpulinalg import decomp
from gpulinalg.decomp._gpu import _batched_plan
from gpulinalg.decomp.qr import _cholqr_cuda


def test_forced_route_is_undone(monkeypatch):
    kept = _batched_plan.TALL_QR, _cholqr_cuda.GRAM_GEMM_MAX
    seen = []

    def fake_qr(a, mode):
        seen.append((_batched_plan.TALL_QR, _cholqr_cuda.GRAM_GEMM_MAX, mode))
        if a == "raise":
            raise RuntimeError("out of memory")
        return "result"
    monkeypatch.setattr(decomp, "qr", fake_qr)
    assert decomp_tall_qr._forced((1, math.inf), 0)("a") == "result"
    with pytest.raises(RuntimeError):
        decomp_tall_qr._forced((math.inf, 0))("raise")
    assert seen == [((1, math.inf), 0, "economic"), ((math.inf, 0), kept[1], "economic")]
    assert (_batched_plan.TALL_QR, _cholqr_cuda.GRAM_GEMM_MAX) == kept


def test_summary_ratio_against_the_best_peer():
    rows = [{"case": "qr 10x2 float64", "impl": "ours", "median_s": 0.002,
             "route": "cholesky_qr2", "backward_err": 1e-16, "ortho_err": 2e-16},
            {"case": "qr 10x2 float64", "impl": "cupy", "median_s": 0.005},
            {"case": "qr 10x2 float64", "impl": "torch", "median_s": 0.004}]
    (line,) = decomp_tall_qr.summary(rows)
    assert "x0.50" in line and "route cholesky_qr2" in line and line.startswith("qr 10x2")


def test_without_a_gpu_one_row_and_streamed(tmp_path, monkeypatch):
    import gpulinalg
    monkeypatch.setattr(gpulinalg, "gpu_available", lambda: False)
    monkeypatch.setattr(_harness, "emit", None)
    _harness.stream_to(str(tmp_path / "rows.jsonl"))
    rows = decomp_tall_qr.run([(100, 10, "float64")])
    assert len(rows) == 1 and rows[0]["absent"] in ("no GPU", "cupy not installed")
    streamed = [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert streamed == rows
