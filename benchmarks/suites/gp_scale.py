"""``python -m benchmarks gp_scale [--sizes 50000,100000] [--json PATH]``: the matrix-free GP
solver (``solver="cg"``) against the Cholesky path and GPyTorch's default exact GP, the proof
of issue 43 at n = 50 000 and 100 000.

Problem (:func:`make_data`): ``n`` training and ``--m`` query points uniform on the unit cube
in ``D = 8`` dimensions, targets ``sin(2 pi x . w / 8) + 0.5 cos(3 x_0 x_1)`` (``w`` from 0.5 to
2) plus Gaussian noise of standard deviation 0.1 (the function of :mod:`benchmarks.suites.gp`),
seed 0. Fixed hyperparameters (:func:`kernel`): ``ConstantKernel(1.0) * RBF(LENGTH_SCALES)
+ WhiteKernel(0.01)``, ``alpha = 1e-10``: near scikit-learn's maximum-likelihood fit at
n = 2000 (rounded), the same for every size and implementation. Ours runs in float64 with
``cg_options=CG_OPTIONS`` (``--cg-options`` takes others as JSON).

Rows per size (``n=``):

* ``fit+predict``: ``fit`` (``optimizer=None``) and ``predict(return_std=True)`` at the query
  points, ``gpulinalg cg`` and the ``gpulinalg cholesky`` reference (float64; where its
  ``n x n`` float64 matrix does not fit the GPU, ``precision="mixed"``, whose predictions
  match float64's to about 1e-10, and the row says ``precision``).
* ``lml+grad``: one ``log_marginal_likelihood(theta, eval_gradient=True)`` of the fitted
  model at the kernel's ``theta``, the cold first call at this size and the warm median
  (``runs`` warm calls, fewer when ``--budget-s`` runs short): ``gpulinalg cg``,
  ``gpulinalg cholesky`` (the same model with ``solver="cholesky"``: a Cholesky fit would
  keep its factor on the GPU, so this evaluation sees the memory it would have alone) and
  ``gpytorch default (CG)``: GPyTorch's exact GP with its default settings (conjugate
  gradients above ``max_cholesky_size``), the same hyperparameters, its loss ``-mll * n``
  and ``backward()``; float64, or float32 where float64 ran out of memory (``dtype`` says
  which). ``ours_speedup`` on the GPyTorch row is its median over ours (cg), the issue's
  target ``SPEEDUP_TARGET``; ``cg_speedup`` on the Cholesky row likewise.
* ``accuracy``: ``gpulinalg cg`` against the Cholesky reference: the largest difference of
  the predictive means over the targets' standard deviation (``mean_diff``), of the
  predictive standard deviations (``std_diff``), the relative difference of the log marginal
  likelihoods (``lml_diff``), each with the issue's tolerance (``TOLERANCES``) and ``within``.

Every timed row has ``where`` (the backend that ran), on a GPU ``peak_gpu_GB`` (the high-water
mark of CuPy's pool, emptied before the row; for GPyTorch torch's ``max_memory_reserved``,
with ``peak_gpu_allocated_GB``), and our cg rows the solver's ``last_run()`` details
(iterations, residuals, probes, the preconditioner's rank). A step that cannot run (no GPU,
no GPyTorch, out of memory, ``--budget-s`` spent) is an absent row with the reason.

On a GPU every call runs there (``backend="gpu"``, ``fallback="raise"``: a size that does not
fit is an absent row, never a CPU run); ``--warmup-n`` (default 2000) first runs every step at
that size, so that a larger size's ``cold_s`` is its first call in a process that compiled
its kernels already (the warm-up's own rows show that first cost). Without a GPU (or with
``--cpu``) everything runs on NumPy, GPyTorch absent: ``--sizes 2000`` checks the accuracy
on the CPU (``tests/benchmarks/test_benchmarks_gp_scale.py``).
"""

import argparse
import gc
import json
import re
import sys

import numpy as np

from benchmarks import _harness
from benchmarks._harness import Budget, absent, have, row, timed_sync

SUITE = "gp_scale"
SIZES = (50000, 100000)
D, M, SEED = 8, 1000, 0
CONSTANT, NOISE, ALPHA = 1.0, 0.01, 1e-10
LENGTH_SCALES = (1.5, 1.2, 1.7, 1.35, 1.25, 1.05, 1.0, 0.85)
#: The matrix-free solver's options: with the GPU's fused pivots a rank-500 preconditioner
#: costs little and leaves a handful of iterations on this problem, and its likelihood is
#: within the bar with 16 probes at n = 50 000 and 100 000 (the performance log has the
#: options compared).
CG_OPTIONS = {"precond_rank": 500, "n_probes": 16}
#: Issue 43's bars: mean (of the targets' standard deviation), std (absolute), lml (relative).
TOLERANCES = {"mean": 1e-4, "std": 1e-3, "lml": 1e-3}
#: Issue 43's bar: per likelihood-and-gradient evaluation, GPyTorch's time over ours (cg).
SPEEDUP_TARGET = 2.0
WARMUP_N = 2000
#: Seconds after which the remaining steps become absent rows (the GPU run's limit is 8 min).
BUDGET_S = 420.0
GPYTORCH = "gpytorch default (CG)"


def make_data(n, m=M, seed=SEED):
    """``(x, y, xq)``: ``n`` training points with targets and ``m`` query points (see the
    module notes); the first ``n`` points of a larger ``n`` are not the same points."""
    rng = np.random.default_rng(seed)
    w = np.linspace(0.5, 2.0, D)

    def f(z):
        return np.sin(2 * np.pi * z @ (w / D)) + 0.5 * np.cos(3 * z[:, 0] * z[:, 1])
    x = rng.uniform(0, 1, (n, D))
    y = f(x) + 0.1 * rng.standard_normal(n)
    return x, y, rng.uniform(0, 1, (m, D))  # drawn last: the training set is the same for any m


def kernel():
    """The fixed kernel of every size and implementation."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    return ConstantKernel(CONSTANT) * RBF(np.array(LENGTH_SCALES)) + WhiteKernel(NOISE)


class _Device:
    """Synchronize, empty and read the peak of CuPy's pool and torch's allocator; all no-ops
    on the CPU."""

    def __init__(self, gpu):
        self.cupy = None
        if gpu:
            import cupy
            self.cupy = cupy

    @staticmethod
    def _torch():
        torch = sys.modules.get("torch")  # only once a peer imported it
        return torch if torch is not None and torch.cuda.is_initialized() else None

    def sync(self):
        if self.cupy is not None:
            self.cupy.cuda.Device().synchronize()
        if self._torch() is not None:
            self._torch().cuda.synchronize()

    def reset(self):
        """Free what the last step left, so that the next row's peak is its own."""
        gc.collect()
        if self.cupy is not None:
            self.sync()
            self.cupy.get_default_memory_pool().free_all_blocks()
        torch = self._torch()
        if torch is not None:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak(self):
        """``{"peak_gpu_GB": ...}`` of CuPy's pool (its high-water mark since :meth:`reset`:
        the pool keeps what it reserved), or ``{}`` on the CPU."""
        if self.cupy is None:
            return {}
        return {"peak_gpu_GB": self.cupy.get_default_memory_pool().total_bytes() / 1e9}


def _timed(fn, dev, repeat, budget):
    """:func:`benchmarks._harness.timed_sync` with this suite's device and time budget."""
    return timed_sync(fn, repeat, wait=dev.sync, budget=budget)


def _cg_details():
    import gpulinalg
    rec = gpulinalg.last_run()
    keys = ("cg_iterations", "cg_iterations_total", "cg_converged", "cg_residual",
            "cg_probe_residual", "precond_rank", "n_probes", "tol")
    details = rec.details or {}
    return {"where": rec.backend, **{k: details[k] for k in keys if k in details}}


def _step(case, impl, budget, fn):
    """:func:`benchmarks._harness.guarded` for this suite."""
    return _harness.guarded(SUITE, case, impl, budget, fn)


# -- ours ---------------------------------------------------------------------------------------

def _regressor(solver, options, precision="float64"):
    from gpulinalg.gp import GaussianProcessRegressor
    return GaussianProcessRegressor(kernel(), alpha=ALPHA, optimizer=None, solver=solver,
                                    cg_options=options if solver == "cg" else None,
                                    precision=precision)


def _fit_predict(model, x, y, xq, dev, budget):
    """``(fields, (mean, std))`` of one ``fit`` and one ``predict(return_std=True)``."""
    t_fit, _ = _timed(lambda: model.fit(x, y), dev, 0, budget)
    details = _cg_details()
    t_pred, (mean, std) = _timed(lambda: model.predict(xq, return_std=True), dev, 0, budget)
    fields = {"fit_s": t_fit["cold_s"], "predict_s": t_pred["cold_s"],
              "median_s": t_fit["cold_s"] + t_pred["cold_s"], "runs": 0, **details,
              **dev.peak()}
    if model.solver == "cg":
        fields["predict_cg_iterations"] = _cg_details().get("cg_iterations_total")
    return fields, (np.asarray(mean), np.asarray(std))


def _ours(n, data, args, dev, budget, got):
    """Our rows of one size; what the accuracy row and the peers need goes into ``got``."""
    x, y, xq = data
    theta = kernel().theta
    fp, lml = f"fit+predict n={n} m={len(xq)}", f"lml+grad n={n}"
    model = _regressor("cg", args.cg_options)

    def cg_fit():
        dev.reset()
        fields, got["cg"] = _fit_predict(model, x, y, xq, dev, budget)
        return [row(SUITE, fp, "gpulinalg cg", fields, n=n, dtype="float64")]

    def cg_lml():
        dev.reset()
        t, (value, grad) = _timed(lambda: model.log_marginal_likelihood(theta, True), dev,
                                  args.repeat, budget)
        got["cg_lml"], got["cg_grad"], got["cg_s"] = float(value), grad, t["median_s"]
        return [row(SUITE, lml, "gpulinalg cg", t, n=n, dtype="float64", lml=float(value),
                    **_cg_details(), **dev.peak())]

    def cholesky_lml():
        dev.reset()
        # the fitted data without a factor on the GPU: a Cholesky fit would keep its n x n one
        model.set_params(solver="cholesky")
        t, (value, grad) = _timed(lambda: model.log_marginal_likelihood(theta, True), dev,
                                  args.repeat, budget)
        got["chol_lml"], got["chol_grad"] = float(value), grad
        extra = {"cg_speedup": t["median_s"] / got["cg_s"]} if "cg_s" in got else {}
        return [row(SUITE, lml, "gpulinalg cholesky", t, n=n, dtype="float64",
                    lml=float(value), where=_cg_details()["where"], **extra, **dev.peak())]

    rows = _step(fp, "gpulinalg cg", budget, cg_fit)
    if "cg" in got:
        rows += _step(lml, "gpulinalg cg", budget, cg_lml)
    rows += _step(lml, "gpulinalg cholesky", budget, cholesky_lml)
    del model
    rows += _step(fp, "gpulinalg cholesky", budget, lambda: _reference(n, data, dev, budget, got))
    dev.reset()
    return rows


def _reference(n, data, dev, budget, got):
    """The Cholesky fit and predictions, float64, else (out of GPU memory) mixed precision."""
    x, y, xq = data
    why = None
    for precision in ("float64", "mixed"):
        dev.reset()
        model = _regressor("cholesky", None, precision)
        try:
            fields, got["ref"] = _fit_predict(model, x, y, xq, dev, budget)
        except MemoryError as exc:
            if precision == "mixed" or dev.cupy is None:
                raise
            why = f"float64: {type(exc).__name__}: {str(exc)[:200]}"
            continue
        got["ref_lml"], got["ref_precision"] = float(model.log_marginal_likelihood_value_), \
            precision
        extra = {"float64_absent": why} if why else {}
        return [row(SUITE, f"fit+predict n={n} m={len(xq)}", "gpulinalg cholesky", fields, n=n,
                    dtype="float64", precision=precision, lml=got["ref_lml"], **extra)]


def accuracy(got, y):
    """The accuracy fields of cg against the Cholesky reference (see the module notes)."""
    (m_cg, s_cg), (m_ref, s_ref) = got["cg"], got["ref"]
    lml_cg = got.get("cg_lml")
    # the float64 evaluation where it ran; a mixed-precision fit's value is ~1e-5 off
    lml_ref, ref_from = (got["chol_lml"], "cholesky lml+grad") if "chol_lml" in got else \
        (got["ref_lml"], f"cholesky fit ({got['ref_precision']})")
    diffs = {"mean_diff": float(np.abs(m_cg - m_ref).max() / np.std(y)),
             "std_diff": float(np.abs(s_cg - s_ref).max())}
    if lml_cg is not None:
        diffs["lml_diff"] = abs(lml_cg - lml_ref) / abs(lml_ref)
    fields = {**diffs, "within": all(diffs[f"{k}_diff"] <= tol for k, tol in TOLERANCES.items()
                                     if f"{k}_diff" in diffs),
              **{f"tol_{k}": tol for k, tol in TOLERANCES.items()},
              "reference": ref_from, "y_std": float(np.std(y)), "lml_cg": lml_cg,
              "lml_cholesky": lml_ref}
    if "cg_grad" in got and "chol_grad" in got:
        g_cg, g_ref = np.asarray(got["cg_grad"]), np.asarray(got["chol_grad"])
        fields.update(grad_max_abs_diff=float(np.abs(g_cg - g_ref).max()),
                      grad_max_abs=float(np.abs(g_ref).max()))
    return fields


# -- GPyTorch -----------------------------------------------------------------------------------

def _gpytorch(n, data, args, dev, budget, got):
    """GPyTorch's rows of one size: float64, or float32 where float64 runs out of memory."""
    case = f"lml+grad n={n}"
    if dev.cupy is None:
        return [absent(SUITE, case, GPYTORCH, "CPU run: GPyTorch is measured on the GPU only")]
    if not have("gpytorch"):
        return [absent(SUITE, case, GPYTORCH, "gpytorch not installed")]
    import torch
    if not torch.cuda.is_available():
        return [absent(SUITE, case, GPYTORCH, "torch has no CUDA")]
    why = []
    for dtype in ("float64", "float32"):
        if budget.left() <= 0:
            why.append("time budget (--budget-s) spent")
            break
        dev.reset()
        try:
            t, lml, peak = _gpytorch_eval(data, getattr(torch, dtype), dev, args.repeat, budget)
        except torch.cuda.OutOfMemoryError as exc:
            why.append(f"{dtype}: out of memory: {str(exc)[:200]}")
            continue
        except Exception as exc:
            why.append(f"{dtype}: failed: {type(exc).__name__}: {str(exc)[:200]}")
            break
        finally:  # after the except clause dropped the traceback, which holds the tensors
            dev.reset()
        extra = {"ours_speedup": t["median_s"] / got["cg_s"],
                 "target_speedup": SPEEDUP_TARGET} if "cg_s" in got else {}
        ref = got.get("chol_lml", got.get("ref_lml"))
        if ref is not None:
            extra["lml_diff"] = abs(lml - ref) / abs(ref)
        if why:
            extra["float64_absent"] = why[0]
        return [row(SUITE, case, GPYTORCH, t, n=n, dtype=dtype, lml=lml, where="gpu",
                    **extra, **peak)]
    return [absent(SUITE, case, GPYTORCH, "; ".join(why))]


def _gpytorch_eval(data, dtype, dev, repeat, budget, device="cuda"):
    """``(timing, lml, peak fields)`` of GPyTorch's loss and ``backward()`` at our
    hyperparameters, its default settings, on tensors of ``dtype`` on ``device``."""
    import gpytorch
    import torch

    from benchmarks.suites.gp import gpytorch_loss, gpytorch_model
    x, y, _ = data
    tx = torch.as_tensor(x, device=device, dtype=dtype)
    ty = torch.as_tensor(y, device=device, dtype=dtype)
    model, likelihood = gpytorch_model(tx, ty)  # float64; ExactGP moves its data along
    model, likelihood = model.to(dtype), likelihood.to(dtype)
    model.covar_module.base_kernel.lengthscale = torch.as_tensor(
        LENGTH_SCALES, device=device, dtype=dtype).reshape(1, -1)
    model.covar_module.outputscale = CONSTANT
    likelihood.noise = NOISE + ALPHA
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    model.train()
    likelihood.train()
    loss_and_grad = gpytorch_loss(model, mll, tx, ty, x.shape[0])
    t, loss = _timed(loss_and_grad, dev, repeat, budget)
    peak = {"peak_gpu_GB": torch.cuda.max_memory_reserved() / 1e9,
            "peak_gpu_allocated_GB": torch.cuda.max_memory_allocated() / 1e9} \
        if device == "cuda" else {}
    return t, -float(loss.detach()), peak


# -- the run ------------------------------------------------------------------------------------

def run(sizes=SIZES, m=M, repeat=2, cg_options=None, warmup_n=WARMUP_N, budget_s=BUDGET_S,
        cpu=False):
    """The rows of every size in ``sizes`` (see the module notes); ``cpu`` forces NumPy."""
    import gpulinalg
    gpu = not cpu and have("cupy") and gpulinalg.gpu_available()
    dev, budget = _Device(gpu), Budget(budget_s)
    args = argparse.Namespace(repeat=repeat, cg_options=dict(
        CG_OPTIONS if cg_options is None else cg_options))
    plan = ([warmup_n] if gpu and warmup_n and warmup_n not in sizes else []) + list(sizes)
    rows = []
    setting = dict(backend="gpu", fallback="raise") if gpu else dict(backend="cpu")
    with gpulinalg.config_context(**setting):
        for n in plan:
            data, got = make_data(n, m), {}
            rows += _ours(n, data, args, dev, budget, got)
            if "cg" in got and "ref" in got:
                rows.append(row(SUITE, f"accuracy n={n} m={m}", "gpulinalg cg vs cholesky",
                                {}, n=n, cg_options=json.dumps(args.cg_options),
                                **accuracy(got, data[1])))
            rows += _gpytorch(n, data, args, dev, budget, got)
    return rows


def page_summary(rows):
    """A Markdown table of ``rows`` (this suite's), one line per size: seconds per
    likelihood-and-gradient evaluation (warm median) of each implementation, GPyTorch's over
    ours, fit + predict of both solvers, the accuracy fields and the peak GPU memory; the
    reasons of absent rows below it. :mod:`benchmarks.report` puts it above the full table."""
    rows = [r for r in rows if r.get("suite") == SUITE]
    sizes = sorted({int(re.search(r"n=(\d+)", r["case"]).group(1)) for r in rows})
    impls = ("gpulinalg cg", "gpulinalg cholesky", GPYTORCH)

    def get(case, impl):
        return next((r for r in rows if r["case"].startswith(case) and r["impl"] == impl), {})

    def secs(r, key="median_s"):
        return f"{r[key]:.3g}" if key in r else ("absent" if "absent" in r else "-")

    def diff(r, key):
        return f"{r[key]:.2g}" if key in r else "-"
    lines = ["| n | lml+grad s: cg | cholesky | GPyTorch (dtype) | GPyTorch / cg "
             "| fit+predict s: cg | cholesky | mean diff | std diff | lml diff | within "
             "| peak GB: cg | cholesky | GPyTorch |", "|---" * 14 + "|"]
    for n in sizes:
        lml = [get(f"lml+grad n={n}", i) for i in impls]
        fp = [get(f"fit+predict n={n} ", i) for i in impls[:2]]
        acc = get(f"accuracy n={n} ", "gpulinalg cg vs cholesky")
        peer = lml[2]
        peer_s = secs(peer) + (f" ({peer['dtype']})" if "dtype" in peer else "")
        ratio = f"{peer['ours_speedup']:.2f}x" if "ours_speedup" in peer else "-"
        within = {True: "yes", False: "**no**"}.get(acc.get("within"), "-")
        peaks = [f"{r['peak_gpu_GB']:.1f}" if "peak_gpu_GB" in r else "-"
                 for r in (lml[0], lml[1], peer)]
        lines.append(f"| {n} | {secs(lml[0])} | {secs(lml[1])} | {peer_s} | {ratio} | "
                     f"{secs(fp[0])} | {secs(fp[1])} | {diff(acc, 'mean_diff')} | "
                     f"{diff(acc, 'std_diff')} | {diff(acc, 'lml_diff')} | {within} | "
                     + " | ".join(peaks) + " |")
    notes = [f"- {r['case']}, {r['impl']}: {r['absent']}" for r in rows if "absent" in r]
    tol = ", ".join(f"{k} {v:g}" for k, v in TOLERANCES.items())
    return "\n".join(lines + ["", f"Tolerances (issue 43): {tol}; GPyTorch / cg target "
                                   f"{SPEEDUP_TARGET:g}x."] + ([""] + notes if notes else []))


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks gp_scale",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="training sizes n")
    p.add_argument("--m", type=int, default=M, help="query points")
    p.add_argument("--repeat", type=int, default=2, help="warm calls per lml+grad row")
    p.add_argument("--cg-options", type=json.loads, default=None,
                   help=f"JSON dict for solver='cg' (default {json.dumps(CG_OPTIONS)})")
    p.add_argument("--warmup-n", type=int, default=WARMUP_N,
                   help="a size run first on the GPU (0: none)")
    p.add_argument("--budget-s", type=float, default=BUDGET_S,
                   help="seconds after which the remaining steps are absent rows")
    p.add_argument("--cpu", action="store_true", help="NumPy even with a GPU")
    p.add_argument("--json", help="write the rows and the environment here")
    args = p.parse_args(argv)
    _harness.run_keeping_rows(lambda: run(
        [int(s) for s in args.sizes.split(",")], args.m, args.repeat, args.cg_options,
        args.warmup_n, args.budget_s, args.cpu), args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
