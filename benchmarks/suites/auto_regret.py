"""``python -m benchmarks auto_regret [--quick] [--budget-s S] [--repeat R] [--ops a,b]
[--json PATH]``: does ``backend="auto"`` (the default: the dispatcher picks the CPU or the GPU
per call) ever pick the slower side?

Cells: every operation of :data:`OPS` (``decomp``'s ``qr``, ``svd``, ``cholesky``,
``cho_solve`` (of ``cho_factor``'s result, made untimed), ``solve_triangular``, ``solve``,
``lu_factor``, ``lstsq``, ``eigh``, ``inv``, ``det``, ``truncated_svd`` (k=10),
``PCA(10).fit_transform``; ``dense.matmul``) on the grid :data:`GRID` (``--quick``:
:data:`QUICK_GRID`): square ``small`` / ``medium`` / ``large``, ``tall`` (``qr`` economic,
``svd`` thin, ``lstsq``, ``truncated_svd``, ``PCA``) and ``batched`` (a stack of small
matrices; all but the low-rank two), float32 and float64, NumPy input and, with a GPU, CuPy
input. Operands (:func:`operands`, seed 0): ``a = G / sqrt(n) + I``, ``spd = G Gᵀ / n + I``,
``tri`` its upper Cholesky factor, ``b`` with 4 columns; tall ``a`` and ``b`` standard normal.

Each cell times three variants of the same call, interleaved round by round (the order turned
every round, :func:`benchmarks._harness.interleaved_sync`) so that machine noise hits them
alike: ``cpu`` (``config_context(backend="cpu")``), ``gpu`` (``backend="gpu",
fallback="raise"``: a GPU that cannot run it is an absent row with the reason, never a silent
CPU run) and ``auto`` (``backend="auto"``). Each row has the cold first call ``cold_s`` and the
median ``median_s`` of ``--repeat`` warm calls (fewer when the budget runs short), every call
synchronized on the GPU, and ``op``, ``kind``, ``shape``, ``dtype``, ``input``, ``ran``
(``gpulinalg.last_run().backend`` of its calls; ``mixed`` when they differ). The ``auto`` row
adds ``cpu_s``, ``gpu_s``, ``best`` (the faster forced side) and ``best_s``, ``regret`` (auto's
median over ``best_s``), ``auto_backend`` (where auto's last call ran: it measures both sides
of a close call first, so ``ran`` may be ``mixed``), ``auto_ran`` (``ran`` of its calls) and
``chose_best`` (``auto_backend`` is the faster side).
Without a GPU the ``gpu`` rows are absent, ``best`` is the CPU and the regret is what deciding
costs. A cell not started when ``--budget-s`` is spent is one absent ``auto`` row.

``no-cuda check`` rows (CPU-only machines): a fresh interpreter imports gpulinalg, makes every
cell's call of the quick grid under ``backend="cpu"`` (``cpu_calls_pull``), then under ``auto``
(``auto_pulls``: what auto added), and reports after each stage which of :data:`WATCHED` are in
``sys.modules`` and whether the CUDA driver (``libcuda``, without which no CUDA context exists) or
runtime (``libcudart``) is mapped into the process (CuPy may carry the CUDA runtime statically, so
the modules are the signal that CUDA was reached for). ``as installed`` uses the environment as it
is; ``CUDA packages not importable`` makes :data:`WATCHED` unimportable (a machine without the CUDA
extras) and lists the imports that were tried. ``no_cuda``: auto imported none of them and loaded
no CUDA library.

The ``summary`` row: ``worst_regret``, ``over_bar`` (cells with a regret over :data:`BAR`),
``wrong_side`` (cells where auto ran on the slower side), the five worst cells. On a GPU
machine: ``python -m benchmarks auto_regret --budget-s 140 --repeat 3 --json PATH``.
"""

import argparse
import json
import os
import subprocess
import sys
import warnings

import numpy as np

from benchmarks import _harness
from benchmarks._harness import Budget, absent, interleaved_sync, row, why_failed

SUITE = "auto_regret"
#: kind -> shapes: square (n, n), tall (m, n), batched (batch, n, n).
GRID = {"small": ((64, 64),), "batched": ((1000, 16, 16),), "medium": ((512, 512),),
        "tall": ((100_000, 64),), "large": ((2048, 2048),)}
QUICK_GRID = {"small": ((48, 48),), "batched": ((20, 8, 8),), "tall": ((2000, 24),)}
DTYPES = ("float32", "float64")
SQUARE, TALL, BATCHED = ("small", "medium", "large"), ("tall",), ("batched",)
#: A regret over this is a cell where auto cost noticeably more than the faster side.
BAR = 1.2
REPEAT, BUDGET_S, K = 5, 600.0, 10
CPU, GPU, AUTO = "cpu", "gpu", "auto"
SETTINGS = {CPU: {"backend": "cpu"}, GPU: {"backend": "gpu", "fallback": "raise"},
            AUTO: {"backend": "auto"}}
#: The modules whose presence means CUDA was reached for.
WATCHED = ("cupy", "cupyx", "nvmath", "cuda", "cuda.bindings")
CHECK_CASE = "auto on a CPU-only machine (fresh process)"


def _qr(L, kind, a):
    return L.decomp.qr(a, mode="economic") if kind == "tall" else L.decomp.qr(a)


def _svd(L, kind, a):
    return L.decomp.svd(a, full_matrices=kind != "tall")


#: op -> (kinds, operand names, call(gpulinalg, kind, *operands)).
OPS = {
    "qr": (SQUARE + TALL + BATCHED, ("a",), _qr),
    "svd": (SQUARE + TALL + BATCHED, ("a",), _svd),
    "cholesky": (SQUARE + BATCHED, ("spd",), lambda L, k, s: L.decomp.cholesky(s)),
    "cho_solve": (SQUARE + BATCHED, ("cf", "b"), lambda L, k, c, b: L.decomp.cho_solve(c, b)),
    "solve_triangular": (SQUARE + BATCHED, ("tri", "b"),
                         lambda L, k, t, b: L.decomp.solve_triangular(t, b)),
    "solve": (SQUARE + BATCHED, ("a", "b"), lambda L, k, a, b: L.decomp.solve(a, b)),
    "lu_factor": (SQUARE + BATCHED, ("a",), lambda L, k, a: L.decomp.lu_factor(a)),
    "lstsq": (SQUARE + TALL + BATCHED, ("a", "b"), lambda L, k, a, b: L.decomp.lstsq(a, b)),
    "eigh": (SQUARE + BATCHED, ("spd",), lambda L, k, s: L.decomp.eigh(s)),
    "inv": (SQUARE + BATCHED, ("a",), lambda L, k, a: L.decomp.inv(a)),
    "det": (SQUARE + BATCHED, ("a",), lambda L, k, a: L.decomp.det(a)),
    "truncated_svd": (SQUARE + TALL, ("a",),
                      lambda L, k, a: L.decomp.truncated_svd(a, K, random_state=0)),
    "PCA.fit_transform": (SQUARE + TALL, ("a",),
                          lambda L, k, a: L.decomp.PCA(K, random_state=0).fit_transform(a)),
    "matmul": (SQUARE + BATCHED, ("a", "a"), lambda L, k, a, c: L.dense.matmul(a, c)),
}


def operands(kind, shape, dtype, seed=0):
    """The NumPy operands of the module notes for one grid point."""
    rng = np.random.default_rng(seed)
    if kind == "tall":
        return {"a": rng.standard_normal(shape).astype(dtype),
                "b": rng.standard_normal((shape[0], 4)).astype(dtype)}
    n = shape[-1]
    g = rng.standard_normal(shape)
    spd = g @ g.swapaxes(-1, -2) / n + np.eye(n)
    return {"a": (g / np.sqrt(n) + np.eye(n)).astype(dtype), "spd": spd.astype(dtype),
            "tri": np.linalg.cholesky(spd).swapaxes(-1, -2).astype(dtype),
            "b": rng.standard_normal(shape[:-1] + (4,)).astype(dtype)}


def on_input(ops, package, cupy=None):
    """``ops`` in ``package`` (``numpy`` or ``cupy``), with ``cf``: ``cho_factor(spd)``."""
    import gpulinalg
    out = {k: cupy.asarray(v) for k, v in ops.items()} if package == "cupy" else dict(ops)
    if "spd" in out:
        out["cf"] = gpulinalg.decomp.cho_factor(out["spd"])
    return out


def cells(grid, ops=tuple(OPS)):
    """``(op, kind, shape, dtype)`` of every cell, kind by kind (cheap kinds first)."""
    return [(op, kind, shape, dtype) for kind, shapes in grid.items() for shape in shapes
            for dtype in DTYPES for op in ops if kind in OPS[op][0]]


def _shape(shape):
    return "x".join(map(str, shape))


def _call(op, kind, args):
    import gpulinalg
    names, fn = OPS[op][1], OPS[op][2]
    values = [args[n] for n in names]
    return lambda: fn(gpulinalg, kind, *values)


class _Run:
    """One run's budget, repeats, and the device (``cupy`` ``None`` without a GPU)."""

    def __init__(self, repeat, budget_s):
        import gpulinalg
        self.repeat, self.budget = repeat, Budget(budget_s)
        self.cupy = None
        if _harness.have("cupy") and gpulinalg.gpu_available():
            import cupy
            self.cupy = cupy
        self.contexts = {v: gpulinalg.config_context(**s) for v, s in SETTINGS.items()}

    def wait(self):
        if self.cupy is not None:
            self.cupy.cuda.get_current_stream().synchronize()

    def variants(self, call):
        def under(ctx):
            def variant():
                with ctx:
                    return call()
            return variant
        return {v: under(ctx) for v, ctx in self.contexts.items()}


def _auto_fields(timings, ran, settled):
    """The ``auto`` row's comparison with the faster forced side (``settled``: the backend of
    auto's last call, where it runs once it has measured both sides)."""
    forced = {v: timings[v]["median_s"] for v in (CPU, GPU) if v in timings}
    if AUTO not in timings or not forced:
        return {}
    best = min(forced, key=forced.get)
    regret = timings[AUTO]["median_s"] / forced[best]
    return {"cpu_s": forced.get(CPU), "gpu_s": forced.get(GPU), "best": best,
            "best_s": forced[best], "regret": regret, "auto_backend": settled,
            "auto_ran": ran.get(AUTO), "chose_best": settled == best}


def measure(run, op, kind, shape, dtype, package, args):
    """The three rows of one cell."""
    import gpulinalg
    case = f"{op} {kind} {_shape(shape)} {dtype} {package}"
    fields = {"op": op, "kind": kind, "shape": _shape(shape), "dtype": dtype, "input": package}
    seen, last = {v: set() for v in SETTINGS}, {}

    def after(v):
        rec = gpulinalg.last_run()
        last[v] = rec.backend if rec is not None else None
        seen[v].add(last[v])
    timings, failed = interleaved_sync(run.variants(_call(op, kind, args)), run.repeat,
                                       wait=run.wait, budget=run.budget, after=after)
    ran = {v: (s.pop() if len(s) == 1 else "mixed") for v, s in seen.items() if s}
    rows = []
    for v in SETTINGS:
        if v in failed:
            rows.append(absent(SUITE, case, v, why_failed(failed[v])))
            continue
        extra = _auto_fields(timings, ran, last.get(AUTO)) if v == AUTO else {}
        rows.append(row(SUITE, case, v, timings[v], **fields, ran=ran.get(v), **extra))
    return rows


def timed_rows(run, grid, ops):
    """Every cell's rows, NumPy input, then (with a GPU) CuPy input; operands made once per
    grid point."""
    rows, made = [], {}
    packages = ("numpy", "cupy") if run.cupy is not None else ("numpy",)
    for op, kind, shape, dtype in cells(grid, ops):
        key = (kind, shape, dtype)
        if key not in made:
            made.clear()
            if run.cupy is not None:
                run.cupy.get_default_memory_pool().free_all_blocks()
            base = operands(kind, shape, dtype)
            made[key] = {p: on_input(base, p, run.cupy) for p in packages}
        for p in packages:
            case = f"{op} {kind} {_shape(shape)} {dtype} {p}"
            rows += _harness.guarded(SUITE, case, AUTO, run.budget, lambda p=p: measure(
                run, op, kind, shape, dtype, p, made[key][p]))
    if run.cupy is None:
        rows.append(absent(SUITE, "cupy input (every cell)", AUTO,
                           "no GPU: CuPy input needs one"))
    return rows


# -- the no-CUDA check ----------------------------------------------------------------------------

def _cuda_state():
    """Which of :data:`WATCHED` are imported, and whether CUDA's libraries are mapped."""
    mods = [m for m in WATCHED if sys.modules.get(m) is not None]
    count = sum(1 for m, v in list(sys.modules.items())
                if v is not None and m.split(".")[0] in {w.split(".")[0] for w in WATCHED})
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
        libs = {"libcuda": "libcuda.so" in maps, "libcudart": "libcudart" in maps}
    except OSError:  # not Linux: unknown
        libs = {"libcuda": None, "libcudart": None}
    return {"modules": mods, "module_count": count, **libs}


class _Blocker:
    """A meta-path finder that makes :data:`WATCHED` unimportable and notes every try."""

    def __init__(self):
        self.tried = []

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {w.split(".")[0] for w in WATCHED}:
            self.tried.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None


def child(blocked=False):
    """The fresh interpreter's side of the check: JSON of each stage's :func:`_cuda_state`."""
    blocker = _Blocker() if blocked else None
    if blocker is not None:
        sys.meta_path.insert(0, blocker)
    out = {"before_import": _cuda_state()}
    import gpulinalg
    out["after_import"] = _cuda_state()
    calls = cells(QUICK_GRID)
    with gpulinalg.config_context(**SETTINGS[CPU]):  # cho_factor's operand: a CPU call too
        made = {(k, s, d): on_input(operands(k, s, d), "numpy") for _, k, s, d in calls}
    backends = {}
    for stage, settings in (("after_cpu_calls", SETTINGS[CPU]), ("after_auto_calls",
                                                                 SETTINGS[AUTO])):
        with warnings.catch_warnings(), gpulinalg.config_context(**settings):
            warnings.simplefilter("ignore")
            for op, kind, shape, dtype in calls:
                _call(op, kind, made[(kind, shape, dtype)])()
                backends[gpulinalg.last_run().backend] = True
        out[stage] = _cuda_state()
    out["auto_backends"] = sorted(backends)
    out["gpu_available"] = gpulinalg.gpu_available()
    out["tried_imports"] = sorted(set(blocker.tried)) if blocker is not None else None
    print(json.dumps(out))


def no_cuda_rows(run):
    """The two ``no-cuda check`` rows (absent with a GPU: there auto is meant to use it)."""
    if run.cupy is not None:
        return [absent(SUITE, CHECK_CASE, "no-cuda check", "a GPU is present")]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rows = []
    for setting, blocked in (("as installed", False), ("CUDA packages not importable", True)):
        def check(blocked=blocked, setting=setting):
            code = f"from benchmarks.suites.auto_regret import child; child({blocked})"
            done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                                  text=True, timeout=300, check=True)
            got = json.loads(done.stdout.strip().splitlines()[-1])
            auto = got["after_auto_calls"]
            new = [m for m in auto["modules"] if m not in got["after_cpu_calls"]["modules"]]
            return [row(SUITE, CHECK_CASE, "no-cuda check", {}, setting=setting,
                        no_cuda=not auto["modules"] and not auto["libcuda"]
                        and not auto["libcudart"],
                        import_pulls=got["after_import"]["modules"],
                        cpu_calls_pull=got["after_cpu_calls"]["modules"],
                        auto_pulls=new, auto_module_count=auto["module_count"],
                        libcuda_loaded=auto["libcuda"], libcudart_loaded=auto["libcudart"],
                        tried_imports=got["tried_imports"], auto_backends=got["auto_backends"],
                        gpu_available=got["gpu_available"])]
        rows += _harness.guarded(SUITE, CHECK_CASE, "no-cuda check", run.budget, check)
    return rows


# -- summary --------------------------------------------------------------------------------------

def summary_row(rows, repeat):
    """The ``summary`` row of the module notes."""
    cells_ = sorted((r for r in rows if r.get("impl") == AUTO and "regret" in r),
                    key=lambda r: -r["regret"])
    worst = [{"case": r["case"], "regret": r["regret"], "auto_backend": r["auto_backend"],
              "best": r["best"], "auto_s": r["median_s"], "best_s": r["best_s"]}
             for r in cells_[:5]]
    return row(SUITE, "all cells", "summary", {}, cells=len(cells_),
               absent_rows=sum(1 for r in rows if "absent" in r),
               worst_regret=cells_[0]["regret"] if cells_ else None, bar=BAR,
               over_bar=sum(1 for r in cells_ if r["regret"] > BAR),
               wrong_side=sum(1 for r in cells_ if not r["chose_best"]), worst=worst,
               repeat=repeat, cpus=os.cpu_count(),
               OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS"))


def run(quick=False, repeat=REPEAT, budget_s=BUDGET_S, ops=tuple(OPS)):
    """The rows of the module notes: the cells, the no-CUDA check, the summary."""
    run_ = _Run(repeat, budget_s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ill-conditioning or residual warnings: timing only
        rows = timed_rows(run_, QUICK_GRID if quick else GRID, ops)
    rows += no_cuda_rows(run_)
    return rows + [summary_row(rows, repeat)]


def page_summary(rows):
    """Markdown for :mod:`benchmarks.report`: the summary, the no-CUDA check, and every cell
    by regret (worst first); absent rows' reasons below."""
    rows = [r for r in rows if r.get("suite") == SUITE]
    lines = []
    for s in (r for r in rows if r["impl"] == "summary"):
        lines.append(f"Worst regret {s['worst_regret']:.3g} over {s['cells']} cells; "
                     f"{s['over_bar']} over {s['bar']}, {s['wrong_side']} on the slower side.")
    for c in (r for r in rows if r["impl"] == "no-cuda check" and "absent" not in r):
        lines.append(f"\nNo-CUDA check ({c['setting']}): no_cuda={c['no_cuda']}; "
                     f"auto pulled {c['auto_pulls'] or 'nothing'}, import pulled "
                     f"{c['import_pulls'] or 'nothing'}, libcuda loaded {c['libcuda_loaded']}.")

    def ms(v):
        return f"{v * 1e3:.3g}" if isinstance(v, (int, float)) else "-"
    lines += ["", "| case | cpu ms | gpu ms | auto ms | best | auto ran | regret | faster side |",
              "|---" * 8 + "|"]
    for r in sorted((r for r in rows if r["impl"] == AUTO and "regret" in r),
                    key=lambda r: -r["regret"]):
        lines.append(f"| {r['case']} | {ms(r['cpu_s'])} | {ms(r['gpu_s'])} | "
                     f"{ms(r['median_s'])} | {r['best']} | {r['auto_backend']} | "
                     f"{r['regret']:.2f} | {'yes' if r['chose_best'] else '**no**'} |")
    reasons = sorted({r["absent"] for r in rows if "absent" in r})
    return "\n".join(lines + ([""] + [f"- absent: {w}" for w in reasons] if reasons else []))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks auto_regret",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the tiny grid (CI)")
    p.add_argument("--repeat", type=int, default=REPEAT, help="warm rounds per cell")
    p.add_argument("--budget-s", type=float, default=BUDGET_S,
                   help="seconds after which the cells not started are absent rows")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated, of the OPS")
    p.add_argument("--json", help="write the rows and the environment here")
    args = p.parse_args(argv)
    _harness.run_keeping_rows(lambda: run(args.quick, args.repeat, args.budget_s,
                                          tuple(args.ops.split(","))), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
