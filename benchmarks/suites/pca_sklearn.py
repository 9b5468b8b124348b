"""``python -m benchmarks pca_sklearn [--shapes NxD:K,...] [--json PATH]``: what scikit-learn
users get from ``gpulinalg.decomp.PCA``, ``TruncatedSVD`` and ``truncated_svd`` against
scikit-learn itself, in one process.

Data (:func:`make_data`): float32 ``X = Z @ W + NOISE * E`` with ``Z`` (n x 40), ``E`` standard
normal and ``W`` (40 x d) standard normal rows scaled by ``DECAY ** i`` (a decaying spectrum, so
that every solver's leading components are well defined), made on the host in row blocks
(threads, one seeded generator per block: the same ``X`` for any thread count), seed 0.

Rows (``case`` says the input, shape and ``k``; every row has ``shape``, ``k``, ``dtype``,
``solver``, ``input``):

* NumPy in, ``PCA(k).fit_transform(X)`` with the default backend and solver
  (:data:`NUMPY_SHAPES`): ``gpulinalg PCA (numpy in)``, ``sklearn PCA (cpu)`` (same ``X``, its
  default solver) and ``cupy.asarray + gpulinalg PCA`` (the copy, then ours on the CuPy array).
  Likewise ``truncated_svd(X, k)`` of :data:`SVD_SHAPE` against scikit-learn's
  ``randomized_svd(X, k, random_state=0)`` and the copy + ours. The peer rows carry
  ``ours_speedup`` (their median over ours) and ``target_speedup`` (the issue's 3x), the copy
  rows ``ours_over_copy`` (ours over theirs) and ``target_max`` (1.5); ``meets`` says whether
  the bar holds.
* CuPy in, ``PCA(k, svd_solver=s)`` for ``s`` in :data:`SOLVERS` (:data:`CUPY_SHAPES`):
  ``gpulinalg PCA (cupy in)`` and scikit-learn's PCA on the same CuPy array under
  ``array_api_dispatch=True`` with the same solver (``ours_speedup``). ``bandwidth bound``: two
  whole-array ``cupy.sum(X)`` passes (CUB's device reduction: reading ``X`` twice near the
  card's bandwidth, ``GB_per_s``; CuPy's ``sum(axis=0)`` of a C-ordered ``X`` is a strided
  column reduction, far from it); our rows' ``over_bound`` is their median over it.
* ``TruncatedSVD(k, random_state=0).fit_transform`` of the CuPy :data:`SVD_SHAPE` array.

Accuracy: scikit-learn's PCA rows have ``evr_diff`` (the largest absolute difference of
``explained_variance_ratio_`` from ours) and ``evr_within`` (``<= EVR_TOL``); the SVD rows
``s_rel_diff`` (singular values, relative to the largest). Timed rows: the cold first call
``cold_s`` and the warm median ``median_s`` of up to ``--repeat`` synchronized calls
(``--cpu-repeat`` for scikit-learn on the CPU), fewer once ``--budget-s`` runs short; ours have
``where`` and the rest of ``gpulinalg.last_run()`` (the fit's record). CuPy's pools are emptied
between rows. A step that cannot run (no GPU, no array-API support, a failure, the budget
spent) is an absent row with the reason. scikit-learn's array-API dispatch needs
``SCIPY_ARRAY_API=1`` before SciPy is imported: :func:`main` sets it when SciPy is not imported
yet.

Without a GPU (or with ``--cpu``) the CPU rows run and the GPU rows are absent;
``--shapes 2000x50:5 --svd-shape 3000x60:8`` is the CPU test's small run
(``tests/benchmarks/test_benchmarks_pca_sklearn.py``).
"""

import argparse
import gc
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks import _harness
from benchmarks._harness import Budget, absent, have, row, timed_sync

SUITE = "pca_sklearn"
NUMPY_SHAPES = ((1_000_000, 200, 20), (200_000, 1_000, 50))
CUPY_SHAPES = ((1_000_000, 100, 10), (1_000_000, 200, 20), (200_000, 1_000, 50))
SVD_SHAPE = (500_000, 2_000, 32)
SOLVERS = ("auto", "covariance_eigh", "randomized")
RANK, DECAY, NOISE, SEED = 40, 0.9, 0.1, 0
#: The issue's bars: ours (NumPy in) at least this much faster than scikit-learn on the CPU ...
TARGET_SPEEDUP = 3.0
#: ... and at most this much slower than copying to CuPy first.
TARGET_MAX_OVER_COPY = 1.5
EVR_TOL = 1e-4
BUDGET_S = 130.0
OURS_NP, SK_CPU, COPY = "gpulinalg PCA (numpy in)", "sklearn PCA (cpu)", \
    "cupy.asarray + gpulinalg PCA"
OURS_CP, SK_XP = "gpulinalg PCA (cupy in)", "sklearn PCA (array API, cupy in)"
BOUND = "bandwidth bound: 2 x cupy.sum(X)"
OURS_SVD, SK_SVD, COPY_SVD = "gpulinalg truncated_svd (numpy in)", \
    "sklearn randomized_svd (cpu)", "cupy.asarray + gpulinalg truncated_svd"


def make_data(n, d, rank=RANK, seed=SEED, block=8192):
    """The float32 ``(n, d)`` matrix of the module notes; temporaries of a few blocks only."""
    r = min(rank, d)
    ss = np.random.SeedSequence([seed, n, d])
    scale = (DECAY ** np.arange(r, dtype=np.float32))[:, None]
    w = scale * np.random.default_rng(ss).standard_normal((r, d), dtype=np.float32)
    x = np.empty((n, d), np.float32)
    starts = range(0, n, block)

    def fill(i0, child):
        g, rows = np.random.default_rng(child), slice(i0, min(i0 + block, n))
        np.matmul(g.standard_normal((rows.stop - i0, r), dtype=np.float32), w, out=x[rows])
        noise = g.standard_normal((rows.stop - i0, d), dtype=np.float32)
        noise *= NOISE
        x[rows] += noise
    # NumPy's generators and BLAS release the GIL: threads fill the blocks in parallel
    with ThreadPoolExecutor(min(16, os.cpu_count() or 1)) as pool:
        list(pool.map(fill, starts, ss.spawn(len(starts))))
    return x


def parse_shapes(text):
    """``"2000x50:5,..."`` -> ``((2000, 50, 5), ...)``."""
    out = []
    for spec in text.split(","):
        size, k = spec.split(":")
        n, d = size.lower().split("x")
        out.append((int(n), int(d), int(k)))
    return tuple(out)


class _Device:
    """Synchronize and empty CuPy's pools; no-ops on the CPU."""

    def __init__(self, gpu):
        self.cupy = None
        if gpu:
            import cupy
            self.cupy = cupy

    def sync(self):
        if self.cupy is not None:
            self.cupy.cuda.get_current_stream().synchronize()
            self.cupy.cuda.Device().synchronize()

    def reset(self):
        """Free what the last row left (its arrays and CuPy's cached blocks)."""
        gc.collect()
        if self.cupy is not None:
            self.sync()
            self.cupy.get_default_memory_pool().free_all_blocks()
            self.cupy.get_default_pinned_memory_pool().free_all_blocks()


def _record():
    """``where`` and the scalar details of ``gpulinalg.last_run()``."""
    import gpulinalg
    rec = gpulinalg.last_run()
    if rec is None:
        return {}
    return {"where": rec.backend, "op": rec.op, "fell_back": rec.fell_back,
            **{k: v for k, v in (rec.details or {}).items()
               if isinstance(v, (str, int, float, bool))}}


def _step(case, impl, budget, fn):
    """:func:`benchmarks._harness.guarded` for this suite."""
    return _harness.guarded(SUITE, case, impl, budget, fn)


def _fitted(model, X):
    """``model`` after ``fit_transform(X)`` (the timed call)."""
    model.fit_transform(X)
    return model


def _array_api_why():
    """Why scikit-learn cannot dispatch on CuPy arrays here, or ``None``."""
    import sklearn
    try:
        with sklearn.config_context(array_api_dispatch=True):
            pass
    except (ImportError, RuntimeError) as exc:  # no array_api_compat, old SciPy, no env var
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return None


class _Run:
    """One run's settings, device, budget and the figures rows compare with (``got``)."""

    def __init__(self, gpu, why, repeat, cpu_repeat, budget_s):
        self.dev, self.why, self.budget = _Device(gpu), why, Budget(budget_s)
        self.repeat, self.cpu_repeat = repeat, cpu_repeat

    def timed(self, fn, repeat=None):
        return timed_sync(fn, self.repeat if repeat is None else repeat, wait=self.dev.sync,
                          budget=self.budget)

    def step(self, case, impl, fn, gpu=False):
        if gpu and self.dev.cupy is None:
            return [absent(SUITE, case, impl, self.why)]
        self.dev.reset()
        out = _step(case, impl, self.budget, fn)
        self.dev.reset()
        return out


def _fields(n, d, k, solver, package):
    return dict(shape=f"{n}x{d}", k=k, dtype="float32", solver=solver, input=package)


def _vs(ours, peer_s, key="ours_speedup"):
    """The speedup fields of a peer row (``{}`` where ours did not run)."""
    if ours is None:
        return {}
    if key == "ours_speedup":
        s = peer_s / ours
        return {"ours_speedup": s, "target_speedup": TARGET_SPEEDUP, "meets": s >= TARGET_SPEEDUP}
    s = ours / peer_s
    return {"ours_over_copy": s, "target_max": TARGET_MAX_OVER_COPY,
            "meets": s <= TARGET_MAX_OVER_COPY}


def _np(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)  # CuPy -> NumPy


def _evr(ours, theirs):
    diff = float(np.abs(_np(ours) - _np(theirs)).max())
    return {"evr_diff": diff, "evr_within": diff <= EVR_TOL}


def numpy_pca(run, X, k):
    """Section 1: NumPy in, default backend and solver; ours, scikit-learn, copy + ours."""
    from sklearn.decomposition import PCA as SkPCA

    from gpulinalg.decomp import PCA
    n, d = X.shape
    case, f, got = f"numpy in {n}x{d} k={k}", _fields(n, d, k, "auto", "numpy"), {}

    def ours():
        t, m = run.timed(lambda: _fitted(PCA(k, random_state=SEED), X))
        got.update(s=t["median_s"], evr=m.explained_variance_ratio_)
        return [row(SUITE, case, OURS_NP, t, **f, **_record(), resolved=m.fit_svd_solver_)]

    def sklearn_cpu():
        t, m = run.timed(lambda: _fitted(SkPCA(k, random_state=SEED), X), run.cpu_repeat)
        acc = _evr(got["evr"], m.explained_variance_ratio_) if "evr" in got else {}
        return [row(SUITE, case, SK_CPU, t, **f, where="cpu", resolved=m._fit_svd_solver,
                    **_vs(got.get("s"), t["median_s"]), **acc)]

    def copy():
        cupy = run.dev.cupy
        t, m = run.timed(lambda: _fitted(PCA(k, random_state=SEED), cupy.asarray(X)))
        acc = _evr(got["evr"], m.explained_variance_ratio_) if "evr" in got else {}
        return [row(SUITE, case, COPY, t, **f, **_record(),
                    **_vs(got.get("s"), t["median_s"], "copy"), **acc)]
    return (run.step(case, OURS_NP, ours) + run.step(case, SK_CPU, sklearn_cpu)
            + run.step(case, COPY, copy, gpu=True))


def numpy_svd(run, X, k):
    """Section 1: ``truncated_svd`` of NumPy ``X`` against ``randomized_svd`` and copy + ours."""
    from sklearn.utils.extmath import randomized_svd

    from gpulinalg.decomp import truncated_svd
    n, d = X.shape
    case, f, got = f"truncated_svd numpy in {n}x{d} k={k}", _fields(n, d, k, "auto", "numpy"), {}

    def s_diff(s):
        if "sv" not in got:
            return {}
        ref = _np(got["sv"])
        return {"s_rel_diff": float(np.abs(_np(s) - ref).max() / ref[0])}

    def ours():
        t, (_, s, _) = run.timed(lambda: truncated_svd(X, k, random_state=SEED))
        got.update(s=t["median_s"], sv=s)
        return [row(SUITE, case, OURS_SVD, t, **f, **_record())]

    def peer():
        t, (_, s, _) = run.timed(lambda: randomized_svd(X, k, random_state=SEED), run.cpu_repeat)
        return [row(SUITE, case, SK_SVD, t, **f, where="cpu",
                    **_vs(got.get("s"), t["median_s"]), **s_diff(s))]

    def copy():
        cupy = run.dev.cupy
        t, (_, s, _) = run.timed(lambda: truncated_svd(cupy.asarray(X), k, random_state=SEED))
        return [row(SUITE, case, COPY_SVD, t, **f, **_record(),
                    **_vs(got.get("s"), t["median_s"], "copy"), **s_diff(s))]
    return (run.step(case, OURS_SVD, ours) + run.step(case, SK_SVD, peer)
            + run.step(case, COPY_SVD, copy, gpu=True))


def cupy_pca(run, X, k):
    """Section 2: CuPy in, each solver: ours and scikit-learn's array-API PCA; the bound."""
    n, d = X.shape
    base = f"cupy in {n}x{d} k={k}"
    if run.dev.cupy is None:
        return [absent(SUITE, f"{base} solver={s}", impl, run.why)
                for s in SOLVERS for impl in (OURS_CP, SK_XP)] + [absent(SUITE, base, BOUND,
                                                                         run.why)]
    import sklearn
    from sklearn.decomposition import PCA as SkPCA

    from gpulinalg.decomp import PCA
    cupy, got = run.dev.cupy, {}
    Xc = cupy.asarray(X)

    def bound():
        t, _ = run.timed(lambda: (cupy.sum(Xc), cupy.sum(Xc)))
        got["bound"] = t["median_s"]
        return [row(SUITE, base, BOUND, t, **_fields(n, d, k, "-", "cupy"),
                    GB_per_s=2 * Xc.nbytes / t["median_s"] / 1e9)]
    rows = run.step(base, BOUND, bound, gpu=True)
    no_xp = _array_api_why()
    for solver in SOLVERS:
        case, f = f"{base} solver={solver}", _fields(n, d, k, solver, "cupy")

        def ours(solver=solver, case=case, f=f):
            t, m = run.timed(lambda: _fitted(PCA(k, svd_solver=solver, random_state=SEED), Xc))
            got.update(s=t["median_s"], evr=m.explained_variance_ratio_)
            over = {"over_bound": t["median_s"] / got["bound"]} if "bound" in got else {}
            return [row(SUITE, case, OURS_CP, t, **f, **_record(), resolved=m.fit_svd_solver_,
                        **over)]

        def peer(solver=solver, case=case, f=f):
            if no_xp is not None:
                return [absent(SUITE, case, SK_XP, no_xp)]
            with sklearn.config_context(array_api_dispatch=True):
                t, m = run.timed(lambda: _fitted(
                    SkPCA(k, svd_solver=solver, random_state=SEED), Xc))
            speed = {"ours_speedup": t["median_s"] / got["s"]} if "s" in got else {}
            acc = _evr(got["evr"], m.explained_variance_ratio_) if "evr" in got else {}
            return [row(SUITE, case, SK_XP, t, **f, where="gpu", resolved=m._fit_svd_solver,
                        **speed, **acc)]
        got.pop("s", None)  # a failed row of ours must not lend the peer the last one's
        got.pop("evr", None)
        rows += run.step(case, OURS_CP, ours, gpu=True) + run.step(case, SK_XP, peer, gpu=True)
    return rows


def cupy_truncated_svd(run, X, k):
    """Section 3: the ``TruncatedSVD`` estimator on a CuPy array."""
    n, d = X.shape
    case, impl = f"TruncatedSVD cupy in {n}x{d} k={k}", "gpulinalg TruncatedSVD (cupy in)"

    def ours():
        from gpulinalg.decomp import TruncatedSVD
        Xc = run.dev.cupy.asarray(X)
        t, _ = run.timed(lambda: _fitted(TruncatedSVD(k, random_state=SEED), Xc))
        return [row(SUITE, case, impl, t, **_fields(n, d, k, "randomized", "cupy"),
                    **_record())]
    return run.step(case, impl, ours, gpu=True)


def run(shapes=None, svd_shape=SVD_SHAPE, repeat=3, cpu_repeat=1, budget_s=BUDGET_S,
        cpu=False):
    """The rows of the module notes; ``shapes`` (``(n, d, k)``s) replaces both sections'
    PCA shapes; ``cpu`` keeps everything on NumPy."""
    import gpulinalg
    why = "CPU run (--cpu)" if cpu else None
    if why is None and not have("cupy"):
        why = "cupy not installed"
    if why is None and not gpulinalg.gpu_available():
        why = "no GPU"
    run_ = _Run(why is None, why, repeat, cpu_repeat, budget_s)
    numpy_shapes = NUMPY_SHAPES if shapes is None else tuple(shapes)
    cupy_shapes = CUPY_SHAPES if shapes is None else tuple(shapes)
    rows = []
    with gpulinalg.config_context(**({"backend": "cpu"} if cpu else {})):
        for shape in dict.fromkeys(cupy_shapes + numpy_shapes):  # each X made once
            X, k = make_data(*shape[:2]), shape[2]
            if shape in numpy_shapes:
                rows += numpy_pca(run_, X, k)
            if shape in cupy_shapes:
                rows += cupy_pca(run_, X, k)
            del X
            run_.dev.reset()
        X, k = make_data(*svd_shape[:2]), svd_shape[2]
        rows += numpy_svd(run_, X, k) + cupy_truncated_svd(run_, X, k)
    return rows


def page_summary(rows):
    """A Markdown table of the comparisons in ``rows`` (this suite's): each peer row with our
    median, its median, the ratio and its bar, the accuracy, and (CuPy in) our median over the
    bandwidth bound; absent rows' reasons below.
    :mod:`benchmarks.report` puts it above the full table."""
    rows = [r for r in rows if r.get("suite") == SUITE]
    ours = {r["case"]: r for r in rows if r["impl"].startswith("gpulinalg") and "median_s" in r}

    def secs(r):
        return f"{r['median_s']:.3g}" if "median_s" in r else "absent"
    lines = ["| case | ours s | peer | peer s | ratio | bar | meets | accuracy | ours / bound |",
             "|---" * 9 + "|"]
    for r in rows:
        if r["impl"].startswith("gpulinalg") or "absent" in r:
            continue
        mine = ours.get(r["case"], {})
        if "ours_over_copy" in r:
            ratio, bar = f"ours/copy {r['ours_over_copy']:.2f}x", f"<= {r['target_max']:g}x"
        elif "ours_speedup" in r:
            ratio = f"speedup {r['ours_speedup']:.2f}x"
            bar = f">= {r['target_speedup']:g}x" if "target_speedup" in r else "-"
        else:
            ratio, bar = "-", "-"
        meets = {True: "yes", False: "**no**"}.get(r.get("meets"), "-")
        acc = next((f"{key} {r[key]:.2g}" for key in ("evr_diff", "s_rel_diff") if key in r),
                   f"{r['GB_per_s']:.0f} GB/s" if "GB_per_s" in r else "-")
        lines.append(f"| {r['case']} | {secs(mine) if mine else '-'} | {r['impl']} | "
                     f"{secs(r)} | {ratio} | {bar} | {meets} | {acc} | "
                     + (f"{mine['over_bound']:.2f}x |" if "over_bound" in mine else "- |"))
    notes = [f"- {r['case']}, {r['impl']}: {r['absent']}" for r in rows if "absent" in r]
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks pca_sklearn",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", type=parse_shapes, default=None,
                   help="NxD:K,... for both PCA sections (default: the issue's shapes)")
    p.add_argument("--svd-shape", type=parse_shapes, default=(SVD_SHAPE,),
                   help="NxD:K of the truncated SVD rows (default 500000x2000:32)")
    p.add_argument("--repeat", type=int, default=3, help="warm calls of our and GPU rows")
    p.add_argument("--cpu-repeat", type=int, default=1, help="warm calls of scikit-learn's "
                                                             "CPU rows")
    p.add_argument("--budget-s", type=float, default=BUDGET_S,
                   help="seconds after which the remaining steps are absent rows")
    p.add_argument("--cpu", action="store_true", help="NumPy even with a GPU")
    p.add_argument("--json", help="write the rows and the environment here")
    args = p.parse_args(argv)
    if "scipy" not in sys.modules:  # scikit-learn's array-API dispatch needs it before SciPy
        os.environ.setdefault("SCIPY_ARRAY_API", "1")
    _harness.run_keeping_rows(lambda: run(args.shapes, args.svd_shape[0], args.repeat,
                                          args.cpu_repeat, args.budget_s, args.cpu), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
