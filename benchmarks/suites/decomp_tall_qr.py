"""Tall QR (``mode="economic"``): gpulinalg's route (CholeskyQR2 where ``decomp._gpu._batched_plan.
tall_qr`` says so, Householder QR elsewhere), each of its two routes forced, CuPy and torch,
on the same CuPy matrix (standard normal), with each result's backward error
``||A - QR||_F / ||A||_F`` and orthogonality ``||I - Q^H Q||_F``.

``python -m benchmarks.suites.decomp_tall_qr [--shapes m:n:dtype,...] [--json out.json]`` (GPU
only): a cold first call, then the median of ``--repeat`` synchronized calls (``check_finite=True``
for ours, SciPy's default; the peers do not check). Shapes on both sides of
:data:`gpulinalg.decomp._gpu._batched_plan.TALL_QR`'s limits, so the table can be re-derived.
"""

import argparse
import math

from benchmarks import _harness
from benchmarks._harness import absent, gpu_libraries, row
from benchmarks._harness import as_cupy as _as_cupy, rel_err as _rel, timed_sync as _timed

SUITE = "decomp_tall_qr"

SHAPES = [(100000, 500), (1000000, 64), (1000000, 16), (200000, 256), (100000, 128),
          (100000, 64), (50000, 256), (10000, 256), (50000, 1000), (20000, 2000),
          (30000, 3000), (8192, 1024), (4096, 512), (2000, 200), (16384, 4096), (8192, 2048),
          (4000, 1000), (8192, 4096), (4096, 4096)]
DTYPES = ("float32", "float64")


def _forced(limits, gemm_max=None):
    """A call of ``decomp.qr`` with :data:`TALL_QR` set to ``limits`` (and the Gram matrix's
    :data:`GRAM_GEMM_MAX` to ``gemm_max``) for its duration."""
    from gpulinalg import decomp
    from gpulinalg.decomp._gpu import _batched_plan
    from gpulinalg.decomp.qr import _cholqr_cuda

    def call(a):
        kept = _batched_plan.TALL_QR, _cholqr_cuda.GRAM_GEMM_MAX
        _batched_plan.TALL_QR = limits
        if gemm_max is not None:
            _cholqr_cuda.GRAM_GEMM_MAX = gemm_max
        try:
            return decomp.qr(a, mode="economic")
        finally:
            _batched_plan.TALL_QR, _cholqr_cuda.GRAM_GEMM_MAX = kept
    return call


def _case(cp, torch, m, n, dtype, rng, repeat, rows):
    from gpulinalg import decomp, last_run
    case = f"qr {m}x{n} {dtype}"
    a = rng.standard_normal((m, n), dtype=dtype)
    calls = {"ours": lambda: decomp.qr(a, mode="economic"),
             "ours (householder)": lambda: _forced((math.inf, 0))(a),
             "ours (cholesky qr2, syrk)": lambda: _forced((1, math.inf), 0)(a),
             "ours (cholesky qr2, gemm)": lambda: _forced((1, math.inf), math.inf)(a),
             "cupy": lambda: cp.linalg.qr(a, mode="reduced")}
    if torch is not None:
        ta = torch.from_dlpack(a)
        calls["torch"] = lambda: torch.linalg.qr(ta, mode="reduced")
    for label, fn in calls.items():
        try:
            timing, out = _timed(fn, repeat)
            extra = {}
            if label.startswith("ours"):
                extra["route"] = last_run().details.get("qr", "householder")
            q, r = (_as_cupy(cp, x) for x in out)
            eye = cp.eye(n, dtype=dtype)
            rows.append(row(SUITE, case, label, timing, m=m, n=n, dtype=dtype,
                            backward_err=_rel(cp, q @ r - a, a),
                            ortho_err=float(cp.linalg.norm(q.conj().T @ q - eye)), **extra))
        except Exception as exc:  # a failed row is reported, the others still run
            rows.append(absent(SUITE, case, label, f"failed: {type(exc).__name__}: {exc}"[:300]))
        cp.get_default_memory_pool().free_all_blocks()


def run(shapes=None, repeat=5):
    cp, torch, why = gpu_libraries()
    if why:
        return [absent(SUITE, "tall qr", "all", why)]
    rng = cp.random.default_rng(0)
    rows = []
    for m, n, dtype in shapes or [(m, n, d) for m, n in SHAPES for d in DTYPES]:
        start = len(rows)
        _case(cp, torch, m, n, dtype, rng, repeat, rows)
        for line in summary(rows[start:]):  # as it comes: a run cut short still says it
            print(line, flush=True)
    return rows


def summary(rows):
    """One line per case: warm medians in ms, ours over the best peer, errors of ours."""
    by_case = {}
    for r in rows:
        by_case.setdefault(r["case"], {})[r["impl"]] = r
    lines = []
    for case, impls in by_case.items():
        ms = {k: v["median_s"] * 1e3 for k, v in impls.items() if "median_s" in v}
        peers = [ms[k] for k in ("cupy", "torch") if k in ms]
        ours = impls.get("ours", {})
        ratio = ms["ours"] / min(peers) if "ours" in ms and peers else float("nan")
        lines.append(f"{case}: " + ", ".join(f"{k} {v:.4g}" for k, v in ms.items())
                     + f" ms; x{ratio:.2f}; route {ours.get('route')}, err "
                     f"{ours.get('backward_err', float('nan')):.1e}, ortho "
                     f"{ours.get('ortho_err', float('nan')):.1e}")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suites.decomp_tall_qr")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--shapes", help="m:n:dtype,...")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    if args.json:
        _harness.stream_to(args.json + "l")
    shapes = None
    if args.shapes:
        shapes = [(int(m), int(n), d) for m, n, d in (s.split(":") for s in
                                                     args.shapes.split(","))]
    rows = run(shapes, args.repeat)
    if args.json:
        _harness.write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
