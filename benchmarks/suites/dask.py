"""Dask suite (issue 17): gpulinalg's Dask engines against Dask's own on the same cluster and
chunks, and against single-GPU gpulinalg / torch for the blocked Cholesky.

Run as a module (``import dask`` inside would find this file if run by path)::

    python -m benchmarks.suites.dask [--workers N] [--cpu] [--quick] [--full] [--json PATH]
                              [--cases qr,pca,rsvd,cholesky]

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
"""

import argparse
import gc
import json
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
    import dask
    import dask.array as da
    from gpulinalg import decomp
    rows = []
    for impl, fn in (("gpulinalg.decomp.qr", lambda: decomp.qr(x, mode="economic")),
                     ("dask.array.linalg.tsqr", lambda: da.linalg.tsqr(x))):
        cold, warm, (q, r), comm = _timed(client, fn, repeat)
        gram, resid = dask.compute(q.T @ q, abs(q @ r - x).max())
        orth = np.abs(_host(gram) - np.eye(x.shape[1])).max()
        rows.append(_row("qr", impl, cold, warm, info, passes=1, comm=comm,
                         orth_err=float(orth), resid_max=float(_host(resid))))
        del q, r
    return rows


def case_rsvd(client, x, info, repeat):
    import dask
    import dask.array as da
    from gpulinalg import decomp
    passes = 2 + 2 * N_ITER
    rows, svals = [], {}

    def ours():
        return list(decomp.truncated_svd(x, K, random_state=0, n_iter=N_ITER,
                                         n_oversamples=OVERSAMPLES))

    def theirs(n_iter=N_ITER, over=OVERSAMPLES):
        with dask.config.set({"array.backend": info["kind"]}):  # Omega on the chunks' package
            return list(da.linalg.svd_compressed(x, K, n_power_iter=n_iter,
                                                 n_oversamples=over, seed=0))
    # reference singular values: more power iterations and oversampling. Ritz values are lower
    # bounds of the true ones, so the larger the better; svd_compressed cannot be the
    # reference: it normalizes only once per A A^T and overflows float32 past ~3 iterations
    ref = _host(decomp.truncated_svd(x, K, random_state=1, n_iter=REF_ITER,
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
        rows.append(_row("rsvd", impl, cold, warm, info, passes=passes, comm=comm, k=K,
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
    l = K + OVERSAMPLES
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
    if n <= ONE_DEVICE_MAX_N:
        rows += _single_gpu_cholesky(x, info, repeat)
    else:  # the worker holds A and L; the peer's A and its temporaries would not fit beside
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
        sink=None):
    """Rows of every case in ``cases`` (the ``python -m benchmarks`` entry: ``run(quick)``)."""
    import distributed
    import gpulinalg
    from gpulinalg.distributed import local_cluster
    cpu = (not gpulinalg.gpu_available()) if cpu is None else cpu
    sizes = CPU if cpu else (QUICK if quick else {**SIZES, **(FULL if full else {})})
    kind = "numpy" if cpu else "cupy"
    kw = dict(n_workers=workers, dashboard_address=":0")
    if cpu:
        kw.update(threads_per_worker=1, processes=False)
    rows = []
    with local_cluster(gpu=not cpu, **kw) as cluster, distributed.Client(cluster) as client:
        for name in cases:
            shape, chunks, dtype, issue = sizes[name]
            info = {"shape": list(shape), "chunks": list(chunks), "dtype": dtype, "kind": kind,
                    "workers": workers, "nbytes": int(np.prod(shape)) * np.dtype(dtype).itemsize,
                    "scaled_from": list(issue) if issue and tuple(issue) != tuple(shape) else None}
            t0 = time.perf_counter()
            try:
                (x,) = _persist(client, make(name, shape, chunks, dtype, kind))
                made = time.perf_counter() - t0
                got = CASES[name](client, x, info, repeat)
                for r in got:
                    r["input_made_s"] = round(made, 3)
            except Exception as exc:  # one failing case keeps the others' rows
                got = [_harness.absent("dask", name, "all", f"{type(exc).__name__}: {exc}")]
            rows += got
            if sink:
                sink(rows)
            x = None
            gc.collect()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.suites.dask")
    p.add_argument("--workers", type=int, default=1, help="Dask workers (one GPU each)")
    p.add_argument("--cpu", action="store_true", help="LocalCluster with NumPy chunks")
    p.add_argument("--quick", action="store_true", help="small GPU sizes")
    p.add_argument("--full", action="store_true", help="the issue's sizes where larger")
    p.add_argument("--cases", default=",".join(CASES))
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
    rows = run(args.quick, workers=args.workers, cpu=args.cpu or None, full=args.full,
               cases=[c for c in args.cases.split(",") if c], repeat=args.repeat, sink=sink)
    if not rows:
        print("no rows")
    return 0


SHOWN = ("input_GBps", "tasks", "idle_s", "s_rel_err", "resid_Av", "u_orth",
         "ev_rel_diff_between_impls", "orth_err", "resid_lead_block", "TFLOPs",
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
