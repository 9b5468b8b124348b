"""``benchmarks.suites.dask --cpu-scaling``: CPU strong scaling on worker processes, end to end
at tiny sizes (workers 1 and 2): every case's rows carry the worker count, one BLAS thread per
worker and a positive, finite speed-up and efficiency against one worker; and the arithmetic of
``add_scaling`` on rows made by hand."""

import json
import math

import pytest

pytest.importorskip("dask.array")
pytest.importorskip("distributed")

from benchmarks.suites import dask as bench  # noqa: E402

TINY = {  # a few row chunks per worker, as the real table has
    "qr": ((40_000, 16), (5_000, 16), "float32", None),
    "rsvd": ((20_000, 100), (2_500, 100), "float32", None),
    "cholesky": ((256, 256), (64, 64), "float64", None),
}


@pytest.fixture(scope="module")
def scaling_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("dask_scaling") / "rows.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench, "CPU_SCALING", TINY)
        assert bench.main(["--cpu-scaling", "1,2", "--repeat", "1", "--json", str(path)]) == 0
    with open(path) as f:
        return json.load(f)["rows"]


def test_every_case_and_implementation_is_timed_on_each_worker_count(scaling_run):
    assert [r for r in scaling_run if "absent" in r] == []
    timed = [r for r in scaling_run if r.get("median_s")]
    got = {(r["case"], r["impl"], r["workers"]) for r in timed}
    impls = {(r["case"], r["impl"]) for r in timed}
    assert {c for c, _ in impls} == set(TINY) and len(impls) == 6
    assert got == {(c, i, w) for c, i in impls for w in (1, 2)}


def test_the_rows_carry_workers_processes_and_one_blas_thread(scaling_run):
    for r in scaling_run:
        assert r["workers"] in (1, 2) and r["processes"] is True
        assert r["threads_per_worker"] == 1
        assert r["blas_threads"] in (1, None)  # None: threadpoolctl not installed
    assert {r["k"] for r in scaling_run if r["case"] == "rsvd" and "k" in r} == {20}
    assert {r["mode"] for r in scaling_run if r["case"] == "qr"} == {"r"}
    assert max(r["gram_rel_err"] for r in scaling_run if r["case"] == "qr") < 1e-4


def test_speedup_and_efficiency_are_against_one_worker(scaling_run):
    for r in (r for r in scaling_run if r.get("median_s")):
        for key in ("speedup", "scaling_efficiency"):
            assert math.isfinite(r[key]) and r[key] > 0
        assert r["scaling_base_workers"] == 1
        assert r["scaling_efficiency"] == pytest.approx(r["speedup"] / r["workers"], abs=2e-3)
        if r["workers"] == 1:
            assert r["speedup"] == r["scaling_efficiency"] == 1.0


def test_add_scaling_compares_each_series_with_its_fewest_workers():
    def row(impl, w, t):
        return {"case": "qr", "impl": impl, "shape": [8, 2], "workers": w, "median_s": t}
    rows = [row("a", 4, 1.0), row("a", 2, 1.5), row("b", 2, 3.0), row("b", 8, 1.0),
            {"case": "qr", "impl": "probe", "workers": 2}, row("one device", 0, 1.0)]
    bench.add_scaling(rows)
    a4, a2, b2, b8, probe, one = rows
    assert a2["speedup"] == b2["speedup"] == 1.0 and a2["scaling_base_workers"] == 2
    assert a4["speedup"] == 1.5 and a4["scaling_efficiency"] == 0.75  # 2 x 1.5 / (4 x 1)
    assert b8["speedup"] == 3.0 and b8["scaling_efficiency"] == 0.75  # 2 x 3 / (8 x 1)
    assert "speedup" not in probe and "speedup" not in one
    table = bench.scaling_table(rows).splitlines()
    assert "efficiency" in table[0] and len(table) == 5
