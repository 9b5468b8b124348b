"""The matrix-free GP solver's kernel products on a GPU: the fused kernels (``gp_product.cu``)
against the library route (the kernel plan's row blocks), and one likelihood-and-gradient
evaluation against the Cholesky path and GPyTorch's default exact GP, on
:mod:`benchmarks.suites.gp_scale`'s problem and hyperparameters.

Usage (on the GPU machine)::

    python -m benchmarks gp_cg_fused [--n 50000] [--options JSON] [--json out.json]

Rows (``case`` says ``n``):

* ``product t=...``: one ``K V`` of ``t`` columns, fused float32, fused float64 and the library
  route (float64), with ``err`` (largest difference from the library route over the largest
  entry of ``K |V|``);
* ``preconditioner rank=...``: one pivoted-Cholesky preconditioner (built at every
  evaluation), its pivots by ``gp_pivot.cu`` ("fused pivots") and by the library route;
* ``contract m=...``: one gradient contraction with factors of width ``m``, fused float32
  and float64 and the library route;
* ``lml+grad``: ``log_marginal_likelihood(theta, eval_gradient=True)`` for each option set of
  ``--options`` (a JSON list of ``cg_options`` dicts), the fused route and, for the first
  set, the library route (``custom_kernels=False``): cold and warm median, the record's
  details, ``lml_diff`` (relative, against the Cholesky path's float64 likelihood);
* ``fit``: the model's ``fit`` by ``solver="cg"`` (default options);
* ``--bare``: only ``lml+grad`` of the matrix-free solver (no fit, reference or peer: the
  sizes past them);
* the Cholesky path's evaluation and GPyTorch's, in float32 (its float64 runs out of an
  80 GB card's memory at n = 50 000), as :mod:`benchmarks.suites.gp_scale` times them.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from benchmarks import _harness
from benchmarks.suites import gp_scale

SUITE = "gp_cg_fused"
#: Option sets of the likelihood rows: the suite's own, then lighter ones.
OPTIONS = ({"precond_rank": 300, "n_probes": 128}, {"precond_rank": 300, "n_probes": 32},
           {"precond_rank": 100, "n_probes": 32}, {"precond_rank": 100, "n_probes": 16})


def _event(cp, fn, runs=3):
    """``(median seconds, out)`` of ``fn`` on the current stream, after one warm-up call."""
    out = fn()
    times = []
    for _ in range(runs):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        out = fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times)), out


def kernel_rows(n, ts=(17, 33, 129), ms=(133, 433)):
    """The product and contraction rows (see the module notes)."""
    import cupy as cp

    from gpulinalg._runtime.arrays import to_host
    from gpulinalg._runtime.streams import op_stream
    from gpulinalg.gp._cg_fused_cuda import FusedOperator
    from gpulinalg.gp._kernels_xp import compile_kernel, fused_form
    from gpulinalg.gp._mixed_xp import Operator
    x, _, _ = gp_scale.make_data(n)
    plan = compile_kernel(gp_scale.kernel(), x.shape[1])
    form = fused_form(plan, x.shape[1])
    rows = []
    rng = np.random.default_rng(1)
    with op_stream():
        xd = cp.asarray(x)
        ops = {"library float64": Operator(plan, xd, gp_scale.ALPHA)}
        for dt in (np.float32, np.float64):
            ops[f"fused {np.dtype(dt).name}"] = FusedOperator(form, xd, gp_scale.ALPHA, dt)
        for t in ts:
            v = cp.asarray(rng.standard_normal((n, t)))
            ref = None
            bound = float(ops["library float64"](cp.abs(v)).max())
            for name in ("library float64", "fused float32", "fused float64"):
                sec, out = _event(cp, lambda: ops[name](v), runs=2 if "library" in name else 3)
                if ref is None:
                    ref = out
                err = float(cp.abs(out - ref).max()) / bound
                rows.append(_harness.row(SUITE, f"product t={t} n={n}", name, {"median_s": sec},
                                         err=err, gflops=2e-9 * n * n * t / sec))
        from gpulinalg.gp import _engine_cuda
        from gpulinalg.gp._precond_xp import Preconditioner
        import gpulinalg
        for rank in (100, 300):
            for on in (True, False):
                with gpulinalg.config(custom_kernels=on):
                    sec, _ = _event(cp, lambda: Preconditioner(_engine_cuda, plan, xd,
                                                               gp_scale.ALPHA, rank), runs=2)
                rows.append(_harness.row(SUITE, f"preconditioner rank={rank} n={n}",
                                         "fused pivots" if on else "library", {"median_s": sec}))
        pre = type("NoPre", (), {"G": None, "D": cp.full(n, 1e300),
                                 "dense_rows": lambda self, i0, i1: cp.zeros((i1 - i0, n))})()
        for m in ms:
            a = cp.asarray(rng.standard_normal((n, m)))
            b = cp.asarray(rng.standard_normal((n, m)))
            ref = None
            for name in ("library float64", "fused float32", "fused float64"):
                sec, g = _event(cp, lambda: np.asarray(
                    to_host(ops[name].lml_gradient(a, b, pre, 0.0))), runs=1 if
                    "library" in name else 3)
                ref = g if ref is None else ref
                rows.append(_harness.row(SUITE, f"contract m={m} n={n}", name,
                                         {"median_s": sec},
                                         err=float(np.abs(g - ref).max() / np.abs(ref).max())))
    return rows


def lml_rows(n, option_sets, repeat=2, gpytorch=True):
    """The likelihood rows (see the module notes): one model fitted by ``solver="cg"`` (its
    default options, the fused route), then each evaluation at the kernel's ``theta``."""
    import gpulinalg
    from gpulinalg.gp import GaussianProcessRegressor
    dev = gp_scale._Device(True)
    data = gp_scale.make_data(n)
    x, y, _ = data
    theta = gp_scale.kernel().theta
    case = f"lml+grad n={n}"
    rows, got = [], {}
    with gpulinalg.config(backend="gpu", fallback="raise"):
        gp = GaussianProcessRegressor(gp_scale.kernel(), alpha=gp_scale.ALPHA, optimizer=None,
                                      solver="cg")
        t, _ = _harness.timed_sync(lambda: gp.fit(x, y), 0, wait=dev.sync)
        rows.append(_harness.row(SUITE, f"fit n={n}", "gpulinalg cg", t,
                                 **_details(gpulinalg), **dev.peak()))
        gp.set_params(solver="cholesky")
        dev.reset()
        t, (ref, _) = _harness.timed_sync(lambda: gp.log_marginal_likelihood(theta, True), 0,
                                          wait=dev.sync)
        ref = float(ref)
        rows.append(_harness.row(SUITE, case, "gpulinalg cholesky", t, lml=ref, **dev.peak()))
        gp.set_params(solver="cg")
        for i, options in enumerate(option_sets):
            for on in ((True, False) if i == 0 else (True,)):
                dev.reset()
                gp.set_params(cg_options=options)
                with gpulinalg.config(custom_kernels=on):
                    t, (value, _) = _harness.timed_sync(
                        lambda: gp.log_marginal_likelihood(theta, True), repeat if on else 0,
                        wait=dev.sync)
                    details = _details(gpulinalg)
                got[i, on] = t["median_s"]
                rows.append(_harness.row(
                    SUITE, case, "gpulinalg cg" + ("" if on else " (library route)"), t,
                    options=json.dumps(options), lml=float(value),
                    lml_diff=abs(float(value) - ref) / abs(ref), **details, **dev.peak()))
    if gpytorch and _harness.have("gpytorch"):
        import torch
        dev.reset()
        t, lml, peak = gp_scale._gpytorch_eval(data, torch.float32, dev, repeat,
                                               _harness.Budget(600))
        rows.append(_harness.row(
            SUITE, case, gp_scale.GPYTORCH, t, dtype="float32", lml=lml,
            lml_diff=abs(lml - ref) / abs(ref),
            ours_speedup={json.dumps(o): t["median_s"] / got[i, True]
                          for i, o in enumerate(option_sets)}, **peak))
    return rows


def bare_rows(n, option_sets, repeat=1):
    """``lml+grad`` rows of the matrix-free evaluation alone (no fit, no reference, no
    peer): the dispatch of :func:`gpulinalg.gp._cg_api.log_marginal_likelihood` on CuPy
    inputs, for sizes where the others do not fit or take too long."""
    import cupy as cp

    import gpulinalg
    from gpulinalg.gp import _cg_api
    from gpulinalg.gp._cg_options import cg_options
    from gpulinalg.gp._kernels_xp import compile_kernel
    dev = gp_scale._Device(True)
    x, y, _ = gp_scale.make_data(n)
    plan = compile_kernel(gp_scale.kernel(), x.shape[1])
    xd, yd = cp.asarray(x), cp.asarray(y)
    rows = []
    with gpulinalg.config(backend="gpu", fallback="raise"):
        for options in option_sets:
            dev.reset()
            t, (value, _) = _harness.timed_sync(
                lambda: _cg_api.log_marginal_likelihood(xd, yd, gp_scale.ALPHA, plan, True,
                                                        cg_options(options)),
                repeat, wait=dev.sync)
            rows.append(_harness.row(SUITE, f"lml+grad n={n}", "gpulinalg cg (bare)", t,
                                     options=json.dumps(options), lml=float(value),
                                     **_details(gpulinalg), **dev.peak()))
    return rows


def _details(gpulinalg):
    return {k: v for k, v in gpulinalg.last_run().details.items()
            if k.startswith(("cg_", "n_probes", "precond", "tol", "where"))}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks gp_cg_fused")
    p.add_argument("--n", type=int, default=50000)
    p.add_argument("--options", type=json.loads, default=list(OPTIONS))
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--skip-kernels", action="store_true")
    p.add_argument("--bare", action="store_true",
                   help="only the matrix-free evaluations (bare_rows), no kernel rows")
    p.add_argument("--json")
    args = p.parse_args(argv)

    def go():  # rows reach the file as they are made
        if args.bare:
            bare_rows(args.n, args.options, args.repeat)
            return
        if not args.skip_kernels:
            kernel_rows(args.n)
        lml_rows(args.n, args.options, args.repeat)
    _harness.run_keeping_rows(go, args.json)


if __name__ == "__main__":
    main()
