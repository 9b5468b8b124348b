"""Dask suite (issue 17): gpulinalg's Dask engines against Dask's own on the same cluster and
chunks, and against single-GPU gpulinalg / torch for the blocked Cholesky.

Run as a module (``import dask`` inside would find this file if run by path)::

    python -m benchmarks.suites.dask [--workers N] [--cpu] [--quick] [--full] [--json PATH]
                              [--cases qr,pca,rsvd,cholesky] [--repeat R]
    python -m benchmarks.suites.dask --cpu-scaling 1,2,4,8 [--cases qr,rsvd,cholesky]
                              [--repeat R] [--json PATH]

One ``LocalCUDACluster`` worker per GPU (``--workers N``: the first N GPUs) with CuPy chunks, or
with ``--cpu`` a ``LocalCluster`` with NumPy chunks (the smoke run of a machine without a GPU).
Inputs are generated on the workers and persisted before timing, so every timed run reads them
from worker memory; each timed run persists its results (nothing large comes back to the
client) and waits. Rows: cold (first call: graph building, kernels' first use) and warm median;
``input_GBps`` = input bytes x passes over the input / warm median; ``comm_fraction`` =
transfer time / wall time of one warm run from the scheduler's task stream (0 on one worker).

Default sizes are scaled to fit one H200 in about two minutes (rows say ``scaled_from`` where
the issue's size is larger): randomized SVD 1M x 8k fp32 (issue: 1M x 20k, 80 GB), tall QR
20M x 100 fp32 and PCA 5M x 1000 fp32 (the issue's sizes), Cholesky n = 32768 fp64 (issue:
65536). ``--full`` asks for the issue's sizes.

``--cpu-scaling 1,2,4,8`` is CPU strong scaling: for each count a ``LocalCluster`` of that many
worker processes, one thread and one BLAS thread each, NumPy chunks, the sizes of
``CPU_SCALING`` (rank 20 for the randomized SVD, R only for the tall QR); rows carry
``workers``, and ``speedup`` and ``scaling_efficiency`` (t_1 / (w t_w)) against the fewest
workers of the list.
"""

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time

import numpy as np

from benchmarks import _harness

NOTES = ("Sizes are scaled to one GPU and a short run where a row has scaled_from (the issue's "
         "size). Two GPUs: run `python -m benchmarks.suites.dask --workers 2` on a two-GPU machine "
         "(one LocalCUDACluster worker per GPU, the same chunks); the issue's target is >= 1.8x "
         "one GPU for the randomized SVD. comm_fraction is 0 by construction on one worker.")
K = 10  # rank of the randomized SVD and PCA
N_ITER = 2  # power iterations, both sides
OVERSAMPLES = 10

SIZES = {  # case: (shape, chunks, dtype, issue shape) -- GPU default
    "qr": ((20_000_000, 100), (1_000_000, 100), "float32", None),
    "pca": ((5_000_000, 1000), (250_000, 1000), "float32", None),
    "rsvd": ((1_000_000, 8_000), (100_000, 2_000), "float32", (1_000_000, 20_000)),
    "cholesky": ((32768, 32768), (4096, 4096), "float64", (65536, 65536)),
}
QUICK = {
    "qr": ((2_000_000, 100), (250_000, 100), "float32", (20_000_000, 100)),
    "pca": ((500_000, 1000), (125_000, 1000), "float32", (5_000_000, 1000)),
    "rsvd": ((200_000, 2_000), (50_000, 1_000), "float32", (1_000_000, 20_000)),
    "cholesky": ((8192, 8192), (2048, 2048), "float64", (65536, 65536)),
}
CPU = {
    "qr": ((20_000, 20), (3_000, 20), "float32", (20_000_000, 100)),
    "pca": ((6_000, 50), (1_500, 25), "float32", (5_000_000, 1000)),
    "rsvd": ((4_000, 300), (1_000, 150), "float32", (1_000_000, 20_000)),
    "cholesky": ((600, 600), (150, 150), "float64", (65536, 65536)),
}
CPU_SCALING = {  # strong scaling on CPU worker processes: 16 row chunks, 2 per worker at 8
    "qr": ((3_200_000, 64), (200_000, 64), "float32", None),
    "rsvd": ((1_600_000, 800), (100_000, 800), "float32", None),
    "cholesky": ((8192, 8192), (1024, 1024), "float64", None),
}
#: What ``--cpu-scaling`` changes in the cases (read from ``info``; the defaults elsewhere).
SCALING = {"k": 20, "qr_mode": "r", "one_device_peers": False}
FULL = {
    "rsvd": ((1_000_000, 20_000), (50_000, 5_000), "float32", None),
    "cholesky": ((65536, 65536), (8192, 8192), "float64", None),
}


# -- inputs, made block by block on the workers ---------------------------------------------

def _xp(kind):
    if kind == "cupy":
        import cupy
        return cupy
    return np


def _rng(xp, seed):
    return xp.random.RandomState(int(seed) % (2 ** 32))


def _low_rank_block(kind, dtype, n_cols, rank, seed, block_info=None):
    """Block of ``G W + 0.01 N``: ``W`` (rank, n) fixed, rows scaled 0.8^r; ``G`` Gaussian."""
    xp = _xp(kind)
    info = block_info[None]
    (r0, r1), (c0, c1) = info["array-location"]
    g = _rng(xp, seed * 1_000_003 + r0).standard_normal((r1 - r0, rank)).astype(dtype)
    w = _rng(xp, seed + 7).standard_normal((rank, n_cols)).astype(dtype)[:, c0:c1]
    w *= xp.asarray(0.8 ** np.arange(rank), dtype=dtype)[:, None]
    noise = _rng(xp, seed * 7_000_003 + r0 * 31 + c0).standard_normal((r1 - r0, c1 - c0))
    return g @ w + dtype.type(0.01) * noise.astype(dtype)


def _gaussian_block(kind, dtype, seed, block_info=None):
    xp = _xp(kind)
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    return _rng(xp, seed * 1_000_003 + r0 * 7 + c0).standard_normal(
        (r1 - r0, c1 - c0)).astype(dtype)


def rbf_tile(xp, n, r0, r1, c0, c1, dtype):
    """Tile of ``exp(-(p_i - p_j)^2 / (2 l^2)) + 0.1 I``, ``p`` = n points evenly in [0, 1]:
    symmetric positive definite, the same numbers on the workers and on one GPU."""
    p = xp.arange(n, dtype=dtype) / max(n - 1, 1)
    d = p[r0:r1, None] - p[None, c0:c1]
    t = xp.exp(-0.5 * d * d / 0.02 ** 2)
    i = xp.arange(max(r0, c0), min(r1, c1))
    t[i - r0, i - c0] += 0.1
    return t


def _rbf_block(kind, dtype, n, block_info=None):
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    return rbf_tile(_xp(kind), n, r0, r1, c0, c1, dtype)


def make(case, shape, chunks, dtype, kind):
    import dask.array as da
    dtype = np.dtype(dtype)
    meta = _xp(kind).empty((0, 0), dtype=dtype)
    if case == "qr":
        fn, kw = _gaussian_block, dict(seed=1)
    elif case == "cholesky":
        fn, kw = _rbf_block, dict(n=shape[0])
    else:
        fn, kw = _low_rank_block, dict(n_cols=shape[1], rank=50, seed=2)
    return da.map_blocks(fn, kind, dtype, dtype=dtype, chunks=_chunks(shape, chunks), meta=meta,
                         **kw)


def _chunks(shape, chunks):
    return tuple(tuple([c] * (s // c) + ([s % c] if s % c else [])) for s, c in zip(shape, chunks))


# -- timing -----------------------------------------------------------------------------------

def _persist(client, *xs):
    from distributed import futures_of, wait
    if not xs:
        return []
    out = client.persist(list(xs))
    wait(out)
    for future in futures_of(out):  # wait() returns on failed tasks too: raise their error
        if future.status == "error":
            future.result()
    return out


def _timed(client, build, repeat):
    """``(cold_s, warm stats, results of the last run, comm fraction)``: ``build()`` returns
    lazy collections, persisted and waited for."""
    from distributed import get_task_stream
    t0 = time.perf_counter()
    out = _persist(client, *build())
    cold = time.perf_counter() - t0
    times = []
    comm = None
    for i in range(repeat):
        del out
        gc.collect()
        with get_task_stream(client) as ts:
            t0 = time.perf_counter()
            out = _persist(client, *build())
            times.append(time.perf_counter() - t0)
        if i == 0:
            comm = _comm_fraction(ts.data, times[-1])
            prof = _profile(ts.data, times[-1])
    warm = {"median_s": statistics.median(times), "min_s": min(times), "runs": len(times)}
    if repeat:
        warm.update(prof)
    return cold, warm, out, comm


def _profile(records, wall):
    """Where one warm run's time went, from the task stream: the number of tasks, the seconds
    the worker threads spent inside tasks (CuPy kernels are asynchronous: a task's time is its
    launch plus any synchronization it makes), and the wall time no task was running (graph
    submission, scheduling, transfers, waits)."""
    spans = sorted((s["start"], s["stop"]) for r in records for s in r.get("startstops", ())
                   if s.get("action") == "compute")
    busy, end = 0.0, None
    for a, b in spans:
        if end is None or a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    return {"tasks": len(records), "task_s": round(sum(b - a for a, b in spans), 4),
            "idle_s": round(max(wall - busy, 0.0), 4)}


def _comm_fraction(records, wall):
    transfer = sum(s["stop"] - s["start"] for r in records for s in r.get("startstops", ())
                   if s.get("action") == "transfer")
    return round(transfer / wall, 4) if wall > 0 else None


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


# -- cases ------------------------------------------------------------------------------------

def case_qr(client, x, info, repeat):
    """Q and R, or with ``info["qr_mode"] == "r"`` R alone (``R^T R`` against ``X^T X``)."""
    import dask
    import dask.array as da
    from gpulinalg import decomp
    r_only = info.get("qr_mode") == "r"
    mode = "r" if r_only else "economic"
    # persisting R alone culls the pass that forms Q on both sides
    theirs = (lambda: [da.linalg.tsqr(x)[1]]) if r_only else (lambda: da.linalg.tsqr(x))
    xtx = _host((x.T @ x).compute()) if r_only else None
    rows = []
    for impl, fn in (("gpulinalg.decomp.qr", lambda: list(decomp.qr(x, mode=mode))),
                     ("dask.array.linalg.tsqr", theirs)):
        cold, warm, out, comm = _timed(client, fn, repeat)
        if r_only:
            rtr = _host((out[0].T @ out[0]).compute())
            acc = {"gram_rel_err": float(np.abs(rtr - xtx).max() / np.abs(xtx).max())}
        else:
            q, r = out
            gram, resid = dask.compute(q.T @ q, abs(q @ r - x).max())
            acc = {"orth_err": float(np.abs(_host(gram) - np.eye(x.shape[1])).max()),
                   "resid_max": float(_host(resid))}
            del q, r
        rows.append(_row("qr", impl, cold, warm, info, passes=1, comm=comm, mode=mode, **acc))
        del out
    return rows


def case_rsvd(client, x, info, repeat):
    import dask
    import dask.array as da
    from gpulinalg import decomp
    passes = 2 + 2 * N_ITER
    rows, svals = [], {}
    k = info.get("k", K)

    def ours():
        return list(decomp.truncated_svd(x, k, random_state=0, n_iter=N_ITER,
                                         n_oversamples=OVERSAMPLES))

    def theirs(n_iter=N_ITER, over=OVERSAMPLES):
        with dask.config.set({"array.backend": info["kind"]}):  # Omega on the chunks' package
            return list(da.linalg.svd_compressed(x, k, n_power_iter=n_iter,
                                                 n_oversamples=over, seed=0))
    # reference singular values: more power iterations and oversampling. Ritz values are lower
    # bounds of the true ones, so the larger the better; svd_compressed cannot be the
    # reference: it normalizes only once per A A^T and overflows float32 past ~3 iterations
    ref = _host(decomp.truncated_svd(x, k, random_state=1, n_iter=REF_ITER,
                                     n_oversamples=REF_OVER).S.compute())
    for impl, fn in (("gpulinalg.decomp.truncated_svd", ours),
                     ("dask.array.linalg.svd_compressed", theirs)):
        try:
            cold, warm, (u, s, vh), comm = _timed(client, fn, repeat)
        except Exception as exc:  # the peer failing (e.g. out of memory) keeps our row
            rows.append(_harness.absent("dask", "rsvd", impl, f"{type(exc).__name__}: {exc}"))
            continue
        svals[impl] = _host(s.compute())
        acc = _accuracy(x, u, s, vh, ref)
        rows.append(_row("rsvd", impl, cold, warm, info, passes=passes, comm=comm, k=k,
                         n_iter=N_ITER, n_oversamples=OVERSAMPLES,
                         singular_values=svals[impl].tolist(), **acc))
        del u, s, vh
    if len(svals) == 2:
        a, b = svals.values()
        for r in rows:
            r["s_rel_diff_between_impls"] = float(np.max(np.abs(a - b) / np.abs(a)))
    rows.append(_gemm_probe(client, x, info))
    return rows


REF_ITER, REF_OVER = 6, 30  # the reference run of the accuracy figures


def _accuracy(x, u, s, vh, ref):
    """Accuracy of a rank-K result: ``s_rel_err`` (max over i of |s_i - s_ref_i| / s_ref_i,
    against the reference run), ``resid_Av`` (max over i of ||A v_i - s_i u_i|| / s_1: how far
    the pairs are from singular pairs of A; one more pass over A), ``u_orth`` and ``v_orth``
    (max |U^T U - I|, |V^T V - I|)."""
    import dask
    r = x @ vh.T - u * s[None, :]  # s lazy: its chunks are in the chunks' package
    norms, utu, vvt = dask.compute((r * r).sum(axis=0), u.T @ u, vh @ vh.T)
    s = _host(s.compute())
    eye = np.eye(len(s))
    out = {"resid_Av": float(np.sqrt(_host(norms).max()) / s[0]),
           "u_orth": float(np.abs(_host(utu) - eye).max()),
           "v_orth": float(np.abs(_host(vvt) - eye).max()),
           "s_rel_err": float(np.max(np.abs(s - ref[:len(s)]) / np.abs(ref[:len(s)]))),
           "s_ref_run": f"gpulinalg n_iter={REF_ITER} n_oversamples={REF_OVER} random_state=1"}
    return out


def _gemm_probe(client, x, info):
    """The two products of one pass on one chunk of ``x``, timed on a worker (CUDA events for
    CuPy chunks): what the GPU itself does per byte, against the suite's per-pass rates."""
    l = info.get("k", K) + OVERSAMPLES
    shape = tuple(int(c[0]) for c in x.chunks)

    def probe(kind, shape, dtype, l):
        xp = _xp(kind)
        b = xp.ones(shape, dtype)
        z, y = xp.ones((shape[1], l), dtype), xp.ones((shape[0], l), dtype)
        out = {}
        for tag, fn in (("a_z", lambda: b @ z), ("aT_y", lambda: b.T @ y)):
            fn()
            t = []
            for _ in range(5):
                if kind == "cupy":
                    e0, e1 = xp.cuda.Event(), xp.cuda.Event()
                    e0.record()
                    fn()
                    e1.record()
                    e1.synchronize()
                    t.append(xp.cuda.get_elapsed_time(e0, e1) / 1e3)
                else:
                    t0 = time.perf_counter()
                    fn()
                    t.append(time.perf_counter() - t0)
            out[tag + "_GBps"] = round(b.nbytes / statistics.median(t) / 1e9, 1)
        return out
    try:
        got = client.submit(probe, info["kind"], shape, info["dtype"], l, pure=False).result()
    except Exception as exc:
        return _harness.absent("dask", "rsvd", "gemm probe", f"{type(exc).__name__}: {exc}")
    return _harness.row("dask", "rsvd", "gemm probe (one chunk, on the worker)", {},
                      chunk=list(shape), dtype=info["dtype"], l=l, **got)


def case_pca(client, x, info, repeat):
    import dask
    import dask.array as da
    from gpulinalg import decomp
    rows, ev = [], {}
    n = x.shape[0]
    fitted = {}

    def ours():  # PCA.fit computes its attributes (one dask.compute); nothing left to persist
        fitted["pca"] = decomp.PCA(K, svd_solver="randomized", random_state=0,
                                   iterated_power=N_ITER, n_oversamples=OVERSAMPLES).fit(x)
        return []

    def theirs():
        xc = x - x.mean(axis=0)
        with dask.config.set({"array.backend": info["kind"]}):
            _, s, v = da.linalg.svd_compressed(xc, K, n_power_iter=N_ITER,
                                               n_oversamples=OVERSAMPLES, seed=0)
        return [s, v]
    # passes over X: ours 2 + 2 N_ITER (the means and total variance come with the first
    # sketch); theirs one more (the mean) before the same 2 + 2 N_ITER
    for impl, fn, passes in (("gpulinalg.decomp.PCA", ours, 2 + 2 * N_ITER),
                             ("dask svd_compressed(X - mean)", theirs, 3 + 2 * N_ITER)):
        cold, warm, out, comm = _timed(client, fn, repeat)
        if out:
            ev[impl] = _host(out[0].compute()) ** 2 / (n - 1)
        else:
            ev[impl] = _host(fitted["pca"].explained_variance_)
        rows.append(_row("pca", impl, cold, warm, info, passes=passes, comm=comm,
                         k=K, explained_variance=ev[impl].tolist()))
        del out
    a, b = ev.values()
    for r in rows:
        r["ev_rel_diff_between_impls"] = float(np.max(np.abs(a - b) / np.abs(a)))
    return rows


def case_cholesky(client, x, info, repeat):
    import dask
    import dask.array as da
    from gpulinalg import decomp
    rows = []
    n = x.shape[0]
    for impl, fn in (("gpulinalg.decomp.cholesky (dask)", lambda: [decomp.cholesky(x, True)]),
                     ("dask.array.linalg.cholesky", lambda: [da.linalg.cholesky(x, True)])):
        try:
            cold, warm, (L,), comm = _timed(client, fn, repeat)
        except Exception as exc:  # a peer that fails is a row, not the end of the suite
            rows.append(_harness.absent("dask", "cholesky", impl, f"{type(exc).__name__}: {exc}"))
            continue
        probe = slice(0, min(n, 512))  # residual on a leading block (cheap)
        res = dask.compute(abs(L[probe] @ L[probe].T - x[probe, probe]).max())[0]
        rows.append(_row("cholesky", impl, cold, warm, info, passes=1, comm=comm,
                         resid_lead_block=float(_host(res)), flops=n ** 3 / 3))
        del L
    peers = info.get("one_device_peers", True)  # off for scaling: they run here, not on workers
    if peers and n <= ONE_DEVICE_MAX_N:
        rows += _single_gpu_cholesky(x, info, repeat)
    elif peers:  # the worker holds A and L; the peer's A and its temporaries would not fit beside
        rows.append(_harness.absent("dask", "cholesky", "one-device peers",
                                  f"n = {n} > {ONE_DEVICE_MAX_N}: the Dask worker holds A and "
                                  "L on the same GPU; the one-device peers need A and "
                                  "temporaries beside them"))
    return rows


ONE_DEVICE_MAX_N = 40_000


def _single_gpu_cholesky(x, info, repeat):
    """Peers on one device in this process: gpulinalg's single-GPU cholesky and torch's, on the
    same matrix made here (CuPy) or NumPy for ``--cpu``."""
    from gpulinalg import decomp
    n = x.shape[0]
    xp = _xp(info["kind"])
    a = rbf_tile(xp, n, 0, n, 0, n, np.dtype(x.dtype))
    peers = [("gpulinalg.decomp.cholesky (one device)", lambda: decomp.cholesky(a, lower=True))]
    if _harness.have("torch"):
        import torch
        t = torch.from_dlpack(a) if info["kind"] == "cupy" else torch.from_numpy(a)
        peers.append(("torch.linalg.cholesky", lambda: torch.linalg.cholesky(t)))
    rows = []
    for impl, fn in peers:
        sync = _sync(info["kind"])
        t0 = time.perf_counter()
        fn()
        sync()
        cold = time.perf_counter() - t0
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        warm = {"median_s": statistics.median(times), "min_s": min(times), "runs": len(times)}
        rows.append(_row("cholesky", impl, cold, warm, {**info, "workers": 0}, passes=1,
                         comm=None, flops=n ** 3 / 3))
    return rows


def _sync(kind):
    if kind == "cupy":
        import cupy
        return cupy.cuda.Device().synchronize
    return lambda: None


def _row(case, impl, cold, warm, info, *, passes, comm, **extra):
    gbps = info["nbytes"] * passes / warm["median_s"] / 1e9 if warm["median_s"] else None
    r = _harness.row("dask", case, impl, {"cold_s": round(cold, 4), **warm},
                   shape=info["shape"], chunks=info["chunks"], dtype=info["dtype"],
                   chunk_kind=info["kind"], workers=info["workers"], passes=passes,
                   input_GBps=round(gbps, 2) if gbps else None, comm_fraction=comm, **extra)
    if info.get("scaled_from"):
        r["scaled_from"] = info["scaled_from"]
    if "flops" in extra and warm["median_s"]:
        r["TFLOPs"] = round(extra["flops"] / warm["median_s"] / 1e12, 2)
    return r


CASES = {"qr": case_qr, "pca": case_pca, "rsvd": case_rsvd, "cholesky": case_cholesky}


def run(quick=False, *, workers=1, cpu=None, full=False, cases=tuple(CASES), repeat=2,
        sink=None, scaling=False):
    """Rows of every case in ``cases`` (the ``python -m benchmarks`` entry: ``run(quick)``);
    ``scaling=True`` is one point of ``--cpu-scaling``: ``workers`` processes of one thread and
    one BLAS thread, the sizes of ``CPU_SCALING``, the settings of ``SCALING``."""
    import distributed
    import gpulinalg
    from gpulinalg.distributed import local_cluster
    cpu = scaling or ((not gpulinalg.gpu_available()) if cpu is None else cpu)
    sizes = CPU_SCALING if scaling else (
        CPU if cpu else (QUICK if quick else {**SIZES, **(FULL if full else {})}))
    kind = "numpy" if cpu else "cupy"
    kw = dict(n_workers=workers, dashboard_address=":0")
    if cpu:
        kw.update(threads_per_worker=1, processes=scaling)
    rows = []
    # kept for the whole run: a worker the Nanny restarts is spawned with the same environment
    env = _one_blas_thread() if scaling else contextlib.nullcontext()
    with (env, local_cluster(gpu=not cpu, **kw) as cluster,
          distributed.Client(cluster) as client):
        tags = {"workers": workers, "processes": True, "threads_per_worker": 1,
                "blas_threads": _blas_threads(client)} if scaling else {}
        for name in cases:
            shape, chunks, dtype, issue = sizes[name]
            info = {"shape": list(shape), "chunks": list(chunks), "dtype": dtype, "kind": kind,
                    "workers": workers, "nbytes": int(np.prod(shape)) * np.dtype(dtype).itemsize,
                    "scaled_from": list(issue) if issue and tuple(issue) != tuple(shape) else None,
                    **(SCALING if scaling else {})}
            t0 = time.perf_counter()
            try:
                (x,) = _persist(client, make(name, shape, chunks, dtype, kind))
                made = time.perf_counter() - t0
                got = CASES[name](client, x, info, repeat)
                for r in got:
                    r["input_made_s"] = round(made, 3)
            except Exception as exc:  # one failing case keeps the others' rows
                got = [_harness.absent("dask", name, "all", f"{type(exc).__name__}: {exc}")]
            for r in got:
                r.update(tags)
            rows += got
            if sink:
                sink(rows)
            x = None
            gc.collect()
    return rows


def run_scaling(counts, *, cases=tuple(CPU_SCALING), repeat=2, sink=None):
    """CPU strong scaling: the rows of ``run(scaling=True)`` for each worker count.

    Parameters
    ----------
    counts : sequence of int
        Worker processes of each ``LocalCluster`` (one thread each), one cluster at a time.
    cases : sequence of str, default all of ``CPU_SCALING``
        Keys of ``CPU_SCALING``.
    repeat : int, default 2
        Warm runs per implementation.
    sink : callable or None
        Called with all rows so far after each case.

    Returns
    -------
    list of dict
        The rows, the timed ones with ``speedup`` and ``scaling_efficiency`` (``add_scaling``).
    """
    rows = []
    for w in counts:
        rows += run(workers=w, cases=cases, repeat=repeat, scaling=True,
                    sink=(lambda got: sink(rows + got)) if sink else None)
    return add_scaling(rows)


def add_scaling(rows):
    """Add ``speedup`` and ``scaling_efficiency`` to the timed rows of distributed runs.

    Parameters
    ----------
    rows : list of dict
        Rows with ``workers``; those with a ``median_s`` are compared with the row of the same
        case, implementation and shape on the fewest workers (``w0``, time ``t0``).

    Returns
    -------
    list of dict
        ``rows``, changed in place: ``speedup`` = t0 / t_w, ``scaling_efficiency`` =
        w0 t0 / (w t_w) (t_1 / (w t_w) when the counts start at 1), ``scaling_base_workers`` = w0.
    """
    timed = sorted((r for r in rows if r.get("median_s") and r.get("workers")),
                   key=lambda r: r["workers"])
    base = {}
    for r in timed:
        b = base.setdefault(_series(r), r)
        r["speedup"] = round(b["median_s"] / r["median_s"], 3)
        r["scaling_efficiency"] = round(
            b["workers"] * b["median_s"] / (r["workers"] * r["median_s"]), 3)
        r["scaling_base_workers"] = b["workers"]
    return rows


def _series(r):
    return r["case"], r["impl"], tuple(r.get("shape") or ())


def scaling_table(rows):
    """The rows of ``add_scaling`` as a text table, by case, implementation and workers."""
    lines = [f"{'case':9} {'impl':34} {'workers':>7} {'median_s':>9} {'speedup':>8} "
             f"{'efficiency':>10}"]
    for r in sorted((r for r in rows if "scaling_efficiency" in r),
                    key=lambda r: (*_series(r), r["workers"])):
        lines.append(f"{r['case']:9} {r['impl'][:34]:34} {r['workers']:7d} "
                     f"{r['median_s']:9.3f} {r['speedup']:8.2f} {r['scaling_efficiency']:10.2f}")
    return "\n".join(lines)


BLAS_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def _one_blas_thread():
    """Worker processes spawned inside have one BLAS thread. The Nanny puts
    ``distributed.nanny.pre-spawn-environ`` into the environment before it spawns a worker (so
    the BLAS reads it at import), but a variable already in this process's environment wins over
    that config: both are set here, and the environment restored after."""
    import dask
    saved = {k: os.environ.get(k) for k in BLAS_ENV}
    os.environ.update(dict.fromkeys(BLAS_ENV, "1"))
    try:
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{k}": 1 for k in BLAS_ENV}):
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _blas_threads(client):
    """The most threads of any BLAS or OpenMP pool on any worker once NumPy and SciPy are loaded
    (threadpoolctl's count; ``None`` without threadpoolctl). 1 is what scaling asks for."""
    if not _harness.have("threadpoolctl"):
        return None

    def most():
        import numpy  # noqa: F401  (loads the BLAS that threadpoolctl reads)
        import scipy.linalg  # noqa: F401
        from threadpoolctl import threadpool_info
        return max((p["num_threads"] for p in threadpool_info()), default=0)
    got = max(client.run(most).values())
    if got != 1:
        print(f"warning: a worker has {got} BLAS threads, not 1", file=sys.stderr, flush=True)
    return got


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.suites.dask")
    p.add_argument("--workers", type=int, default=1, help="Dask workers (one GPU each)")
    p.add_argument("--cpu", action="store_true", help="LocalCluster with NumPy chunks")
    p.add_argument("--quick", action="store_true", help="small GPU sizes")
    p.add_argument("--full", action="store_true", help="the issue's sizes where larger")
    p.add_argument("--cpu-scaling", metavar="W,W,...",
                   help="CPU strong scaling: a LocalCluster of W worker processes (one thread "
                        "each) for each W, sizes CPU_SCALING")
    p.add_argument("--cases", help=f"default {','.join(CASES)}; with --cpu-scaling "
                                   f"{','.join(CPU_SCALING)}")
    p.add_argument("--repeat", type=int, default=2, help="warm runs per implementation")
    p.add_argument("--json", help="write the rows here (rewritten after each case)")
    args = p.parse_args(argv)
    _harness.emit = lambda r: print("row:", json.dumps(r, default=str), file=sys.stderr, flush=True)

    shown = [0]

    def sink(rows):
        summary(rows[shown[0]:], rows)
        shown[0] = len(rows)
        if args.json:
            _harness.write_rows(args.json, rows, suite="dask", args=vars(args), notes=NOTES)
    cases = [c for c in (args.cases or "").split(",") if c]
    if args.cpu_scaling:
        counts = [int(w) for w in args.cpu_scaling.split(",") if w]
        cases = cases or list(CPU_SCALING)
        if set(cases) - set(CPU_SCALING) or not counts or min(counts) < 1:
            p.error(f"--cpu-scaling takes worker counts >= 1 and --cases from "
                    f"{','.join(CPU_SCALING)}")
        rows = run_scaling(counts, cases=cases, repeat=args.repeat, sink=sink)
        print(scaling_table(rows), flush=True)
        if args.json:
            _harness.write_rows(args.json, rows, suite="dask", args=vars(args), notes=NOTES)
    else:
        rows = run(args.quick, workers=args.workers, cpu=args.cpu or None, full=args.full,
                   cases=cases or list(CASES), repeat=args.repeat, sink=sink)
    if not rows:
        print("no rows")
    return 0


SHOWN = ("input_GBps", "tasks", "idle_s", "s_rel_err", "resid_Av", "u_orth",
         "ev_rel_diff_between_impls", "orth_err", "gram_rel_err", "resid_lead_block", "TFLOPs",
         "a_z_GBps", "aT_y_GBps", "absent")


def summary(rows, every=None):
    """One short line per row: warm median, the speed-up over the case's Dask peer (found among
    ``every``, default ``rows``), accuracy."""
    peers = {"rsvd": "dask.array.linalg.svd_compressed", "qr": "dask.array.linalg.tsqr",
             "pca": "dask svd_compressed(X - mean)", "cholesky": "dask.array.linalg.cholesky"}
    base = {(r["case"], tuple(r.get("shape") or ())): r["median_s"] for r in every or rows
            if r.get("impl") == peers.get(r.get("case")) and r.get("median_s")}
    for r in rows:
        shape = tuple(r.get("shape") or ())
        peer = base.get((r.get("case"), shape))
        med = r.get("median_s")
        head = f"{r.get('case')} {'x'.join(map(str, shape))} {r.get('impl')}"
        if med:
            head += f": {med:.3f} s (cold {r.get('cold_s')})"
            if peer:
                head += f" {peer / med:.2f}x peer"
        extra = " ".join(f"{k}={_fmt(r[k])}" for k in SHOWN if r.get(k) is not None)
        print(head, extra, flush=True)


def _fmt(v):
    return f"{v:.3g}" if isinstance(v, float) else str(v)[:160]


if __name__ == "__main__":
    raise SystemExit(main())
