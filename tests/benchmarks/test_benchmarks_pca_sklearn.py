"""``benchmarks pca_sklearn``: on the CPU (``--cpu``, tiny shapes) our PCA and truncated SVD and
scikit-learn's are timed and agree (explained variance ratios within ``EVR_TOL``, singular
values to 1e-3), every GPU row is absent with a reason, the command writes its rows with the
environment, the report puts the suite's summary above its table; a step past the budget is an
absent row. On a GPU a small run measures every row of ours."""

import json

import numpy as np
import pytest

from benchmarks import report
from benchmarks.suites import pca_sklearn as suite

ARGS = ["--shapes", "2000x50:5", "--svd-shape", "3000x60:8", "--repeat", "1"]
GPU_IMPLS = {suite.COPY, suite.OURS_CP, suite.SK_XP, suite.BOUND,
             "cupy.asarray + gpulinalg truncated_svd", "gpulinalg TruncatedSVD (cupy in)"}


@pytest.fixture(scope="module")
def cpu_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("pca_sklearn") / "cpu.json"
    assert suite.main(["--cpu", *ARGS, "--json", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def cpu_run(cpu_path):
    with open(cpu_path) as f:
        return json.load(f)


def test_cpu_rows_are_timed_and_well_formed(cpu_run):
    rows = cpu_run["rows"]
    assert "environment" in cpu_run and all(r["suite"] == "pca_sklearn" for r in rows)
    timed = {(r["case"], r["impl"]): r for r in rows if "median_s" in r}
    assert set(timed) == {("numpy in 2000x50 k=5", suite.OURS_NP),
                          ("numpy in 2000x50 k=5", suite.SK_CPU),
                          ("truncated_svd numpy in 3000x60 k=8",
                           "gpulinalg truncated_svd (numpy in)"),
                          ("truncated_svd numpy in 3000x60 k=8", "sklearn randomized_svd (cpu)")}
    for r in timed.values():
        assert r["cold_s"] > 0 and r["median_s"] > 0 and r["runs"] >= 1
        assert r["dtype"] == "float32" and r["input"] == "numpy" and r["where"] == "cpu"
        assert r["shape"] in ("2000x50", "3000x60") and r["k"] in (5, 8) and r["solver"]
    for (_, impl), r in timed.items():
        if not impl.startswith("gpulinalg"):
            assert r["ours_speedup"] > 0 and r["target_speedup"] == suite.TARGET_SPEEDUP
            assert isinstance(r["meets"], bool)
    assert timed[("numpy in 2000x50 k=5", suite.OURS_NP)]["op"] == "decomp.pca_fit"


def test_cpu_accuracy_agrees_with_scikit_learn(cpu_run):
    rows = {r["impl"]: r for r in cpu_run["rows"] if "median_s" in r}
    sk = rows[suite.SK_CPU]
    assert sk["evr_within"] and sk["evr_diff"] <= suite.EVR_TOL
    assert rows["sklearn randomized_svd (cpu)"]["s_rel_diff"] <= 1e-3


def test_gpu_rows_are_absent_with_a_reason(cpu_run):
    gpu = [r for r in cpu_run["rows"] if r["impl"] in GPU_IMPLS]
    # per shape: the copy, 3 solvers x (ours, scikit-learn), the bound; per SVD shape: 2
    assert len(gpu) == 1 + 2 * len(suite.SOLVERS) + 1 + 2
    assert all(r["absent"] == "CPU run (--cpu)" for r in gpu)
    assert {r["solver"] for r in cpu_run["rows"] if "median_s" in r} == {"auto"}


def test_report_page_starts_with_the_summary(cpu_path, tmp_path):
    assert report.write([str(cpu_path)], str(tmp_path)) == ["pca_sklearn"]
    md = (tmp_path / "pca_sklearn.md").read_text()
    summary = md.index("| case | ours s | peer |")
    assert summary < md.index("| case | impl |")
    assert "| numpy in 2000x50 k=5 | " in md[summary:md.index("| case | impl |")]


def test_data_is_seeded_low_rank_float32():
    x = suite.make_data(3000, 60, block=1000)
    assert x.dtype == np.float32 and x.shape == (3000, 60)
    assert np.array_equal(x, suite.make_data(3000, 60, block=1000))
    s = np.linalg.svd(x - x.mean(0), compute_uv=False)
    assert s[suite.RANK] < 0.05 * s[0]  # the noise floor under the rank-40 signal
    assert suite.parse_shapes("2000x50:5,10X3:2") == ((2000, 50, 5), (10, 3, 2))


@pytest.mark.gpu
def test_small_gpu_run_measures_every_row_of_ours():
    rows = suite.run(shapes=((20000, 50, 5),), svd_shape=(30000, 60, 8), repeat=1)
    ours = [r for r in rows if r["impl"].startswith(("gpulinalg", "cupy.asarray"))
            and r["impl"] != "gpulinalg TruncatedSVD (cupy in)"]
    assert ours and not [r for r in ours if "absent" in r]
    assert all(r["where"] == "gpu" for r in ours if r["input"] == "cupy")
    (bound,) = [r for r in rows if r["impl"] == suite.BOUND]
    assert bound["GB_per_s"] > 0
