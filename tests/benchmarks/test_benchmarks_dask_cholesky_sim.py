"""``benchmarks.studies.dask_cholesky_sim``: the blocked Cholesky's graph as ``decomp.cholesky``
builds it, and the list schedule that predicts its run on W workers."""

import pytest

pytest.importorskip("dask.array")

from benchmarks.studies import dask_cholesky_sim as sim  # noqa: E402

ONES = dict.fromkeys(sim.KERNELS, 1.0)


@pytest.mark.parametrize("t", [1, 4, 8])
def test_the_graph_has_the_tasks_and_kernel_work_of_each_block_height(t):
    whole, _ = sim.graph(100 * t, 100, t)
    tiles, _ = sim.graph(100 * t, 100, 1)
    assert len(whole) == t + t * (t - 1) // 2  # a factor per step, an update per column
    assert len(tiles) == t + t * (t - 1) // 2 + (t - 1) * t * (t + 1) // 6
    for tasks in (whole, tiles):  # the same kernels in all, whatever the blocks
        total = {k: sum(c.get(k, 0) for _, c in tasks.values()) for k in sim.KERNELS}
        assert total == {"potrf": t, "trsm": t * (t - 1) // 2, "herk": t * (t - 1) // 2,
                         "gemm": (t - 2) * (t - 1) * t // 6 if t > 1 else 0}


def test_a_schedule_is_bounded_by_the_work_and_the_critical_path():
    tasks, sizes = sim.graph(800, 100, 1)
    work = sum(sum(c.values()) for _, c in tasks.values())
    one, critical = sim.schedule(tasks, sizes, ONES, 1, 0.0, 1e9)
    assert one == pytest.approx(work)
    for w in (2, 4, 8):
        got, _ = sim.schedule(tasks, sizes, ONES, w, 0.0, 1e9)
        assert max(work / w, critical) - 1e-9 <= got <= one
    slow_links, _ = sim.schedule(tasks, sizes, ONES, 4, 0.0, 1e-6)
    assert slow_links > sim.schedule(tasks, sizes, ONES, 4, 0.0, 1e9)[0]


def test_a_chain_runs_end_to_end_and_independent_tasks_side_by_side():
    chain = {"a": ([], {"gemm": 1}), "b": (["a"], {"gemm": 2}), "c": (["b"], {"potrf": 1})}
    fan = {"a": ([], {"gemm": 1}), "b": ([], {"gemm": 1}), "c": ([], {"gemm": 1})}
    sizes = dict.fromkeys("abc", 0)
    assert sim.schedule(chain, sizes, ONES, 3, 0.5, 1.0) == (5.5, 5.5)
    assert sim.schedule(fan, sizes, ONES, 3, 0.0, 1.0)[0] == 1.0
    assert sim.schedule(fan, sizes, ONES, 2, 0.0, 1.0)[0] == 2.0


def test_the_rows_compare_the_graph_shapes():
    rows = sim.run(400, 100, [1, 2], 0.0, 1e9, ONES)
    assert {r["impl"] for r in rows} == {"default", "whole columns", "blocks of T/W tiles"}
    default = {r["workers"]: r for r in rows if r["impl"] == "default"}
    assert default[1]["group"] == 4 and default[2]["group"] == 1
    assert default[1]["speedup"] == pytest.approx(1.0) and default[2]["speedup"] > 1.2


@pytest.mark.gpu
def test_gpu_rates_are_measured_and_scheduled():
    rates = sim.measure_rates_gpu(256, repeat=2)
    assert set(rates) == set(sim.KERNELS)
    assert all(0 < v < 1.0 for v in rates.values()), rates
    rows = sim.run(1024, 256, [1, 2], 1e-4, 25.0, rates)
    assert rows and all(r["median_s"] > 0 for r in rows)
