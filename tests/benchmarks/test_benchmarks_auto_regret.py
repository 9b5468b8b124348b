"""``benchmarks auto_regret --quick`` on the CPU: every cell has timed ``cpu`` and ``auto`` rows
with the regret computed, the forced-GPU rows are absent with a reason where there is no GPU,
the no-CUDA check and the summary rows are there, and the report puts the summary above the
table; a cell past the budget is an absent row."""

import json

import pytest

from benchmarks import _harness, report
from benchmarks.suites import auto_regret as suite

gpulinalg = pytest.importorskip("gpulinalg")
NO_GPU = not gpulinalg.gpu_available()


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    out = tmp_path_factory.mktemp("auto_regret") / "quick.json"
    assert suite.main(["--quick", "--repeat", "2", "--json", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def rows(path):
    with open(path) as f:
        data = json.load(f)
    assert "environment" in data and all(r["suite"] == suite.SUITE for r in data["rows"])
    return data["rows"]


def test_every_cell_is_timed_with_its_regret(rows):
    cells = suite.cells(suite.QUICK_GRID)
    packages = ("numpy",) if NO_GPU else ("numpy", "cupy")
    auto = {r["case"]: r for r in rows if r["impl"] == "auto" and "absent" not in r}
    assert len(auto) == len(cells) * len(packages)
    assert {r["op"] for r in auto.values()} == set(suite.OPS)
    for r in auto.values():
        assert r["cold_s"] > 0 and r["median_s"] > 0 and r["runs"] == 2
        assert r["best_s"] > 0 and r["regret"] == pytest.approx(r["median_s"] / r["best_s"])
        assert r["best"] in ("cpu", "gpu") and r["auto_backend"] in ("cpu", "gpu")
        assert r["chose_best"] == (r["auto_backend"] == r["best"])
    cpu = [r for r in rows if r["impl"] == "cpu"]
    assert len(cpu) == len(auto) and all(r["median_s"] > 0 and r["ran"] == "cpu" for r in cpu)


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present")
def test_without_a_gpu_the_gpu_rows_are_absent_and_best_is_the_cpu(rows):
    gpu = [r for r in rows if r["impl"] == "gpu"]
    assert gpu and all(r["absent"].startswith("failed: GPUUnavailableError") for r in gpu)
    auto = [r for r in rows if r["impl"] == "auto" and "regret" in r]
    assert all(r["best"] == "cpu" and r["gpu_s"] is None and r["auto_backend"] == "cpu"
               and r["best_s"] == r["cpu_s"] for r in auto)
    (cupy,) = [r for r in rows if r["case"] == "cupy input (every cell)"]
    assert "no GPU" in cupy["absent"]


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present")
def test_no_cuda_check(rows):
    checks = {r["setting"]: r for r in rows if r["impl"] == "no-cuda check"}
    assert set(checks) == {"as installed", "CUDA packages not importable"}
    for r in checks.values():
        # import gpulinalg and backend="cpu" reach for nothing; no CUDA driver is loaded
        assert r["import_pulls"] == [] and r["cpu_calls_pull"] == []
        assert r["libcuda_loaded"] is False and r["auto_backends"] == ["cpu"]
        assert r["no_cuda"] == (not r["auto_pulls"] and not r["libcudart_loaded"])
    # without the CUDA packages auto only tries an import (its GPU probe) and runs on the CPU
    blocked = checks["CUDA packages not importable"]
    assert blocked["no_cuda"] is True and blocked["auto_module_count"] == 0
    assert set(blocked["tried_imports"]) <= {"cupy", "cupyx", "nvmath", "cuda"}
    # with them installed, what auto imported is reported, not hidden
    installed = checks["as installed"]
    assert installed["no_cuda"] == (installed["auto_module_count"] == 0)


def test_summary_row(rows):
    (s,) = [r for r in rows if r["impl"] == "summary"]
    regrets = [r["regret"] for r in rows if "regret" in r]
    assert s["cells"] == len(regrets) and s["worst_regret"] == max(regrets)
    assert s["over_bar"] == sum(x > suite.BAR for x in regrets)
    assert len(s["worst"]) == 5 and s["worst"][0]["regret"] == s["worst_regret"]
    assert [w["regret"] for w in s["worst"]] == sorted(regrets, reverse=True)[:5]


def test_report_page_starts_with_the_summary(path, tmp_path):
    assert report.write([str(path)], str(tmp_path)) == [suite.SUITE]
    md = (tmp_path / f"{suite.SUITE}.md").read_text()
    assert md.index("Worst regret") < md.index("| case | cpu ms |") < md.index("| case | impl |")


def test_a_cell_past_the_budget_is_an_absent_row(monkeypatch):
    monkeypatch.setattr(_harness, "emit", None)
    run = suite._Run(repeat=1, budget_s=-1)
    rows = suite.timed_rows(run, {"small": ((8, 8),)}, ("det",))
    spent = [r for r in rows if r["impl"] == "auto" and r["case"].startswith("det")]
    assert len(spent) == 2 and all("budget" in r["absent"] for r in spent)
