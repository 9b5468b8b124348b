"""Batched factorizations and square/wide SVD against torch and CuPy, same process, same inputs.

Grid: batch x order x dtype (fp32, fp64) for ``cholesky``, ``cho_solve``, ``solve_triangular``,
``qr`` and ``svd`` over stacks of small (8-64), medium (128-512) and large (>= 2048) matrices;
square and wide SVD from 1024 to 8192 with every gpulinalg driver; both sides of every limit
of the route table (``gpulinalg.decomp._gpu._batched_plan``). Every row: the cold first call and the
warm median (synchronized wall clock: all three libraries synchronize on their info codes or
not at all, so the clock includes the device work), and the backward error of the result.

``--sections svdvals`` times singular values alone (``compute_uv=False``) against CuPy's and
torch's, and against ours through the full SVD. ``--sections kernels`` times the fused
small-stack kernels alone (:mod:`benchmarks.suites.decomp_kernels`; ``--cases`` picks them too,
``potrf:512:128`` or ``cholesky:512:128``). ``--sections floor`` times the host (CPU) and
device (GPU) side of one call apart (``cupyx.profiler.benchmark``) and, with ``--profile-dir``,
writes a cProfile of the host path. ``--sections paired`` times a few grid rows with their
calls interleaved round by round (the rows whose grid figures moved the most between runs).
``--cases`` (grid, floor and paired rows), ``--svd-shapes`` and ``--routes`` pick rows.

``ours`` runs with SciPy's default ``check_finite=True``; ``ours (no check)`` with
``check_finite=False`` (the peers do not check). A time budget (``--budget`` seconds, default
180) bounds the run: cases are ordered by priority and the rest are recorded as absent.

Run: ``python -m benchmarks.suites.decomp_batched --json out.json [--quick] [--budget 180]``;
``run(quick)`` serves ``python -m benchmarks``.
"""

import argparse
import statistics
import sys
import time

from benchmarks import _harness
from benchmarks._harness import Budget, absent, gpu_libraries, norms as _norms, row
from benchmarks._harness import as_cupy as _as_cupy, make_inputs as _make, rel_err as _rel
from benchmarks.suites import decomp_kernels

SUITE = "decomp_batched"

#: (op, batch, n) of the batched grid, most important first. k = 4 right-hand sides.
GRID = [
    ("cholesky", 4096, 64), ("cholesky", 200, 512), ("cho_solve", 200, 512),
    ("solve_triangular", 1, 4096), ("cholesky", 4096, 8), ("cholesky", 1024, 32),
    ("cholesky", 512, 128), ("cholesky", 64, 256), ("cholesky", 8, 2048), ("cholesky", 2, 4096),
    ("cho_solve", 4096, 64), ("cho_solve", 4096, 8), ("cho_solve", 64, 256), ("cho_solve", 8, 2048),
    ("solve_triangular", 4096, 64), ("solve_triangular", 200, 512), ("solve_triangular", 8, 2048),
    ("qr", 4096, 16), ("qr", 1024, 64), ("qr", 64, 256), ("qr", 8, 512), ("qr", 2, 2048),
    ("svd", 4096, 16), ("svd", 512, 32), ("svd", 64, 64), ("svd", 16, 256), ("svd", 4, 512),
    ("svd", 1024, 8), ("cholesky", 8, 1024), ("cholesky", 8, 512), ("qr", 4, 2048),
]
#: The public calls the grid (and the floor section) time.
GRID_OPS = frozenset(op for op, _, _ in GRID)
QUICK_GRID = [("cholesky", 16, 8), ("cholesky", 4, 64), ("cho_solve", 4, 64),
              ("solve_triangular", 1, 128), ("solve_triangular", 4, 64), ("qr", 8, 16),
              ("svd", 8, 16), ("svd", 2, 64)]
#: Shapes of the values-only rows (``--sections svdvals``, not in the default sections).
SVDVALS_SHAPES = [(1024, 1024, "float32"), (1024, 1024, "float64"), (4096, 4096, "float32"),
                  (4096, 4096, "float64"), (20000, 2000, "float64")]
#: (m, n) of the single-matrix SVD section (driver table), most important first.
SVD_SHAPES = [(4096, 4096, "float32"), (1024, 1024, "float32"), (1024, 1024, "float64"),
              (2048, 2048, "float32"), (2048, 2048, "float64"), (1024, 4096, "float32"),
              (1024, 4096, "float64"), (2048, 8192, "float32"), (4096, 4096, "float64"),
              (8192, 8192, "float32")]
QUICK_SVD = [(64, 64, "float32"), (64, 64, "float64"), (48, 96, "float64")]
#: single large matrices: QR of a tall matrix and one Cholesky.
SINGLE = [("qr", 100000, 500), ("cholesky", 1, 8192)]
#: (op, batch, n): both routes of the table at its limits.
ROUTES = [("potrf", 200, 512), ("potrf", 8, 1024), ("potrf", 8, 2048), ("potrf", 64, 128),
          ("potrf", 64, 256), ("potrf", 16, 1024), ("potrf", 16, 768), ("potrf", 8, 512),
          ("potrf", 512, 128), ("potrf", 1024, 32), ("potrf", 4096, 64), ("potrf", 4096, 8),
          ("potrf", 256, 128), ("potrf", 384, 128), ("potrf", 1024, 128),  # fused to batched
          ("trsm", 4096, 64), ("trsm", 4096, 8),
          ("trsm", 200, 512), ("trsm", 8, 1024), ("trsm", 8, 2048), ("trsm", 64, 256),
          ("trsm", 2, 2048), ("trsm", 16, 4096),
          ("trsm", 1, 512), ("trsm", 1, 4096), ("trsm", 1, 16384),  # the wide kernel
          ("geqrf", 64, 256), ("geqrf", 8, 256), ("gesvd", 16, 64), ("gesvd", 4, 512),
          ("geqrf", 4096, 16), ("geqrf", 1024, 64),  # the fused QR row (unmeasured so far)
          ("gesvd", 512, 32), ("gesvd", 4096, 16), ("gesvd", 1024, 8),  # the fused SVD row
          ("gesvd", 64, 64), ("gesvd", 512, 64), ("gesvd", 256, 48),  # its row class 64
          ("gesvd", 16, 256), ("gesvd", 8, 384),  # jacobi against the driver table
          ("gesvd", 32, 96), ("gesvd", 64, 128), ("gesvd", 32, 192), ("gesvd", 8, 128)]
DTYPES = decomp_kernels.DTYPES


def _measured(fn, budget):
    """:func:`~benchmarks._harness.timed_sync` with as many warm runs as a call's warm time
    allows (:func:`_repeat`): the first call is the row's cold one, the second (warm) sets the
    count. A first call that compiles kernels took up to seconds, and counting runs from it left
    sub-millisecond rows with one to three runs."""
    _harness.sync()
    t0 = time.perf_counter()
    fn()
    _harness.sync()
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn()
    _harness.sync()
    timing, out = _harness.timed_sync(fn, _repeat(time.perf_counter() - t0, budget))
    timing["cold_s"] = cold
    return timing, out


def _repeat(seconds_per_call, budget):
    """Timed runs: 30 under 10 ms (single runs were noisy on the H200), fewer for slow calls."""
    if seconds_per_call < 0.01 or seconds_per_call > 2.0:
        return 30 if seconds_per_call < 0.01 else 1
    return 1 if budget.left() < 30 else (3 if seconds_per_call > 0.2 else 10)


# -- inputs and errors (CuPy) ---------------------------------------------------------------------

def _errors(cp, op, inputs, out):
    a, b = inputs
    if op == "cholesky":
        low = _as_cupy(cp, out)
        return {"backward_err": _rel(cp, low @ low.swapaxes(-1, -2) - a, a)}
    if op in ("cho_solve", "solve_triangular"):
        # normwise: ||M x - b|| / (||M|| ||x|| + ||b||), Frobenius norms per matrix
        x = _as_cupy(cp, out)
        m = a if op == "cho_solve" else cp.tril(a)
        x2 = x if x.ndim == b.ndim else x[..., None]
        b2 = b if b.ndim == x2.ndim else b[..., None]
        num = _norms(cp, m @ x2 - b2)
        den = _norms(cp, m) * _norms(cp, x2) + _norms(cp, b2)
        return {"backward_err": float((num / den).max())}
    if op == "qr":
        q, r = (_as_cupy(cp, x) for x in out)
        return {"backward_err": _rel(cp, q @ r - a, a)}
    u, s, vh = (_as_cupy(cp, x) for x in out)
    return {"backward_err": _rel(cp, (u * s[..., None, :]) @ vh - a, a)}


# -- the three libraries ----------------------------------------------------------------------

def _calls(cp, op, inputs, torch):
    """``{label: fn}`` for ours (two rows), CuPy and torch; each fn returns the result."""
    from gpulinalg import decomp
    a, b = inputs
    ours, cupy_fn, torch_fn = {}, None, None
    ta = torch.from_dlpack(a) if torch is not None else None
    tb = torch.from_dlpack(b) if torch is not None and b is not None else None
    if op == "cholesky":
        for label, chk in (("ours", True), ("ours (no check)", False)):
            ours[label] = lambda c=chk: decomp.cholesky(a, lower=True, check_finite=c)
        cupy_fn = lambda: cp.linalg.cholesky(a)  # noqa: E731
        torch_fn = lambda: torch.linalg.cholesky(ta)  # noqa: E731
    elif op == "cho_solve":
        c = decomp.cho_factor(a, lower=True)
        tc = torch.from_dlpack(cp.tril(c[0])) if torch is not None else None
        cl = cp.tril(c[0])
        for label, chk in (("ours", True), ("ours (no check)", False)):
            ours[label] = lambda k=chk: decomp.cho_solve(c, b, check_finite=k)
        cupy_fn = lambda: _cupy_cho_solve(cp, cl, b)  # noqa: E731
        torch_fn = lambda: torch.cholesky_solve(tb, tc)  # noqa: E731
    elif op == "solve_triangular":
        for label, chk in (("ours", True), ("ours (no check)", False)):
            ours[label] = lambda k=chk: decomp.solve_triangular(a, b, lower=True, check_finite=k)
        cupy_fn = lambda: _cupy_trsm(cp, a, b)  # noqa: E731
        torch_fn = lambda: torch.linalg.solve_triangular(ta, tb, upper=False)  # noqa: E731
    elif op == "qr":
        for label, chk in (("ours", True), ("ours (no check)", False)):
            ours[label] = lambda k=chk: decomp.qr(a, mode="economic", check_finite=k)
        cupy_fn = lambda: cp.linalg.qr(a, mode="reduced")  # noqa: E731
        torch_fn = lambda: torch.linalg.qr(ta, mode="reduced")  # noqa: E731
    else:
        for label, chk in (("ours", True), ("ours (no check)", False)):
            ours[label] = lambda k=chk: decomp.svd(a, full_matrices=False, check_finite=k)
        cupy_fn = lambda: cp.linalg.svd(a, full_matrices=False)  # noqa: E731
        torch_fn = lambda: torch.linalg.svd(ta, full_matrices=False)  # noqa: E731
    looped_in_python = op in ("cho_solve", "solve_triangular") and a.ndim == 3
    peers = {"cupy": cupy_fn} if not looped_in_python or len(a) <= 256 else {}
    if torch is not None:
        peers["torch"] = torch_fn
    return {**ours, **peers}


def _cupy_trsm(cp, a, b):
    from cupyx.scipy.linalg import solve_triangular
    if a.ndim == 2:
        return solve_triangular(a, b, lower=True)
    return cp.stack([solve_triangular(a[i], b[i], lower=True) for i in range(len(a))])


def _cupy_cho_solve(cp, c, b):
    return cp.stack([_cupy_cho_one(cp, c[i], b[i]) for i in range(len(c))]) if c.ndim == 3 \
        else _cupy_cho_one(cp, c, b)


def _cupy_cho_one(cp, c, b):
    from cupyx.scipy.linalg import solve_triangular
    y = solve_triangular(c, b, lower=True)
    return solve_triangular(c, y, lower=True, trans=1)


def _case(cp, torch, op, batch, n, dtype, rng, budget, rows):
    import gpulinalg
    case = f"{op} {batch}x{n}^2 {dtype}"
    try:
        inputs = _make(cp, op, batch, n, dtype, rng)
    except Exception as exc:
        rows.append(absent(SUITE, case, "all", f"inputs failed: {type(exc).__name__}: {exc}"))
        return
    for label, fn in _calls(cp, op, inputs, torch).items():
        if budget.left() <= 0:
            rows.append(absent(SUITE, case, label, "time budget spent"))
            continue
        try:
            timing, out = _measured(fn, budget)
            extra = _errors(cp, op, inputs, out)
            if label.startswith("ours"):
                rec = gpulinalg.last_run()
                extra.update(where=rec.backend, **{k: v for k, v in rec.details.items()
                                                   if k in ("driver", "batched", "rejected")})
            rows.append(row(SUITE, case, label, timing, op=op, batch=batch, n=n, dtype=dtype,
                            **extra))
        except Exception as exc:  # one broken peer must not hide the other figures
            rows.append(absent(SUITE, case, label, f"failed: {type(exc).__name__}: {exc}"[:300]))
    del inputs
    cp.get_default_memory_pool().free_all_blocks()


#: Rows of the paired section: the grid rows whose runs moved the most between runs, and
#: stacks of order 128 around the table's fused-to-batched limits (265 and 529 matrices).
PAIRED = [("cholesky", 64, 256), ("cholesky", 512, 128), ("cholesky", 8, 512),
          ("cholesky", 160, 128), ("cholesky", 1024, 128)]


def _paired_case(cp, torch, op, batch, n, dtype, rng, budget, rows, rounds=15, calls=20):
    """One grid row with its calls interleaved: ``rounds`` rounds in which each call (ours,
    ours without the check, the peers) runs ``calls`` times in a row, each run synchronized
    and its result kept until the next one returns (as ``x = f(a)`` in a loop), the calls
    taking turns in a rotated order. A call's time: the median over rounds of its per-run
    mean. The grid times each call's runs in one block, so the machine's drift between
    blocks falls on one call only (it moved the medium Cholesky rows by up to half)."""
    case = f"paired {op} {batch}x{n}^2 {dtype}"
    try:
        fns = _calls(cp, op, _make(cp, op, batch, n, dtype, rng), torch)
        for f in fns.values():  # kernels compiled, chains captured
            f()
            f()
        _harness.sync()
    except Exception as exc:
        rows.append(absent(SUITE, case, "all", f"failed: {type(exc).__name__}: {exc}"[:300]))
        return
    names = list(fns)
    samples = {name: [] for name in names}
    for r in range(rounds):
        if budget.left() <= 0:
            break
        k = r % len(names)
        for name in names[k:] + names[:k]:
            f = fns[name]
            t0 = time.perf_counter()
            for _ in range(calls):
                out = f()  # noqa: F841 - kept until the next run returns
                _harness.sync()
            samples[name].append((time.perf_counter() - t0) / calls)
        out = None  # noqa: F841 - the last result goes before the next engine runs
    for name, xs in samples.items():
        if not xs:
            rows.append(absent(SUITE, case, name, "time budget spent"))
            continue
        timing = {"cold_s": xs[0], "median_s": statistics.median(xs), "min_s": min(xs),
                  "runs": len(xs) * calls}
        rows.append(row(SUITE, case, name, timing, op=op, batch=batch, n=n, dtype=dtype,
                        rounds=len(xs), calls_per_round=calls))
    cp.get_default_memory_pool().free_all_blocks()


def _svd_case(cp, torch, m, n, dtype, rng, budget, rows, drivers):
    import gpulinalg
    from gpulinalg import decomp
    case = f"svd {m}x{n} {dtype}"
    if max(m, n) >= 8192 and budget.left() < 60:
        rows.append(absent(SUITE, case, "all", "time budget: under 60 s left for 8192"))
        return
    a = rng.standard_normal((m, n), dtype=dtype)
    calls = {f"ours driver={d}": (lambda d=d: decomp.svd(a, full_matrices=False,
                                                          check_finite=False, driver=d))
             for d in drivers}
    calls["cupy"] = lambda: cp.linalg.svd(a, full_matrices=False)
    if torch is not None:
        ta = torch.from_dlpack(a)
        calls["torch"] = lambda: torch.linalg.svd(ta, full_matrices=False)
    eps = float(cp.finfo(dtype).eps)
    for label, fn in calls.items():
        if budget.left() <= 0:
            rows.append(absent(SUITE, case, label, "time budget spent"))
            continue
        try:
            timing, out = _harness.timed_sync(fn, 1 if max(m, n) >= 4096 else 2)
            extra = _errors(cp, "svd", (a, None), out)
            extra["target_backward_err"] = 50 * min(m, n) * eps
            if label.startswith("ours"):
                rec = gpulinalg.last_run()
                extra.update({k: v for k, v in rec.details.items()
                              if k in ("driver", "qr_first", "rejected", "h_err_sigma",
                                       "promoted", "verify_figures")})
            rows.append(row(SUITE, case, label, timing, op="svd", m=m, n=n, dtype=dtype,
                            **extra))
            del out
        except Exception as exc:
            rows.append(absent(SUITE, case, label, f"failed: {type(exc).__name__}: {exc}"[:300]))
        cp.get_default_memory_pool().free_all_blocks()


def _route_case(cp, op, batch, n, dtype, rng, budget, rows):
    """Time each route of the table for one (op, batch, n), forcing it by patching the table."""
    from gpulinalg.decomp._gpu import _batched_plan
    api = {"potrf": "cholesky", "trsm": "cho_solve", "geqrf": "qr", "gesvd": "svd"}[op]
    inputs = _make(cp, api, batch, n, dtype, rng)
    fn = _calls(cp, api, inputs, None)["ours (no check)"]
    saved = _batched_plan.TABLE[op]
    # decomp's own kernels are timed also where no row takes them yet
    own = {"potrf": ("fused", "stream"), "trsm": ("fused", "stream")}.get(op, ())
    names = sorted({r[2] for r in saved} | {"batched", "looped"} | set(own))
    if batch == 1:  # a single matrix reads the "wide" rows only
        names = ["looped"] + (["wide"] if op == "trsm" else [])
    else:
        names = [name for name in names if name != "wide"]
    try:
        for name in names:
            if budget.left() <= 0:
                break
            _batched_plan.TABLE[op] = ((float("inf"), 1, name),)
            label = f"route={name}"
            try:
                timing, _ = _measured(fn, budget)
                rows.append(row(SUITE, f"route {op} {batch}x{n}^2 {dtype}", label,
                                timing, op=op, batch=batch, n=n, dtype=dtype))
            except Exception as exc:
                rows.append(absent(SUITE, f"route {op} {batch}x{n}^2 {dtype}", label,
                                   f"failed: {type(exc).__name__}: {exc}"[:300]))
    finally:
        _batched_plan.TABLE[op] = saved
    from gpulinalg.decomp.cholesky import _cholesky_cuda
    from gpulinalg.decomp.triangular import _triangular_cuda
    if op == "trsm":
        table_route = _triangular_cuda.own_route(n, batch, inputs[1].shape[-1], dtype)
    elif op == "potrf":
        table_route = _cholesky_cuda.own_route(n, batch, dtype)
    else:
        table_route = _batched_plan.route(op, n, batch, dtype=dtype)
    for r in rows[-len(names):]:
        if r.get("impl", "").startswith("route=") and r.get("op") == op:
            r["table_route"] = table_route
    cp.get_default_memory_pool().free_all_blocks()


#: (api op, lanes key, batch, n): the stream-parallel loops against one stream.
LANE_CASES = [("qr", "orgqr", 64, 256), ("qr", "orgqr", 8, 512), ("svd", "gesvdj", 16, 256),
              ("svd", "gesvdj", 4, 512), ("cholesky", "potrf", 8, 2048),
              ("cholesky", "potrf", 8, 1024), ("qr", "geqrf", 2, 2048)]


def _lanes_case(cp, api, key, batch, n, dtype, rng, budget, rows):
    """Time a per-matrix loop on one stream and on the table's lanes (patching the table)."""
    from gpulinalg.decomp._gpu import _batched_plan
    inputs = _make(cp, api, batch, n, dtype, rng)
    fn = _calls(cp, api, inputs, None)["ours (no check)"]
    saved = dict(_batched_plan.LANES)
    case = f"lanes {key} {batch}x{n}^2 {dtype}"
    try:
        for count in (1, 2, 4, 8):
            if budget.left() <= 0:
                break
            for name in _batched_plan.LANES:
                _batched_plan.LANES[name] = ((float("inf"), count),)
            try:
                timing, _ = _measured(fn, budget)
                rows.append(row(SUITE, case, f"route={count} streams", timing, op=key,
                                batch=batch, n=n, dtype=dtype,
                                table_route=saved[key][0][1] if saved.get(key) else 1))
            except Exception as exc:
                rows.append(absent(SUITE, case, f"route={count} streams",
                                   f"failed: {type(exc).__name__}: {exc}"[:300]))
    finally:
        _batched_plan.LANES.clear()
        _batched_plan.LANES.update(saved)
    cp.get_default_memory_pool().free_all_blocks()


#: (op, batch, n) of the floor section: host and device time of one call, apart.
FLOOR = [("cholesky", 4096, 8), ("cho_solve", 4096, 8), ("solve_triangular", 4096, 64),
         ("cholesky", 1024, 32), ("cholesky", 4096, 64), ("cho_solve", 4096, 64),
         ("solve_triangular", 1, 4096), ("cholesky", 512, 128), ("svd", 512, 32),
         ("qr", 4096, 16), ("qr", 1024, 64), ("svd", 4096, 16), ("svd", 1024, 8)]


def _floor_case(cp, torch, op, batch, n, dtype, rng, rows, prof_dir):
    """Host (CPU) and device (GPU) time per call of ours and torch, from
    ``cupyx.profiler.benchmark``; with ``prof_dir``, a cProfile of 50 warm calls of ours
    (the 25 costliest functions by own time) written there."""
    from cupyx.profiler import benchmark
    case = f"floor {op} {batch}x{n}^2 {dtype}"
    inputs = _make(cp, op, batch, n, dtype, rng)
    calls = _calls(cp, op, inputs, torch)
    for label in ("ours", "ours (no check)", "torch"):
        fn = calls.get(label)
        if fn is None:
            continue
        try:
            res = benchmark(fn, n_repeat=30, n_warmup=3)
            cpu, gpu = float(res.cpu_times.mean()), float(res.gpu_times.mean())
            rows.append(row(SUITE, case, label, {"cold_s": cpu, "median_s": max(cpu, gpu),
                                                 "min_s": cpu, "runs": 30},
                            op=op, batch=batch, n=n, dtype=dtype, cpu_s=cpu, gpu_s=gpu))
        except Exception as exc:
            rows.append(absent(SUITE, case, label, f"failed: {type(exc).__name__}: {exc}"[:300]))
    if prof_dir:
        import cProfile
        import io
        import os
        import pstats
        prof = cProfile.Profile()
        fn = calls["ours"]
        prof.enable()
        for _ in range(50):
            fn()
        _harness.sync()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        name = case.replace(" ", "_").replace("^", "")
        with open(os.path.join(prof_dir, name + ".txt"), "w") as f:
            f.write(text.getvalue())
    del inputs
    cp.get_default_memory_pool().free_all_blocks()


def _pick(spec, default, arity):
    """Entries chosen by ``spec`` ("op:batch:n,..." or "m:n:dtype,..."): those of ``default``
    first, in its order, then the others as given (numbers as ints)."""
    if not spec:
        return default
    want = [tuple(x.split(":")) for x in spec.split(",") if x]
    known = [d for d in default if tuple(str(v) for v in d[:arity]) in want]
    have = {tuple(str(v) for v in d[:arity]) for d in known}
    extra = [tuple(int(v) if v.isdigit() else v for v in w) for w in want if w not in have]
    return known + extra


def _pick_calls(spec, default):
    """The ``(op, batch, n)`` rows of the public calls that ``spec`` (``--cases``) names, as
    :func:`_pick`; the kernel rows it may name too (``wide:1:4096``) are left to the kernels
    section."""
    return [c for c in _pick(spec, default, 3) if c[0] in GRID_OPS]


def run(quick=False, budget_s=180.0, sections=("grid", "single", "svd", "routes"),
        cases=None, svd_shapes=None, routes=None, prof_dir=None):
    cp, torch, why = gpu_libraries()
    if why:
        return [absent(SUITE, "batched factorizations", "all", why)]
    rng = cp.random.default_rng(0)
    budget = Budget(budget_s)
    rows = []
    grid = _pick_calls(cases, QUICK_GRID if quick else GRID)
    if "floor" in sections:
        for op, batch, n in (QUICK_GRID[:3] if quick else _pick_calls(cases, FLOOR)):
            for dtype in DTYPES[:1]:  # the host's share hardly depends on the dtype
                if budget.left() > 0:
                    _floor_case(cp, torch, op, batch, n, dtype, rng, rows, prof_dir)
    if "kernels" in sections:
        decomp_kernels.run(cp, rng, rows, budget, quick, cases)
    if "grid" in sections:
        for op, batch, n in grid:
            for dtype in DTYPES:
                _case(cp, torch, op, batch, n, dtype, rng, budget, rows)
    if "paired" in sections:
        for op, batch, n in _pick_calls(cases, QUICK_GRID[:2] if quick else PAIRED):
            for dtype in DTYPES:
                _paired_case(cp, torch, op, batch, n, dtype, rng, budget, rows,
                             rounds=3 if quick else 15, calls=5 if quick else 20)
    if "single" in sections and not quick:
        for op, m, n in SINGLE:
            for dtype in DTYPES:
                if op == "qr":
                    _qr_tall(cp, torch, m, n, dtype, rng, budget, rows)
                else:
                    _case(cp, torch, op, m, n, dtype, rng, budget, rows)
    if "routes" in sections:
        for op, batch, n in _pick(routes, ROUTES[:2] if quick else ROUTES, 3):
            for dtype in DTYPES:
                if budget.left() > 0:
                    _route_case(cp, op, batch, min(n, 64) if quick else n, dtype, rng, budget,
                                rows)
    if "routes" in sections and not quick and not routes:
        for api, key, batch, n in LANE_CASES:
            for dtype in DTYPES:
                if budget.left() > 0:
                    _lanes_case(cp, api, key, batch, n, dtype, rng, budget, rows)
    if "svd" in sections:
        for m, n, dtype in _pick(svd_shapes, QUICK_SVD if quick else SVD_SHAPES, 3):
            if max(m, n) >= 8192:  # the slow drivers there would take the whole budget
                drivers = ("auto",)
            elif min(m, n) >= 4096:
                drivers = ("auto", "gesvd", "gesvdp")
            else:
                drivers = ("auto", "gesvd", "gesvdj", "gesvdp")
            _svd_case(cp, torch, m, n, dtype, rng, budget, rows, drivers)
    if "svdvals" in sections:
        for m, n, dtype in _pick(svd_shapes, QUICK_SVD if quick else SVDVALS_SHAPES, 3):
            _svdvals_case(cp, torch, m, n, dtype, rng, budget, rows)
    return rows


def _svdvals_case(cp, torch, m, n, dtype, rng, budget, rows):
    """Singular values alone (``compute_uv=False``): ours as the table resolves it, ours
    through the full SVD (values kept, vectors dropped), CuPy's and torch's ``svdvals``. The
    error of each: the largest distance of its values to the full SVD's of the same matrix
    in double precision (``float64`` ``gesvd``), relative to the largest value."""
    from gpulinalg import decomp
    case = f"svdvals {m}x{n} {dtype}"
    a = rng.standard_normal((m, n), dtype=dtype)
    calls = {"ours": lambda: decomp.svd(a, compute_uv=False, check_finite=False),
             "ours via full svd": lambda: decomp.svd(a, full_matrices=False,
                                                     check_finite=False)[1],
             "cupy": lambda: cp.linalg.svd(a, compute_uv=False)}
    if torch is not None:
        ta = torch.from_dlpack(a)
        calls["torch"] = lambda: torch.linalg.svdvals(ta)
    ref = None
    for label, fn in calls.items():
        if budget.left() <= 0:
            rows.append(absent(SUITE, case, label, "time budget spent"))
            continue
        try:
            timing, out = _harness.timed_sync(fn, 1 if max(m, n) >= 4096 else 3)
            got = _as_cupy(cp, out).astype(cp.float64)
            if ref is None:
                ref = decomp.svd(a.astype(cp.float64), compute_uv=False, check_finite=False,
                                 driver="gesvd")
            err = float(cp.abs(got - ref).max() / ref[0])
            extra = {"values_err": err}
            if label.startswith("ours"):
                import gpulinalg
                extra.update({k: v for k, v in gpulinalg.last_run().details.items()
                              if k in ("driver", "qr_first", "promoted")})
            rows.append(row(SUITE, case, label, timing, op="svdvals", m=m, n=n, dtype=dtype,
                            **extra))
        except Exception as exc:
            rows.append(absent(SUITE, case, label, f"failed: {type(exc).__name__}: {exc}"[:300]))
        cp.get_default_memory_pool().free_all_blocks()


def _qr_tall(cp, torch, m, n, dtype, rng, budget, rows):
    from gpulinalg import decomp
    case = f"qr {m}x{n} {dtype}"
    a = rng.standard_normal((m, n), dtype=dtype)
    calls = {"ours": lambda: decomp.qr(a, mode="economic"),
             "ours (no check)": lambda: decomp.qr(a, mode="economic", check_finite=False),
             "cupy": lambda: cp.linalg.qr(a, mode="reduced")}
    if torch is not None:
        ta = torch.from_dlpack(a)
        calls["torch"] = lambda: torch.linalg.qr(ta, mode="reduced")
    for label, fn in calls.items():
        if budget.left() <= 0:
            rows.append(absent(SUITE, case, label, "time budget spent"))
            continue
        try:
            timing, out = _harness.timed_sync(fn, 5)
            rows.append(row(SUITE, case, label, timing, op="qr", m=m, n=n, dtype=dtype,
                            **_errors(cp, "qr", (a, None), out)))
        except Exception as exc:
            rows.append(absent(SUITE, case, label, f"failed: {type(exc).__name__}: {exc}"[:300]))
    cp.get_default_memory_pool().free_all_blocks()


def summary(rows):
    """One short line per case: warm medians in ms of ours (``/`` without check_finite), torch
    and CuPy, ours over the best peer, and the backward errors of ours and that peer."""
    by_case = {}
    for r in rows:
        if "median_s" in r:
            by_case.setdefault(r["case"], {})[r["impl"]] = r
    lines = []
    for case, impls in by_case.items():
        if case.startswith("floor"):
            lines.append(case + ": " + ", ".join(
                f"{k} cpu {v.get('cpu_s', 0) * 1e3:.3g} gpu {v.get('gpu_s', 0) * 1e3:.3g}"
                for k, v in impls.items()) + " ms")
            continue
        if case.startswith("kernel"):
            lines.append(case + ": " + ", ".join(f"{k} {v.get('median_s', 0) * 1e3:.4g}" + (
                f" (back {v['back_n_eps']:.2g}, ortho {v['ortho_n_eps']:.2g} n eps, s "
                f"{v['s_eps']:.2g} eps)" if "s_eps" in v else "") for k, v in impls.items())
                + " ms")
            continue
        if case.startswith(("route", "lanes")):
            lines.append(case + ": " + ", ".join(f"{k[6:]} {v['median_s'] * 1e3:.3g}"
                                                 for k, v in impls.items())
                         + f" ms; table: {next(iter(impls.values())).get('table_route')}")
            continue
        ours = {k: v for k, v in impls.items() if k.startswith("ours")}
        peers = {k: v for k, v in impls.items() if k in ("cupy", "torch")}
        if not ours:
            continue
        main = ours.get("ours") or ours.get("ours driver=auto") or next(iter(ours.values()))
        text = f"{case}: ours {main['median_s'] * 1e3:.4g}"
        if "ours (no check)" in ours:
            text += f"/{ours['ours (no check)']['median_s'] * 1e3:.4g}"
        if "ours via full svd" in ours:
            text += f" (via full svd {ours['ours via full svd']['median_s'] * 1e3:.4g})"
        others = {k[12:]: v for k, v in ours.items() if k.startswith("ours driver=")
                  and k != "ours driver=auto"}
        if others:
            text += " [" + " ".join(f"{k} {v['median_s'] * 1e3:.4g}" for k, v in others.items()) \
                + "]"
        text += "".join(f" {k} {v['median_s'] * 1e3:.4g}" for k, v in peers.items()) + " ms"
        if peers:
            best = min(peers.values(), key=lambda v: v["median_s"])
            err = "backward_err" if "backward_err" in main else "values_err"
            text += (f" x{main['median_s'] / best['median_s']:.2f} err "
                     f"{main.get(err, float('nan')):.0e}/"
                     f"{best.get(err, float('nan')):.0e}")
        if main.get("driver"):
            text += f" {main['driver']}"
        lines.append(text)
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suites.decomp_batched")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--budget", type=float, default=180.0, help="seconds")
    parser.add_argument("--sections", default="grid,single,svd,routes",
                        help="of floor,kernels,grid,single,routes,svd,svdvals,paired")
    parser.add_argument("--cases", help="grid rows to run: op:batch:n,...")
    parser.add_argument("--svd-shapes", help="SVD shapes to run: m:n:dtype,...")
    parser.add_argument("--routes", help="route limits to time: op:batch:n,...")
    parser.add_argument("--profile-dir", help="floor section: cProfile text files here")
    args = parser.parse_args(argv)
    if args.json:
        _harness.stream_to(args.json + "l")
    rows = run(args.quick, args.budget, tuple(args.sections.split(",")), args.cases,
               args.svd_shapes, args.routes, args.profile_dir)
    if args.json:
        _harness.write_rows(args.json, rows)
    for line in summary(rows):
        print(line)
    for r in rows:
        if "absent" in r and "budget" not in r["absent"]:
            print("absent:", r["case"], r["impl"], r["absent"][:160], file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
