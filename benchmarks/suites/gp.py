"""``python -m benchmarks gp``: exact GP regression in 8-D against scikit-learn and GPyTorch.

Sizes n = 2000, 8000, 16000, 32000 (``quick``: 2000 only; the environment variable
``GPULINALG_BENCH_GP_SIZES=2000,8000`` picks others). Kernel
``ConstantKernel() * RBF(ones(8)) + WhiteKernel()`` (10 hyperparameters), float64, targets a
smooth function plus noise, 1000 test points. Per size:

* ``lml+grad``: one log-marginal-likelihood + gradient evaluation at the initial theta;
* ``fit``: a full fit, L-BFGS-B from the kernel's initial theta (every implementation runs
  SciPy's L-BFGS-B; ``nfev`` is its number of objective evaluations);
* ``predict+std``: posterior mean and standard deviation at the test points.

Peers, same run: scikit-learn's ``GaussianProcessRegressor`` on the CPU, measured while one
LML evaluation is predicted to take at most ``SK_EVAL_CAP_S`` and a fit at most
``SK_FIT_CAP_S``; beyond that its times are *extrapolated* (``extrapolated: true``) from a fit
``t(n) = a n^2 + b n^3`` to the measured LML evaluations (a full run first times it at the
``SK_CALIBRATION`` sizes, so that its n^2 and n^3 parts separate), times our fit's ``nfev``
for a fit. GPyTorch's exact GP on the same GPU in float64, in exact (Cholesky) mode, its fit
driven by the same SciPy L-BFGS-B over its raw parameters (extrapolated likewise beyond
``GPYTORCH_FIT_CAP_S``). Every fit row carries the fitted log marginal likelihood (over all n
points) and the test RMSE, so speed is compared at equal accuracy. The caps keep a full run
to about three minutes on an H200 with 16 CPU cores; rows are echoed to stderr as they come.
"""

import json
import os
import sys
import time

import numpy as np

from benchmarks._harness import absent, have, row, time_cpu, time_wall_gpu

SUITE = "gp"
SIZES = (2000, 8000, 16000, 32000)
D, N_TEST = 8, 1000
SK_EVAL_CAP_S, SK_FIT_CAP_S, SK_FIT_CAP_QUICK_S = 15.0, 30.0, 15.0
#: Sizes scikit-learn is timed at first in a full run, to calibrate its extrapolation.
SK_CALIBRATION = (1000, 3000)
#: GPyTorch's fit is measured while it is predicted under this (else extrapolated too).
GPYTORCH_FIT_CAP_S = 60.0
_TORCH_DEVICE = "cuda"


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    w = np.linspace(0.5, 2.0, D)

    def f(x):
        return np.sin(2 * np.pi * x @ (w / D)) + 0.5 * np.cos(3 * x[:, 0] * x[:, 1])
    x = rng.uniform(0, 1, (n, D))
    xt = rng.uniform(0, 1, (N_TEST, D))
    return x, f(x) + 0.1 * rng.standard_normal(n), xt, f(xt)


def kernel():
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    return ConstantKernel(1.0) * RBF(np.ones(D)) + WhiteKernel(1.0)


class CountingLBFGSB:
    """SciPy's L-BFGS-B exactly as scikit-learn calls it, remembering ``nfev``, the seconds
    spent inside the objective (``eval_s``) and inside the whole optimizer call
    (``optimizer_s``)."""

    def __init__(self):
        self.nfev, self.eval_s, self.optimizer_s = 0, 0.0, 0.0

    def __call__(self, obj_func, initial_theta, bounds):
        import scipy.optimize

        def timed(theta):
            t0 = time.perf_counter()
            out = obj_func(theta)
            self.eval_s += time.perf_counter() - t0
            return out
        t0 = time.perf_counter()
        res = scipy.optimize.minimize(timed, initial_theta, method="L-BFGS-B", jac=True,
                                      bounds=bounds)
        self.optimizer_s += time.perf_counter() - t0
        self.nfev += res.nfev
        return res.x, res.fun


def _sizes(quick):
    env = os.environ.get("GPULINALG_BENCH_GP_SIZES")
    if env:
        return tuple(int(s) for s in env.split(","))
    return (2000,) if quick else SIZES


def run(quick=False):
    if not have("sklearn"):
        return [absent(SUITE, "gp", "all", "scikit-learn not installed")]
    import gpulinalg
    if not gpulinalg.gpu_available():
        return [absent(SUITE, "gp", "gpulinalg", "no GPU")]
    rows, sk_evals = [], {}
    sizes = _sizes(quick)
    if max(sizes) > max(SK_CALIBRATION):
        rows += _progress(_sklearn_calibration(sk_evals))
    for n in sizes:
        data = make_data(n)
        ours = _ours(n, data, quick)
        rows += _progress(ours["rows"])
        rows += _progress(_sklearn(n, data, quick, sk_evals, ours))
        del ours["gp"]  # frees its device-resident arrays before GPyTorch runs
        _free()
        rows += _progress(_gpytorch(n, data, quick, ours))
        _free()
    return rows


def _reps(n):
    """Repetitions of the timed GPU evaluations: fewer where one takes seconds."""
    return dict(warmup=1, repeat=3) if n <= 8000 else dict(warmup=1, repeat=2)


def _progress(rows):
    """Echo rows to stderr as they come, so that a run cut short still leaves its figures."""
    for r in rows:
        print("gp row:", json.dumps(r, default=str), file=sys.stderr, flush=True)
    return rows


def _free():
    import cupy
    cupy.get_default_memory_pool().free_all_blocks()
    if have("torch"):
        import torch
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _rmse(pred, truth):
    return float(np.sqrt(np.mean((np.asarray(pred) - truth) ** 2)))


def _ours(n, data, quick):
    import gpulinalg
    from gpulinalg.gp import GaussianProcessRegressor
    x, y, xt, ft = data
    reps = _reps(n)
    probe = GaussianProcessRegressor(kernel(), optimizer=None).fit(x, y)
    theta0 = kernel().theta
    t = time_cpu(lambda: probe.log_marginal_likelihood(theta0, eval_gradient=True), **reps)
    rec = gpulinalg.last_run()
    rows = [row(SUITE, f"lml+grad n={n}", "gpulinalg", t, n=n, where=rec.backend,
                lml=probe.log_marginal_likelihood(theta0))]
    del probe
    opt = CountingLBFGSB()
    gp = GaussianProcessRegressor(kernel(), optimizer=opt)
    tf = time_cpu(lambda: gp.fit(x, y), warmup=0, repeat=1)
    nfev = opt.nfev
    mean, std = gp.predict(xt, return_std=True)
    fit = row(SUITE, f"fit n={n}", "gpulinalg", tf, n=n, nfev=nfev,
              lml=gp.log_marginal_likelihood_value_, test_rmse=_rmse(mean, ft),
              jitter=gp.jitter_, kernel=str(gp.kernel_))
    rows.append(fit)
    tp = time_cpu(lambda: gp.predict(xt, return_std=True), **reps)
    rows.append(row(SUITE, f"predict+std n={n}", "gpulinalg", tp, n=n, m=N_TEST,
                    where=gpulinalg.last_run().backend))
    return {"rows": rows, "lml_s": t["median_s"], "fit_s": tf["median_s"], "nfev": nfev,
            "predict_s": tp["median_s"], "gp": gp, "pred": (mean, std), "fit_row": fit}


def _extrapolate(sk_evals, n):
    """LML-evaluation seconds at ``n`` from ``t = a n^2 + b n^3`` fitted to measured sizes."""
    ns = np.array(sorted(sk_evals), dtype=float)
    ts = np.array([sk_evals[k] for k in sorted(sk_evals)])
    if len(ns) == 1:
        return float(ts[0] * (n / ns[0]) ** 3)
    A = np.stack([ns ** 2, ns ** 3], axis=1)
    coef = np.linalg.lstsq(A, ts, rcond=None)[0]
    est = float(coef[0] * n ** 2 + coef[1] * n ** 3)
    return est if est > 0 else float(ts[-1] * (n / ns[-1]) ** 3)


def _speedups(rows, ours, key_case):
    for r in rows:
        if "median_s" in r and r.get("case", "").startswith(key_case):
            r["ours_speedup"] = r["median_s"] / ours


def _sklearn_eval(n, data, reps):
    """One measured scikit-learn LML + gradient evaluation at the kernel's initial theta."""
    from sklearn.gaussian_process import GaussianProcessRegressor as SK
    x, y = data[0], data[1]
    probe = SK(kernel(), optimizer=None).fit(x, y)
    theta0 = kernel().theta
    t = time_cpu(lambda: probe.log_marginal_likelihood(theta0, eval_gradient=True), **reps)
    return t, probe.log_marginal_likelihood(theta0)


def _sklearn_calibration(sk_evals):
    """scikit-learn at two small sizes, so that extrapolation separates its n^2 work (kernel
    gradient tensor) from its n^3 work (Cholesky, K^-1) instead of scaling everything by n^3."""
    rows = []
    for n in SK_CALIBRATION:
        t, lml = _sklearn_eval(n, make_data(n), dict(warmup=0, repeat=1))
        sk_evals[n] = t["median_s"]
        rows.append(row(SUITE, f"lml+grad n={n}", "sklearn (CPU)", t, n=n, lml=lml,
                        calibration=True))
    return rows


def _sklearn(n, data, quick, sk_evals, ours):
    from sklearn.gaussian_process import GaussianProcessRegressor as SK
    x, y, xt, ft = data
    rows = []
    est_eval = _extrapolate(sk_evals, n) if sk_evals else 0.0
    if est_eval <= SK_EVAL_CAP_S:
        reps = dict(warmup=0, repeat=1) if est_eval > 2 or quick else dict(warmup=1, repeat=2)
        t, lml = _sklearn_eval(n, data, reps)
        sk_evals[n] = t["median_s"]
        rows.append(row(SUITE, f"lml+grad n={n}", "sklearn (CPU)", t, n=n, lml=lml))
    else:
        rows.append(_estimated(f"lml+grad n={n}", est_eval, n))
    per_eval = sk_evals.get(n) or _extrapolate(sk_evals, n)
    cap = SK_FIT_CAP_QUICK_S if quick else SK_FIT_CAP_S
    if per_eval * ours["nfev"] <= cap:
        opt = CountingLBFGSB()
        sk = SK(kernel(), optimizer=opt)
        tf = time_cpu(lambda: sk.fit(x, y), warmup=0, repeat=1)
        mean, std = sk.predict(xt, return_std=True)
        m0, s0 = ours["pred"]
        rows.append(row(SUITE, f"fit n={n}", "sklearn (CPU)", tf, n=n, nfev=opt.nfev,
                        lml=sk.log_marginal_likelihood_value_, test_rmse=_rmse(mean, ft),
                        max_rel_diff_mean=float(np.abs(mean - m0).max() / np.abs(m0).max()),
                        max_rel_diff_std=float(np.abs(std - s0).max() / np.abs(s0).max())))
        tp = time_cpu(lambda: sk.predict(xt, return_std=True), warmup=0, repeat=1)
        rows.append(row(SUITE, f"predict+std n={n}", "sklearn (CPU)", tp, n=n, m=N_TEST))
    else:
        rows.append(_estimated(f"fit n={n}", per_eval * ours["nfev"], n,
                               basis=f"{per_eval:.3g} s per LML evaluation x our nfev "
                                     f"{ours['nfev']}"))
    for case, key in (("lml+grad", "lml_s"), ("fit", "fit_s"), ("predict+std", "predict_s")):
        _speedups(rows, ours[key], f"{case} n=")
    fit = [r for r in rows if r["case"].startswith("fit")]
    if fit:
        ours["fit_row"]["speedup_vs_sklearn"] = fit[0]["median_s"] / ours["fit_s"]
        if n == 16000:
            ours["fit_row"]["target_speedup_vs_sklearn"] = 50.0
    return rows


def _estimated(case, seconds, n, basis="a n^2 + b n^3 fitted to the measured sizes"):
    return {"suite": SUITE, "case": case, "impl": "sklearn (CPU)", "median_s": seconds,
            "n": n, "extrapolated": True, "basis": basis}


# -- GPyTorch ----------------------------------------------------------------------------------

def _gpytorch(n, data, quick, ours):
    if not have("gpytorch"):
        return [absent(SUITE, f"fit n={n}", "gpytorch (GPU, fp64)", "gpytorch not installed")]
    import torch
    try:
        return _gpytorch_rows(n, data, quick, ours)
    except Exception as exc:  # a peer that fails (out of memory, API change) is reported as such
        torch.cuda.empty_cache()
        return [absent(SUITE, f"fit n={n}", "gpytorch (GPU, fp64)",
                       f"failed: {type(exc).__name__}: {exc}")]


def gpytorch_model(tx, ty):
    """GPyTorch's exact GP with the kernel of our benchmarks (scaled RBF ARD, zero mean,
    Gaussian likelihood), in float64 on the tensors' device: ``(model, likelihood)``."""
    import gpytorch
    import torch

    class ExactGP(gpytorch.models.ExactGP):
        def __init__(self, a, b, likelihood):
            super().__init__(a, b, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=tx.shape[1]))

        def forward(self, z):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(z),
                                                             self.covar_module(z))
    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(tx.device, torch.float64)
    model = ExactGP(tx, ty, likelihood).to(tx.device, torch.float64)
    return model, likelihood


def gpytorch_start(tx, ty):
    """GPyTorch's exact GP on the tensors at the start point of our fitted benchmarks (scales
    and noise 1): ``(model, likelihood, mll)``."""
    import gpytorch
    model, likelihood = gpytorch_model(tx, ty)
    model.covar_module.base_kernel.lengthscale = 1.0  # floats: the setters put them on dev
    model.covar_module.outputscale = 1.0
    likelihood.noise = 1.0
    return model, likelihood, gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)


def gpytorch_loss(model, mll, tx, ty, n):
    """GPyTorch's objective as our fits see it: ``loss_and_grad()`` -> ``-lml`` (GPyTorch's
    mll is per point, hence ``* n``) with the parameters' gradients filled in."""
    def loss_and_grad():
        model.zero_grad()
        loss = -mll(model(tx), ty) * n
        loss.backward()
        return loss
    return loss_and_grad


def _gpytorch_setup(x, y):
    import torch

    dev = torch.device(_TORCH_DEVICE)
    tx = torch.as_tensor(x, device=dev)
    ty = torch.as_tensor(y, device=dev)
    return (*gpytorch_start(tx, ty), tx, ty)


def exact_mode(exact=True):
    """GPyTorch's settings for its exact path (Cholesky at any size, no fast approximations);
    ``exact=False``: its defaults (conjugate gradients above ``max_cholesky_size``)."""
    import contextlib

    import gpytorch
    stack = contextlib.ExitStack()
    if exact:
        stack.enter_context(gpytorch.settings.max_cholesky_size(10 ** 9))
        stack.enter_context(gpytorch.settings.fast_computations(False, False, False))
        stack.enter_context(gpytorch.settings.fast_pred_var(False))
    return stack


def _gpytorch_rows(n, data, quick, ours):
    import torch
    x, y, xt, ft = data
    impl = "gpytorch (GPU, fp64)"
    model, likelihood, mll, tx, ty = _gpytorch_setup(x, y)
    params = [p for p in model.parameters() if p.requires_grad]
    loss_and_grad = gpytorch_loss(model, mll, tx, ty, n)
    rows = []
    with exact_mode():
        model.train()
        likelihood.train()
        t = time_wall_gpu(loss_and_grad, **_reps(n))
        lml0 = -float(loss_and_grad().detach())
        rows.append(row(SUITE, f"lml+grad n={n}", impl, t, n=n, lml=lml0))
        per_eval = t["median_s"]
        if per_eval * ours["nfev"] > GPYTORCH_FIT_CAP_S:
            est = per_eval * ours["nfev"]
            rows.append({"suite": SUITE, "case": f"fit n={n}", "impl": impl, "median_s": est,
                         "n": n, "extrapolated": True,
                         "basis": f"{per_eval:.3g} s per evaluation x our nfev {ours['nfev']}"})
        else:
            t0 = time.perf_counter()
            nfev = _gpytorch_lbfgsb(params, loss_and_grad)
            torch.cuda.synchronize()
            tf = time.perf_counter() - t0
            lml = -float(_loss_value(model, likelihood, mll, tx, ty, n))
            model.eval()
            likelihood.eval()
            txt = torch.as_tensor(xt, device=tx.device)

            def predict():
                with torch.no_grad():
                    pred = likelihood(model(txt))
                    return pred.mean, pred.variance.sqrt()
            mean, std = (v.cpu().numpy() for v in predict())
            m0, s0 = ours["pred"]
            rows.append(row(SUITE, f"fit n={n}", impl, {"median_s": tf, "min_s": tf, "runs": 1},
                            n=n, nfev=nfev, lml=lml, test_rmse=_rmse(mean, ft),
                            max_rel_diff_mean=float(np.abs(mean - m0).max() / np.abs(m0).max()),
                            max_rel_diff_std=float(np.abs(std - s0).max() / np.abs(s0).max())))
            tp = time_wall_gpu(predict, warmup=1, repeat=3)
            rows.append(row(SUITE, f"predict+std n={n}", impl, tp, n=n, m=N_TEST))
    for case, key in (("lml+grad", "lml_s"), ("fit", "fit_s"), ("predict+std", "predict_s")):
        _speedups(rows, ours[key], f"{case} n=")
    fit = [r for r in rows if r["case"].startswith("fit")]
    if fit:
        ours["fit_row"]["speedup_vs_gpytorch"] = fit[0]["median_s"] / ours["fit_s"]
    del model, likelihood, mll, tx, ty
    return rows


def _loss_value(model, likelihood, mll, tx, ty, n):
    import torch
    model.train()
    likelihood.train()
    with torch.no_grad():
        return -mll(model(tx), ty) * n


def _gpytorch_lbfgsb(params, loss_and_grad):
    """SciPy L-BFGS-B over GPyTorch's raw (unconstrained) parameters; returns ``nfev``."""
    import scipy.optimize
    import torch
    shapes = [p.shape for p in params]
    sizes = [p.numel() for p in params]

    def assign(vec):
        with torch.no_grad():
            for p, chunk, shape in zip(params, np.split(vec, np.cumsum(sizes)[:-1]), shapes):
                p.copy_(torch.as_tensor(chunk.reshape(shape), device=p.device))

    def objective(vec):
        assign(vec)
        loss = loss_and_grad()
        grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in params])
        return float(loss.detach()), grad.detach().cpu().numpy().astype(np.float64)

    x0 = torch.cat([p.detach().reshape(-1) for p in params]).cpu().numpy()
    res = scipy.optimize.minimize(objective, x0, method="L-BFGS-B", jac=True)
    assign(res.x)
    return int(res.nfev)


# -- report --------------------------------------------------------------------------------------

def markdown(rows):
    """A Markdown table of ``rows`` (this suite's): seconds per case and implementation, with
    the speedup of gpulinalg over each peer, the fitted log likelihood and the test RMSE."""
    impls = ["gpulinalg", "sklearn (CPU)", "gpytorch (GPU, fp64)"]
    cases = list(dict.fromkeys(r["case"] for r in rows if r.get("suite") == SUITE))
    lines = ["| case | " + " | ".join(f"{i} s" for i in impls)
             + " | vs sklearn | vs GPyTorch | LML (ours / sklearn / GPyTorch) | test RMSE |",
             "|---|" + "---|" * (len(impls) + 4)]
    for case in cases:
        got = {r["impl"]: r for r in rows if r.get("case") == case and r.get("suite") == SUITE}
        ours = got.get("gpulinalg", {}).get("median_s")
        cells = []
        for impl in impls:
            r = got.get(impl, {})
            if "median_s" in r:
                cells.append(f"{r['median_s']:.3g}" + (" (extrapolated)" if r.get("extrapolated")
                                                        else ""))
            else:
                cells.append("absent" if "absent" in r else "")
        for impl in impls[1:]:
            r = got.get(impl, {})
            cells.append(f"{r['median_s'] / ours:.3g}x" if ours and "median_s" in r else "")
        lml = " / ".join(f"{got[i]['lml']:.6g}" if "lml" in got.get(i, {}) else "-"
                         for i in impls)
        rmse = " / ".join(f"{got[i]['test_rmse']:.4g}" if "test_rmse" in got.get(i, {}) else "-"
                          for i in impls)
        lines.append(f"| {case} | " + " | ".join(cells) + f" | {lml} | {rmse} |")
    return "\n".join(lines)
