"""``benchmarks gp_scale``: on the CPU (NumPy) at n = 2000 the matrix-free solver is within issue
43's tolerances of the Cholesky path and both are timed, GPyTorch an absent row; the command
writes its rows with the environment; a step that runs out of memory or past the budget is an
absent row, not a failure; the report puts the suite's summary above its table. On a GPU a
small run measures every row."""

import json

import pytest

from benchmarks import report
from benchmarks.suites import gp_scale


@pytest.fixture(scope="module")
def cpu_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("gp_scale") / "cpu.json"
    assert gp_scale.main(["--cpu", "--sizes", "2000", "--m", "200", "--repeat", "0",
                          "--json", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def cpu_run(cpu_path):
    with open(cpu_path) as f:
        return json.load(f)


def test_cpu_accuracy_within_the_issue_tolerances(cpu_run):
    (acc,) = [r for r in cpu_run["rows"] if r["case"].startswith("accuracy")]
    assert acc["within"] and acc["reference"] == "cholesky lml+grad"
    assert acc["mean_diff"] <= 1e-4 and acc["std_diff"] <= 1e-3 and acc["lml_diff"] <= 1e-3
    assert {k: acc[f"tol_{k}"] for k in ("mean", "std", "lml")} == gp_scale.TOLERANCES


def test_cpu_rows_time_both_solvers(cpu_run):
    rows = cpu_run["rows"]
    assert "environment" in cpu_run and all(r["suite"] == "gp_scale" for r in rows)
    timed = {(r["case"], r["impl"]): r for r in rows if "median_s" in r}
    for case in ("lml+grad n=2000", "fit+predict n=2000 m=200"):
        for impl in ("gpulinalg cg", "gpulinalg cholesky"):
            assert timed[(case, impl)]["where"] == "cpu"
    cg = timed[("lml+grad n=2000", "gpulinalg cg")]
    assert cg["cg_converged"] and cg["precond_rank"] == gp_scale.CG_OPTIONS["precond_rank"]
    (peer,) = [r for r in rows if r["impl"] == gp_scale.GPYTORCH]
    assert "absent" in peer


def test_report_page_starts_with_the_summary(cpu_path, tmp_path):
    assert report.write([str(cpu_path)], str(tmp_path)) == ["gp_scale"]
    md = (tmp_path / "gp_scale.md").read_text()
    summary = md.index("| n | lml+grad s: cg |")
    assert summary < md.index("| case | impl |") and "\n| 2000 | " in md
    assert "yes" in md[summary:md.index("| case | impl |")]


@pytest.mark.gpu
def test_small_gpu_run_measures_every_row():
    rows = gp_scale.run(sizes=(2000,), m=200, repeat=1, warmup_n=0)
    assert not [r for r in rows if "absent" in r and r["impl"] != gp_scale.GPYTORCH]
    (acc,) = [r for r in rows if r["case"].startswith("accuracy")]
    assert acc["within"], acc
    ours = [r for r in rows if r["impl"].startswith("gpulinalg") and "median_s" in r]
    assert ours and all(r["where"] == "gpu" and r["peak_gpu_GB"] > 0 for r in ours)
