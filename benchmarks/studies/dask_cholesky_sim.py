"""What W workers would give the blocked Cholesky of a Dask array: its task graph, each task's
time from the kernels measured here, and a list schedule on W workers.

    python -m benchmarks.studies.dask_cholesky_sim [--n 8192] [--tile 1024]
        [--workers 1,2,4,8] [--overhead-ms 1.0] [--gb-per-s 2.0] [--rates PATH] [--gpu]
        [--json PATH]

The graph is the one ``decomp.cholesky`` builds (``gpulinalg/decomp/cholesky/_cholesky_dask.py``)
for blocks of ``g`` tiles per column: the default (``T``, whole columns, on one worker; single
tiles, the shape of ``dask.array.linalg.cholesky``'s graph, on more), whole columns on every
worker count (the graph before blocks) and ``ceil(T / W)``. A task's time is its kernels'
time from per-tile rates measured once in this process (LAPACK/BLAS on one thread: ``potrf``
of a tile, ``trsm``, ``gemm`` and ``herk`` updates of a tile; with ``--gpu``, the Dask
engine's GPU tile tasks on this process's GPU: what W GPU workers would give) or read from
``--rates`` (a JSON of the same keys, e.g. the ``rates`` of an earlier ``--json``), plus
``--overhead-ms`` per task (the scheduler's and the worker's share). A dependency computed on
another worker costs its bytes at ``--gb-per-s`` before the task can start. Workers take the
ready task with the longest path to the end first (a list schedule: Dask's scheduler orders
by its own priorities, so the real run can only be slower or equal where the model is right).

Rows: ``median_s`` (the schedule's length), ``speedup`` over the default graph on one
worker, ``efficiency`` (speedup / W), ``critical_path_s`` (the longest chain, a bound no
worker count beats), ``tasks``. Measured 1- and 2-worker runs on a CPU ``LocalCluster``
are the check of the model (``docs/dask.md``).
"""

import argparse
import heapq
import json
import math
import time

import numpy as np

from benchmarks._harness import row, write_rows

SUITE = "dask_cholesky_sim"
KERNELS = ("potrf", "trsm", "gemm", "herk")


def measure_rates(tile, dtype=np.float64, repeat=3):
    """Seconds per tile of each kernel on this machine (SciPy's LAPACK, NumPy's BLAS)."""
    from gpulinalg.decomp._tiles import _tiles_host as tiles
    from gpulinalg.decomp.cholesky._cholesky_host import tile_potrf
    rng = np.random.default_rng(0)
    x = rng.standard_normal((tile, tile))
    spd = (x @ x.T + tile * np.eye(tile)).astype(dtype)
    low = np.linalg.cholesky(spd).astype(dtype)
    blocks = {"potrf": lambda: tile_potrf(spd.copy(), 0),
              "trsm": lambda: tiles.trsm_right(low, x.astype(dtype).copy()),
              "gemm": lambda: tiles.gemm_sub(x.astype(dtype).copy(), low, low),
              "herk": lambda: tiles.herk_sub(x.astype(dtype).copy(), low)}
    copy = min(_time(lambda: x.astype(dtype).copy()) for _ in range(repeat))
    rates = {}
    for name, fn in blocks.items():
        fn()
        rates[name] = max(min(_time(fn) for _ in range(repeat)) - (0 if name == "potrf" else
                                                                   copy), 0.0)
    return rates


def measure_rates_gpu(tile, dtype=np.float64, repeat=3):
    """Seconds per tile of each kernel of the Dask Cholesky's GPU tile tasks on this process's
    GPU (cuSOLVER ``potrf``, cuBLAS ``trsm``, ``gemm``, ``syrk``), each call synchronized."""
    import cupy

    from gpulinalg._runtime.streams import get_stream
    from gpulinalg.decomp._tiles import _tiles_cuda as tiles
    from gpulinalg.decomp.cholesky._cholesky_cuda import tile_potrf
    rng = cupy.random.default_rng(0)
    x = rng.standard_normal((tile, tile)).astype(dtype)
    spd = x @ x.T + tile * cupy.eye(tile, dtype=dtype)
    low = cupy.linalg.cholesky(spd)
    blocks = {"potrf": lambda: tile_potrf(spd, 0),
              "trsm": lambda: tiles.trsm_right(low, work),
              "gemm": lambda: tiles.gemm_sub(work, x, low),
              "herk": lambda: tiles.herk_sub(work, x)}
    rates = {}
    with get_stream() as stream:
        work = x.copy()
        for name, fn in blocks.items():
            fn()
            stream.synchronize()
            rates[name] = min(_time(lambda fn=fn: (fn(), stream.synchronize()))
                              for _ in range(repeat))
    return rates


def _time(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def graph(n, tile, group):
    """``(tasks, sizes)`` of ``decomp.cholesky``'s graph with blocks of ``group`` tiles:
    ``tasks[key] = (keys it waits for, {kernel: tiles})``, ``sizes[key]`` its output's bytes
    (float64)."""
    import dask.array as da
    from dask.core import get_dependencies

    from gpulinalg.decomp._tiles import _tiles_xp
    from gpulinalg.decomp._tiles._graph_dask import tiles_for
    from gpulinalg.decomp.cholesky import _cholesky_dask
    a = da.zeros((n, n), chunks=tile)
    t = a.numblocks[0]
    dsk, _ = _cholesky_dask._factor_graph(a, tiles_for(a), True, "sim", group=group)
    full = {**dict(a.__dask_graph__()), **dsk}
    height = _heights(dsk, t, group)
    tasks = {}
    for key, task in dsk.items():
        h = height.get(key, 1)
        if task[0] is _tiles_xp.factor_panel:
            cost = {"potrf": 1, "trsm": h - 1}
        elif task[0] is _tiles_xp.solve_block:
            cost = {"trsm": h}
        elif task[0] is _tiles_xp.update_block:  # its last argument: the block holds the diagonal
            cost = {"herk": 1, "gemm": h - 1} if task[-1] else {"gemm": h}
        else:
            cost = {}
        tasks[key] = ([d for d in get_dependencies(full, key) if d in dsk], cost)
    return tasks, {k: height.get(k, 1) * tile * tile * 8 for k in tasks}


def _heights(dsk, t, group):
    """Tiles in the block of each key: ``(name-upd, k, r, j)``, ``(name-T, r, k)``,
    ``(name-P, k)`` (as ``_cholesky_dask._factor_graph`` names them)."""
    def rows(r, j):
        return max(0, min(t, (r + 1) * group) - max(j, r * group))
    out = {}
    for key in dsk:
        tag = key[0].rsplit("-", 1)[-1]
        if tag == "upd":
            out[key] = rows(key[2], key[3])
        elif tag == "T":
            out[key] = rows(key[1], key[2])
        elif tag == "P":
            out[key] = rows(key[1] // group, key[1])
    return out


def schedule(tasks, sizes, rates, workers, overhead, gb_per_s):
    """Length of a list schedule of ``tasks`` on ``workers``; and the critical path."""
    dur = {k: overhead + sum(rates[kind] * m for kind, m in cost.items())
           for k, (_, cost) in tasks.items()}
    users = {k: [] for k in tasks}
    for k, (deps, _) in tasks.items():
        for d in deps:
            users[d].append(k)
    level = {}
    for k in _topological(tasks, users)[::-1]:
        level[k] = dur[k] + max((level[u] for u in users[k]), default=0.0)
    waiting = {k: len(deps) for k, (deps, _) in tasks.items()}
    done, where = {}, {}
    ready = [(-level[k], k) for k, w in waiting.items() if w == 0]
    heapq.heapify(ready)
    free = [(0.0, w) for w in range(workers)]
    heapq.heapify(free)
    while ready:
        _, k = heapq.heappop(ready)
        at, w = heapq.heappop(free)
        start = at
        for d in tasks[k][0]:
            arrive = done[d] + (0.0 if where[d] == w else sizes[d] / (gb_per_s * 1e9))
            start = max(start, arrive)
        done[k], where[k] = start + dur[k], w
        heapq.heappush(free, (done[k], w))
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (-level[u], u))
    return max(done.values(), default=0.0), max(level.values(), default=0.0)


def _topological(tasks, users):
    indeg = {k: len(deps) for k, (deps, _) in tasks.items()}
    order, stack = [], [k for k, d in indeg.items() if d == 0]
    while stack:
        k = stack.pop()
        order.append(k)
        for u in users[k]:
            indeg[u] -= 1
            if indeg[u] == 0:
                stack.append(u)
    return order


def run(n, tile, workers, overhead, gb_per_s, rates):
    """Rows for each graph shape and worker count (module docstring)."""
    t = math.ceil(n / tile)
    from gpulinalg.decomp.cholesky._cholesky_dask import row_group
    shapes = {"default": lambda w: row_group(t, w), "whole columns": lambda w: t,
              "blocks of T/W tiles": lambda w: math.ceil(t / w)}
    one, _ = schedule(*graph(n, tile, t), rates, 1, overhead, gb_per_s)  # the 1-worker default
    rows = []
    for shape, group_of in shapes.items():
        for w in workers:
            tasks, sizes = graph(n, tile, group_of(w))
            seconds, critical = schedule(tasks, sizes, rates, w, overhead, gb_per_s)
            rows.append(row(SUITE, f"cholesky {n}^2 tiles {tile}", shape, {"median_s": seconds},
                            workers=w, group=group_of(w), tasks=len(tasks),
                            critical_path_s=critical, speedup=one / seconds,
                            efficiency=one / seconds / w))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.dask_cholesky_sim")
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--tile", type=int, default=1024)
    p.add_argument("--workers", default="1,2,4,8")
    p.add_argument("--overhead-ms", type=float, default=1.0)
    p.add_argument("--gb-per-s", type=float, default=2.0)
    p.add_argument("--rates", help="JSON of seconds per tile: potrf, trsm, gemm, herk")
    p.add_argument("--gpu", action="store_true", help="measure the rates on this GPU")
    p.add_argument("--json")
    args = p.parse_args(argv)
    rates = json.load(open(args.rates)) if args.rates else \
        measure_rates_gpu(args.tile) if args.gpu else measure_rates(args.tile)
    print("seconds per tile:", {k: round(v, 5) for k, v in rates.items()})
    rows = run(args.n, args.tile, [int(w) for w in args.workers.split(",")],
               args.overhead_ms / 1e3, args.gb_per_s, rates)
    for r in rows:
        print(f"{r['impl']:18s} W={r['workers']:<2d} g={r['group']:<3d} tasks={r['tasks']:<4d} "
              f"{r['median_s']:8.3f} s  speedup {r['speedup']:5.2f}  efficiency "
              f"{r['efficiency']:5.2f}  critical path {r['critical_path_s']:.3f} s")
    if args.json:
        write_rows(args.json, rows, rates=rates, n=args.n, tile=args.tile,
                   overhead_s=args.overhead_ms / 1e3, gb_per_s=args.gb_per_s)


if __name__ == "__main__":
    main()
