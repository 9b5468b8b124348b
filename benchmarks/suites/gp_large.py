"""``python -m benchmarks.suites.gp_large STEP --out DIR``: the GP rows of issue 16, one step per
call (each step a separate process, so that each can be bounded by ``timeout`` and starts with
empty GPU memory). Writes ``DIR/<step>.json`` and prints a one-line summary per row.

Problem: ``d = 6`` inputs uniform on the unit cube, kernel ``C * RBF(ARD) + White``, float64.

Steps:

* ``fixed`` (``--sizes 3000,20000,50000``, ``--m 2000``): fixed-kernel ``fit`` + ``predict``
  (mean and std) of ``GaussianProcessRegressor(optimizer=None)``, cold (first call in the
  process) and warm (median), against GPyTorch's exact GP in float64 (Cholesky, no CG, exact
  predictive variances, the same hyperparameters; model construction + first prediction,
  which is where GPyTorch factors) and scikit-learn (at ``n <= --sklearn-max``); each row
  carries the largest differences of the means and standard deviations from ours, and our
  per-phase times (:func:`benchmarks.suites.gp_phases.fixed_phases`).
* ``fitted`` (``--sizes 3000``): hyperparameters by SciPy's L-BFGS-B from the same start,
  ours against GPyTorch's exact GP (L-BFGS-B over its raw parameters, as
  ``benchmarks.suites.gp``), with the log marginal likelihood each reached and the evaluations. Ours
  fits three times: the first fit in the process (``cold_s``: CuPy compiles the kernels of
  the gradient), then two timed ones; GPyTorch is timed twice after a warm-up fit on the same
  data; each row reports the faster of its two timed fits. Our row carries the seconds spent
  inside the objective (``evals_s``) and outside it (``outside_evals_s``: SciPy, the final
  factorization, validation), the host time per evaluation around the engine
  (:func:`benchmarks.suites.gp_phases.host_overhead`) and the per-phase times of one evaluation
  (:func:`benchmarks.suites.gp_phases.fused_phases`, or ``lml_phases`` for the generic path).
* ``big`` (``--sizes 100000``, ``--m 10000``): our exact GP at n = 100 000 (an 80 GB kernel
  matrix factored in place), fit and predict timed separately, with the GPU memory the pool
  reserved (its high-water mark) and the device's used memory; per-phase times too unless
  ``--no-phases``. Saves the first 1000 predictions for the ``gpytorch-big`` step. With
  ``--precision mixed`` (writes ``big-mixed.json``): the float32 kernel matrix and factor with
  solves refined in float64 (half the memory), its predictions compared with a float64
  ``big`` run's in the same ``--out`` (target: within 1e-6); ``--sizes 150000`` is past
  what float64 can hold on one H200.
* ``gpytorch-big`` (``--mode exact`` or ``default``): GPyTorch at the same n: ``exact`` forces
  Cholesky (expected: out of memory), ``default`` leaves GPyTorch's settings (conjugate
  gradients above ``max_cholesky_size``); the row says what happened and, if it finished, how
  far its predictions are from ours.

Without a GPU everything runs on the CPU (small ``--sizes`` for a smoke test).
"""

import argparse
import os
import signal
import time

import numpy as np

from benchmarks._harness import write_rows
from benchmarks.suites.gp import exact_mode, gpytorch_model, gpytorch_start

D = 6
LENGTH_SCALES = np.linspace(0.5, 1.5, D)
OUTPUT_SCALE, NOISE, ALPHA = 1.0, 0.1, 1e-10


def make_data(n, m, seed=0):
    rng = np.random.default_rng(seed)
    w = np.linspace(0.5, 2.0, D)

    def f(z):
        return np.sin(2 * np.pi * z @ (w / D)) + 0.5 * np.cos(3 * z[:, 0] * z[:, 1])
    x, xq = rng.uniform(0, 1, (n, D)), rng.uniform(0, 1, (m, D))
    return x, f(x) + 0.1 * rng.standard_normal(n), xq


def fixed_kernel():
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    return ConstantKernel(OUTPUT_SCALE) * RBF(LENGTH_SCALES.copy()) + WhiteKernel(NOISE)


def start_kernel():
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    return ConstantKernel(1.0) * RBF(np.ones(D)) + WhiteKernel(1.0)


def _gpu():
    import gpulinalg
    return gpulinalg.gpu_available()


def _sync():
    if _gpu():
        import cupy
        cupy.cuda.Device().synchronize()
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except ImportError:
        pass


def _timed(fn, repeat):
    """``(first_s, warm_median_s, last_result)``: the first call, then ``repeat`` more."""
    out, times = None, []
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        out = fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return times[0], float(np.median(times[1:])) if repeat else times[0], out


def _diff(ours, other):
    (m0, s0), (m1, s1) = ours, other
    return {"max_rel_diff_mean": float(np.abs(m1 - m0).max() / np.abs(m0).max()),
            "max_rel_diff_std": float(np.abs(s1 - s0).max() / np.abs(s0).max())}


def _free():
    if _gpu():
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


# -- ours ---------------------------------------------------------------------------------------

def ours_fixed(x, y, xq):
    from gpulinalg.gp import GaussianProcessRegressor
    gp = GaussianProcessRegressor(fixed_kernel(), alpha=ALPHA, optimizer=None).fit(x, y)
    mean, std = gp.predict(xq, return_std=True)
    return np.asarray(mean), np.asarray(std)


# -- GPyTorch -----------------------------------------------------------------------------------

def _torch_device():
    import torch
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _gpytorch_set_fixed(model, likelihood):
    import torch
    ls = torch.as_tensor(LENGTH_SCALES, dtype=torch.float64).reshape(1, -1)
    model.covar_module.base_kernel.lengthscale = ls.to(model.train_inputs[0].device)
    model.covar_module.outputscale = OUTPUT_SCALE
    likelihood.noise = NOISE + ALPHA


def gpytorch_fixed(x, y, xq, exact=True):
    """Model construction + first posterior (mean, std with the noise) at ``xq``: GPyTorch
    factors the training covariance on the first prediction (its "fit")."""
    import torch
    dev = _torch_device()
    tx, ty, tq = (torch.as_tensor(v, device=dev) for v in (x, y, xq))

    def run():
        model, likelihood = gpytorch_model(tx, ty)
        _gpytorch_set_fixed(model, likelihood)
        model.eval()
        likelihood.eval()
        with torch.no_grad(), exact_mode(exact):
            pred = likelihood(model(tq))
            mean, std = pred.mean, pred.variance.sqrt()
        return mean.cpu().numpy(), std.cpu().numpy()
    return run


def sklearn_fixed(x, y, xq):
    from sklearn.gaussian_process import GaussianProcessRegressor as SK
    gp = SK(fixed_kernel(), alpha=ALPHA, optimizer=None).fit(x, y)
    return gp.predict(xq, return_std=True)


# -- steps --------------------------------------------------------------------------------------

def step_fixed(args):
    from benchmarks.suites.gp_phases import fixed_phases
    rows = []
    for n in args.sizes:
        x, y, xq = make_data(n, args.m)
        repeat = 3 if n <= 20000 else 2
        cold, warm, ours = _timed(lambda: ours_fixed(x, y, xq), repeat)
        _free()
        phases = fixed_phases(x, y, xq, fixed_kernel(), ALPHA)
        _free()
        rows.append({"case": f"fixed fit+predict n={n} m={args.m}", "impl": "gpulinalg",
                     "cold_s": cold, "median_s": warm, "phases_s": phases})
        rows += _peers_fixed(n, args, x, y, xq, ours, warm)
    return rows


def _peers_fixed(n, args, x, y, xq, ours, warm):
    rows = []
    case = f"fixed fit+predict n={n} m={args.m}"
    try:
        import gpytorch  # noqa: F401
        cold, med, theirs = _timed(gpytorch_fixed(x, y, xq), 3 if n <= 20000 else 2)
        rows.append({"case": case, "impl": "gpytorch exact (Cholesky, fp64)", "cold_s": cold,
                     "median_s": med, "ours_speedup": med / warm, **_diff(ours, theirs)})
    except Exception as exc:  # a peer that fails (out of memory, missing) is reported so
        rows.append({"case": case, "impl": "gpytorch exact (Cholesky, fp64)",
                     "absent": f"{type(exc).__name__}: {str(exc)[:200]}"})
    _free()
    if n <= args.sklearn_max:
        cold, med, theirs = _timed(lambda: sklearn_fixed(x, y, xq), 1)
        rows.append({"case": case, "impl": "sklearn (CPU)", "cold_s": cold, "median_s": med,
                     "ours_speedup": med / warm, **_diff(ours, theirs)})
    return rows


def step_fitted(args):
    from benchmarks.suites.gp import CountingLBFGSB
    from benchmarks.suites.gp_phases import fused_phases, host_overhead, lml_phases
    from gpulinalg.gp import GaussianProcessRegressor
    rows = []
    for n in args.sizes:
        x, y, xq = make_data(n, args.m)
        fits = []
        for _ in range(3):  # cold (first in the process: CuPy compiles its kernels), warm x2
            opt = CountingLBFGSB()
            gp = GaussianProcessRegressor(start_kernel(), alpha=ALPHA, optimizer=opt)
            t0 = time.perf_counter()
            gp.fit(x, y)
            _sync()
            fits.append((time.perf_counter() - t0, opt, gp))
        cold_s = fits[0][0]
        ours_s, opt, gp = min(fits[1:], key=lambda f: f[0])
        nfev = opt.nfev
        t0 = time.perf_counter()
        gp.log_marginal_likelihood(gp.kernel_.theta, eval_gradient=True)
        eval_s = time.perf_counter() - t0
        phases = fused_phases(x, y, start_kernel(), ALPHA) or lml_phases(x, y, start_kernel(),
                                                                         ALPHA)
        host = host_overhead(x, y, start_kernel(), ALPHA, repeat=10)
        rows.append({"case": f"fitted n={n}", "impl": "gpulinalg", "median_s": ours_s,
                     "cold_s": cold_s, "warm_fits_s": [f[0] for f in fits[1:]], "nfev": nfev,
                     "per_eval_s": ours_s / max(nfev, 1), "evals_s": opt.eval_s,
                     "optimizer_s": opt.optimizer_s, "outside_evals_s": ours_s - opt.eval_s,
                     "lml": float(gp.log_marginal_likelihood_value_),
                     "one_lml_grad_s": eval_s, "host_overhead_per_eval_s":
                     host["host_overhead_s"], "engine_eval_s": host["engine_s"],
                     "phases_s": phases, "kernel": str(gp.kernel_)})
        del gp, fits
        _free()
        try:
            rows.append(_gpytorch_fitted(x, y, n, ours_s))
        except Exception as exc:
            rows.append({"case": f"fitted n={n}", "impl": "gpytorch exact (Cholesky, fp64)",
                         "absent": f"{type(exc).__name__}: {str(exc)[:200]}"})
        _free()
    return rows


def _gpytorch_fitted(x, y, n, ours_s):
    import torch

    from benchmarks.suites.gp import _gpytorch_lbfgsb, gpytorch_loss
    dev = _torch_device()
    tx, ty = torch.as_tensor(x, device=dev), torch.as_tensor(y, device=dev)

    def fit_once():
        model, likelihood, mll = gpytorch_start(tx, ty)
        params = [p for p in model.parameters() if p.requires_grad]
        loss_and_grad = gpytorch_loss(model, mll, tx, ty, n)
        with exact_mode():
            model.train()
            likelihood.train()
            nfev = _gpytorch_lbfgsb(params, loss_and_grad)
            with torch.no_grad():
                lml = float(mll(model(tx), ty)) * n
        return nfev, lml
    fit_once() if n > 1000 else None  # warm (kernels, cuBLAS handles) on the same n
    runs = []
    for _ in range(2):  # the faster of two timed fits, as for ours
        t0 = time.perf_counter()
        nfev, lml = fit_once()
        _sync()
        runs.append(time.perf_counter() - t0)
    s = min(runs)
    return {"case": f"fitted n={n}", "impl": "gpytorch exact (Cholesky, fp64)", "median_s": s,
            "fits_s": runs, "nfev": nfev, "per_eval_s": s / max(nfev, 1), "lml": lml,
            "ours_speedup": s / ours_s}


def _memory():
    if not _gpu():
        return {}
    import cupy
    free, total = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()
    return {"pool_reserved_GB": pool.total_bytes() / 1e9, "pool_used_GB": pool.used_bytes() / 1e9,
            "device_used_GB": (total - free) / 1e9, "device_total_GB": total / 1e9}


def step_big(args):
    """n = 100 000 (``--sizes``) in ``--precision``: float64, or mixed (a float32 kernel
    matrix and factor, solves refined in float64), whose rows also give the largest
    difference of their predictions from a float64 run's saved in the same ``--out``."""
    from gpulinalg.gp import GaussianProcessRegressor
    mixed = args.precision == "mixed"
    rows = []
    for n in args.sizes:
        x, y, xq = make_data(n, args.m)
        GaussianProcessRegressor(fixed_kernel(), optimizer=None).fit(x[:3000], y[:3000]).predict(
            xq[:100], return_std=True)  # CUDA context, compiled kernels, handles
        _free()
        t0 = time.perf_counter()
        gp = GaussianProcessRegressor(fixed_kernel(), alpha=ALPHA, optimizer=None,
                                      precision=args.precision).fit(x, y)
        _sync()
        fit_s = time.perf_counter() - t0
        after_fit = _memory()
        t0 = time.perf_counter()
        mean, std = gp.predict(xq, return_std=True)
        _sync()
        pred_s = time.perf_counter() - t0
        row = {"case": f"exact GP n={n} m={args.m}",
               "impl": "gpulinalg (mixed)" if mixed else "gpulinalg", "fit_s": fit_s,
               "predict_s": pred_s, "median_s": fit_s + pred_s, "target_s": 30.0,
               "lml": float(gp.log_marginal_likelihood_value_), "memory_after_fit": after_fit,
               "memory_after_predict": _memory(), "std_min": float(np.min(std))}
        mean, std = np.asarray(mean)[:1000], np.asarray(std)[:1000]
        wide = os.path.join(args.out, f"ours_{n}.npz")
        if mixed and os.path.exists(wide):  # against the float64 run's predictions
            with np.load(wide) as ref:
                row.update(_diff((ref["mean"], ref["std"]), (mean, std)), target_diff=1e-6)
        np.savez(os.path.join(args.out, f"ours_mixed_{n}.npz" if mixed else f"ours_{n}.npz"),
                 mean=mean, std=std)
        del gp
        _free()
        if args.phases and not mixed:
            row["phases_s"] = fixed_phases_big(x, y, xq)
        rows.append(row)
    return rows


def fixed_phases_big(x, y, xq):
    from benchmarks.suites.gp_phases import fixed_phases
    out = fixed_phases(x, y, xq, fixed_kernel(), ALPHA)
    _free()
    return out


def step_gpytorch_big(args):
    rows = []
    for n in args.sizes:
        x, y, xq = make_data(n, args.m)
        impl = f"gpytorch ({args.mode} settings, fp64)"
        t0 = time.perf_counter()
        try:
            mean, std = gpytorch_fixed(x, y, xq, exact=args.mode == "exact")()
            s = time.perf_counter() - t0
            row = {"case": f"exact GP n={n} m={args.m}", "impl": impl, "median_s": s}
            ref = os.path.join(args.out, f"ours_{n}.npz")
            if os.path.exists(ref):
                got = np.load(ref)
                row.update(_diff((got["mean"], got["std"]), (mean[:1000], std[:1000])))
        except Exception as exc:
            row = {"case": f"exact GP n={n} m={args.m}", "impl": impl,
                   "absent": f"{type(exc).__name__} after {time.perf_counter() - t0:.1f} s: "
                             f"{str(exc)[:300]}"}
        rows.append(row)
    return rows


STEPS = {"fixed": step_fixed, "fitted": step_fitted, "big": step_big,
         "gpytorch-big": step_gpytorch_big}


def _summary(r):
    keys = ("median_s", "cold_s", "fit_s", "predict_s", "ours_speedup", "nfev", "per_eval_s",
            "evals_s", "outside_evals_s", "host_overhead_per_eval_s", "engine_eval_s", "lml",
            "max_rel_diff_mean", "max_rel_diff_std", "absent")
    parts = [f"{k}={r[k]:.4g}" if isinstance(r.get(k), float) else f"{k}={r[k]}"
             for k in keys if k in r]
    mem = r.get("memory_after_fit", {}).get("pool_reserved_GB")
    if mem is not None:
        parts.append(f"pool_peak_GB={mem:.1f}")
    phases = r.get("phases_s")
    if phases:
        parts.append("phases_ms=" + ",".join(
            f"{k.split(' ')[0]}:{v * 1e3:.1f}" for k, v in phases.items()
            if k not in ("query blocks",)))
    return f"{r['case']} | {r['impl']} | " + " ".join(parts)


def _on_term(signum, frame):
    raise TimeoutError("stopped by SIGTERM (the step's timeout)")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.suites.gp_large")
    p.add_argument("step", choices=sorted(STEPS))
    p.add_argument("--out", default=".")
    p.add_argument("--sizes", default=None)
    p.add_argument("--m", type=int, default=None)
    p.add_argument("--sklearn-max", type=int, default=3000)
    p.add_argument("--mode", choices=("exact", "default"), default="exact")
    p.add_argument("--no-phases", dest="phases", action="store_false")
    p.add_argument("--precision", choices=("float64", "mixed"), default="float64",
                   help="big: the regressor's precision")
    args = p.parse_args(argv)
    defaults = {"fixed": ("3000,20000,50000", 2000), "fitted": ("3000", 2000),
                "big": ("100000", 10000), "gpytorch-big": ("100000", 10000)}[args.step]
    args.sizes = [int(s) for s in (args.sizes or defaults[0]).split(",")]
    args.m = args.m or defaults[1]
    os.makedirs(args.out, exist_ok=True)
    signal.signal(signal.SIGTERM, _on_term)  # `timeout`: record what was measured, then stop
    tail = f"-{args.mode}" if args.step == "gpytorch-big" else \
        "-mixed" if args.step == "big" and args.precision == "mixed" else ""
    path = os.path.join(args.out, f"{args.step}{tail}.json")
    rows = []
    try:
        rows = STEPS[args.step](args)
    finally:
        write_rows(path, rows, step=args.step, gpu=_gpu())
    for r in rows:
        print(_summary(r), flush=True)


if __name__ == "__main__":
    main()
