"""Where the blocks are and what crosses between workers: the data side of the scaling plan.

    python -m benchmarks.studies.dask_placement [--workers 2] [--gpu] [--cases rsvd,pca]
        [--json PATH]

Time is not measured here (``benchmarks.suites.dask`` does that); this module checks, on any number
of workers, the assumptions two-GPU scaling rests on (``docs/dask.md``, "Two GPUs: the scaling
plan"): that the input's row panels each land on one worker, that the input is split evenly,
and that a randomized SVD or PCA moves only thin matrices between workers. The inputs have the
block grid of ``benchmarks.suites.dask``'s GPU cases (its chunk counts per dimension) with small
blocks, so it runs on a CPU ``LocalCluster`` in seconds; the bytes moved by the thin matrices
depend on the column count and the sketch width, not on the rows, and are reported together
with the input's bytes at the GPU case's size.

Per implementation (gpulinalg's and ``svd_compressed``) a row gives ``moved_bytes`` (the sum of
the workers' incoming transfer logs over one run), ``moved_by`` (the same by task prefix),
``transfers``, ``moved_per_input`` (moved bytes over the input's bytes) and, for the input,
``panels_split`` (row panels whose blocks are on more than one worker) and
``input_share`` (each worker's fraction of the input's bytes).
"""

import argparse
import sys

import numpy as np

from benchmarks.suites import dask as bench
from benchmarks._harness import row, write_rows

SUITE = "dask_placement"
#: case -> (block grid of the GPU case, block shape here, GPU case name in ``bench.SIZES``)
GRIDS = {
    "rsvd": ((10, 4), (2_000, 200), "rsvd"),
    "rsvd_full": ((20, 4), (1_000, 250), "rsvd"),
    "pca": ((20, 1), (2_500, 100), "pca"),
    # the same matrix as "rsvd" chunked by row panels only: no panel can be split
    "rsvd_rows": ((10, 1), (2_000, 800), "rsvd"),
}


def _worker_logs(client, clear=False):
    def fetch(dask_worker, clear=clear):
        log = list(dask_worker.transfer_incoming_log)
        if clear:
            dask_worker.transfer_incoming_log.clear()
        return log
    return client.run(fetch)


def placement(client, x):
    """``(panels_split, input_share)`` of a persisted 2-D Dask array ``x``."""
    from distributed import futures_of
    futures = futures_of(x)
    who = client.who_has(futures)
    owner = {}
    for key, workers in who.items():
        owner[key] = sorted(workers)[0] if workers else None
    sizes = {}
    panels = {}
    for key, w in owner.items():
        _, i, j = key
        rows, cols = x.chunks[0][i], x.chunks[1][j]
        sizes[w] = sizes.get(w, 0) + rows * cols * x.dtype.itemsize
        panels.setdefault(i, set()).add(w)
    total = sum(sizes.values())
    split = sum(1 for ws in panels.values() if len(ws) > 1)
    share = sorted(round(v / total, 3) for v in sizes.values())
    return split, share


def moved(client, build):
    """Bytes that crossed between workers while ``build()``'s collections were persisted.

    A block fetched by another worker stays there as a replica while it is wanted, so a second
    run moves less than the first: the first run's figure is the one a fresh input pays, the
    second's what repeated calls on a persisted input pay (at the cost of the replicas)."""
    from dask.utils import key_split
    _worker_logs(client, clear=True)
    out = bench._persist(client, *build())
    logs = _worker_logs(client)
    by = {}
    n = 0
    for entries in logs.values():
        for e in entries:
            n += 1
            for key, nbytes in e["keys"].items():
                p = key_split(key)
                by[p] = by.get(p, 0) + int(nbytes or 0)
    del out
    return sum(by.values()), dict(sorted(by.items(), key=lambda kv: -kv[1])), n


def case(client, name, kind):

    from gpulinalg import decomp
    grid, block, gpu_case = GRIDS[name]
    shape = (grid[0] * block[0], grid[1] * block[1])
    dtype = "float32"
    data_case = "pca" if name == "pca" else "rsvd"
    x = None  # a fresh persisted input per implementation (the lambdas read it when called)
    k = 10
    if name == "pca":
        impls = {
            "gpulinalg.decomp.PCA": lambda: [_pca_components(decomp, x, k)],
            "dask svd_compressed(X - mean)": lambda: _theirs(x - x.mean(axis=0), k, kind)[1:],
        }
    else:
        impls = {
            "gpulinalg.decomp.truncated_svd": lambda: list(
                decomp.truncated_svd(x, k, n_iter=bench.N_ITER, n_oversamples=bench.OVERSAMPLES,
                                      random_state=0)),
            "dask.array.linalg.svd_compressed": lambda: _theirs(x, k, kind),
        }
    gpu_shape = bench.SIZES[gpu_case][0] if name != "rsvd_full" else bench.FULL["rsvd"][0]
    rows = []
    for impl, build in impls.items():
        x = bench._persist(client, bench.make(data_case, shape, block, dtype, kind))[0]
        split, share = placement(client, x)
        input_bytes = x.nbytes
        first, by, n = moved(client, build)  # a fresh input: no replicas yet
        total, _, _ = moved(client, build)  # again, with the first run's replicas
        rows.append(row(SUITE, name, impl, {}, grid=list(grid), shape=list(shape),
                        gpu_shape=list(gpu_shape), workers=len(client.scheduler_info()["workers"]),
                        chunk_kind=kind, panels=grid[0], panels_split=split, input_share=share,
                        input_bytes=int(input_bytes), moved_bytes=int(first),
                        moved_per_input=round(first / input_bytes, 4), transfers=n,
                        moved_bytes_again=int(total),
                        moved_by={p: int(b) for p, b in list(by.items())[:8]}))
    return rows


def _pca_components(decomp, x, k):
    import dask.array as da
    pca = decomp.PCA(k, svd_solver="randomized", random_state=0, iterated_power=bench.N_ITER,
                     n_oversamples=bench.OVERSAMPLES).fit(x)  # fit computes its attributes
    return da.from_array(np.asarray(pca.components_))


def _theirs(x, k, kind):
    import dask
    import dask.array as da
    with dask.config.set({"array.backend": kind}):  # its test matrix on the chunks' package
        return list(da.linalg.svd_compressed(x, k, n_power_iter=bench.N_ITER,
                                             n_oversamples=bench.OVERSAMPLES, seed=0))


def run(workers=2, gpu=False, cases=("rsvd", "pca")):
    from distributed import Client

    from gpulinalg.distributed import local_cluster
    kw = dict(n_workers=workers) if not gpu else {}
    if not gpu:
        kw.update(threads_per_worker=1, processes=True, dashboard_address=None)
    rows = []
    with local_cluster(gpu=gpu, **kw) as cluster, Client(cluster) as client:
        kind = "cupy" if gpu else "numpy"
        for name in cases:
            rows += case(client, name, kind)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.dask_placement")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--gpu", action="store_true", help="LocalCUDACluster, one worker per GPU")
    p.add_argument("--cases", default="rsvd,pca")
    p.add_argument("--json")
    args = p.parse_args(argv)
    rows = run(args.workers, args.gpu, tuple(args.cases.split(",")))
    for r in rows:
        print(f"{r['case']} {r['impl']}: workers={r['workers']} panels_split={r['panels_split']}"
              f"/{r['panels']} input_share={r['input_share']} moved={r['moved_bytes']} B"
              f" ({r['moved_per_input']:.2%} of the input) transfers={r['transfers']}"
              f" by={r['moved_by']}")
    if args.json:
        write_rows(args.json, rows, suite=SUITE, args=vars(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
