"""Where the time of a ``FusedLinear`` training step goes, torch tensors in (beside
``benchmarks.suites.dense_torch``'s ``layer`` rows, which time whole steps).

* ``phases``: per step (grads set to ``None``, forward, ``backward(grad)``), the host time of the
  forward and of ``backward()`` until it returns, and the step's time (CUDA events around a loop
  of steps; ``perf_counter`` without CUDA), with torch's autograd multithreading on (its
  default: the backward pass of CUDA tensors runs on the device's autograd worker thread) and off
  (``torch.autograd.set_multithreading_enabled(False)``: on the calling thread). Three models of
  one bias+ReLU layer: ours, ``nn.Linear`` + ``nn.ReLU``, and torch's own kernels
  (``torch._addmm_activation``, ``threshold_backward``, two ``mm``, a ``sum``) inside a Python
  ``autograd.Function``: what any layer written in Python pays on the host, whatever its kernels.
* ``graphed`` (CUDA only): the whole step captured once as a CUDA graph (``torch.cuda.graph``)
  and replayed, ours and torch interleaved: the step's GPU work with the host out of the way.
  Each row has the largest difference between the replayed gradients and an eager step's.
* ``compiled`` (CUDA only, not in the default sections): both models under
  ``torch.compile(model, mode="reduce-overhead", fullgraph=True)`` (inductor, its CUDA graphs;
  ours as two opaque custom ops, torch's fused by inductor), timed interleaved; each row has the
  cold first step (compilation included) and the largest difference between the compiled
  step's gradients and an eager step's.
* ``wgrad`` (CUDA only, not in the default sections): the weight-gradient product with the bias
  gradient, per form cuBLASLt offers (``x.T @ dz`` with BGRADB, which ``FusedLinear`` runs;
  ``dz.T @ x`` with BGRADA; either without an epilog, the bias gradient then a separate
  ``dz.sum(0)``, as torch does), each of the heuristic's first algorithms planned and run through
  nvmath-python's ``Matmul``: the kernels of one product and their GPU time (torch profiler).
* ``floor`` (CUDA only, not in the default sections): both eager steps beside the step's three
  products alone (``x @ W.T``, ``dz @ W``, ``dz.T @ x`` as bare ``torch.mm`` calls: no bias, no
  activation, no bias gradient, no allocation, no host: one CUDA graph, replayed), timed
  interleaved. ``products/torch`` is the least ``ours/torch`` that any layer computing these
  products with cuBLAS's GEMMs can reach.

Samples are interleaved as in ``dense_torch`` (order alternating, garbage collection paused).
``python -m benchmarks.suites.dense_torch_steps [--sections phases,graphed,compiled,wgrad,floor]
[--quick] [--json F]``;
``--quick`` runs tiny sizes (``phases`` also on a CPU-only torch).
"""

import gc
import statistics
import time

import torch

from benchmarks.suites.dense_torch import (_cuda, _device, _interleaved, _models, _step,
                                           _step_kernels)
from benchmarks._harness import absent, row

SUITE = "dense_torch_steps"
OURS, TORCH, PYTHON = "gpulinalg FusedLinear", "torch nn.Linear+act", "torch kernels in Python"
PRODUCTS = "the step's three products alone"


class _TorchKernelsRelu(torch.autograd.Function):
    """bias + ReLU with torch's kernels, the autograd node in Python (as ``FusedLinear``'s)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        out = torch._addmm_activation(bias, x, weight.t())
        ctx.save_for_backward(x, weight, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, out = ctx.saved_tensors
        dz = torch.ops.aten.threshold_backward(grad, out, 0)
        return dz @ weight, dz.t() @ x, dz.sum(0)


class TorchKernelsLinear(torch.nn.Module):
    """``relu(linear(x))`` through :class:`_TorchKernelsRelu`, with ``linear``'s parameters."""

    def __init__(self, linear):
        super().__init__()
        self.linear = linear

    def forward(self, x):
        return _TorchKernelsRelu.apply(x, self.linear.weight, self.linear.bias)


def _three_models(batch, width, dtype):
    models, x, grad = _models(batch, width, dtype, "relu")
    linear = torch.nn.Linear(width, width, device=x.device, dtype=dtype)
    linear.load_state_dict(models[OURS].state_dict())
    return {**models, PYTHON: TorchKernelsLinear(linear)}, x, grad


def _phase_sample(model, x, grad, steps):
    """``(forward host s, backward host s, step s)``: medians per step of ``steps`` steps."""
    params = list(model.parameters())
    fwd, bwd = [], []
    clock = time.perf_counter
    cuda = x.is_cuda
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t_all = clock()
    for _ in range(steps):
        t0 = clock()
        for p in params:
            p.grad = None
        x.grad = None
        y = model(x)
        t1 = clock()
        y.backward(grad)
        t2 = clock()
        fwd.append(t1 - t0)
        bwd.append(t2 - t1)
    if cuda:
        end.record()
        end.synchronize()
        step = start.elapsed_time(end) / 1e3 / steps
    else:
        step = (clock() - t_all) / steps
    return statistics.median(fwd), statistics.median(bwd), step


def phase_rows(batches, widths, dtypes, steps, samples):
    rows = []
    was = torch.autograd.is_multithreading_enabled()
    try:
        for dname in dtypes:
            for width in widths:
                for batch in batches:
                    models, x, grad = _three_models(batch, width, getattr(torch, dname))
                    for threads in (True, False):
                        torch.autograd.set_multithreading_enabled(threads)
                        case = (f"phases batch {batch} {width}->{width} {dname} relu, autograd "
                                f"multithreading {'on' if threads else 'off'}")
                        rows += _phase_case(case, models, x, grad, steps, samples)
    finally:
        torch.autograd.set_multithreading_enabled(was)
    return rows


def _phase_case(case, models, x, grad, steps, samples):
    names = list(models)
    for model in models.values():
        for _ in range(3):
            model(x).backward(grad)
    got = {name: [] for name in names}
    gc.collect()
    gc.disable()
    try:
        for s in range(samples):
            for name in (names if s % 2 == 0 else names[::-1]):
                got[name].append(_phase_sample(models[name], x, grad, steps))
    finally:
        gc.enable()
    rows = []
    for name, samples_ in got.items():
        fwd, bwd, step = (statistics.median(v) for v in zip(*samples_))
        steps_s = [s[2] for s in samples_]
        rows.append(row(SUITE, case, name, {"median_s": step, "min_s": min(steps_s),
                                            "runs": len(steps_s)},
                        step_us=step * 1e6, fwd_host_us=fwd * 1e6, bwd_host_us=bwd * 1e6,
                        spread=(max(steps_s) - min(steps_s)) / step, steps_per_sample=steps))
    return rows


def _zero(model, x):
    for p in model.parameters():
        p.grad = None
    x.grad = None


def _graphed(fn, warmups=3):
    """``(graph, what fn returned while captured)``: a CUDA graph of ``fn()``, warmed up
    ``warmups`` times on a side stream first (plans, memo entries, workspaces)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def _capture(model, x, grad):
    """``(graph, grads)``: a CUDA graph of one step (:func:`_graphed`) and the gradients it
    writes (of ``x``, then of the parameters: tensors in the graph's memory, held here since
    another step resets ``.grad``)."""
    def step():
        _zero(model, x)
        model(x).backward(grad)
    graph, _ = _graphed(step)
    grads = tuple(t.grad for t in (x, *model.parameters()))
    _zero(model, x)
    return graph, grads


def _replay_error(model, x, grad, graph, grads):
    """The largest |replayed gradient - eager gradient| over the input and the parameters."""
    graph.replay()
    return _eager_error(model, x, grad, [g.clone() for g in grads])


def _eager_error(model, x, grad, got):
    """The largest |``got`` - the gradients of an eager step| (``got``: of the input, then of
    the parameters); the step's gradients are reset afterwards."""
    _zero(model, x)
    model(x).backward(grad)
    tensors = [x, *model.parameters()]
    err = max((a.float() - t.grad.float()).abs().max().item() for a, t in zip(got, tensors))
    _zero(model, x)
    return err


def graphed_rows(batches, widths, dtypes, acts, steps, samples):
    if not _cuda():
        return [absent(SUITE, "graphed", OURS, "no CUDA device")]
    rows = []
    for label, models, x, grad in _layer_cases(batches, widths, dtypes, acts):
        case = f"graphed step {label}"
        graphs = {name: _capture(m, x, grad) for name, m in models.items()}
        errors = {name: _replay_error(models[name], x, grad, *g) for name, g in graphs.items()}
        res = _interleaved({n: g[0].replay for n, g in graphs.items()}, steps, samples)
        for name, t in res.items():
            rows.append(row(SUITE, case, name, t, us=t["median_s"] * 1e6,
                            replay_vs_eager_max_abs=errors[name]))
        rows.append(row(SUITE, case, "ratio ours/torch", {},
                        ratio=res[OURS]["median_s"] / res[TORCH]["median_s"]))
        del graphs
    return rows


def _layer_cases(batches, widths, dtypes, acts):
    """``(label, models, x, grad)`` per case (:func:`.dense_torch._models`), dtype outermost."""
    for dname in dtypes:
        for width in widths:
            for batch in batches:
                for act in acts:
                    models, x, grad = _models(batch, width, getattr(torch, dname), act)
                    yield f"batch {batch} {width}->{width} {dname} {act}", models, x, grad


def _compiled_step(compiled, model, x, grad):
    def run():
        torch.compiler.cudagraph_mark_step_begin()
        _zero(model, x)
        compiled(x).backward(grad)
    return run


def _step_error(step, model, x, grad):
    """The largest |gradient of ``step()`` - gradient of an eager step| (input, parameters)."""
    step()
    return _eager_error(model, x, grad, [t.grad.clone() for t in (x, *model.parameters())])


def compiled_rows(cases, steps, samples, mode="reduce-overhead"):
    if not _cuda():
        return [absent(SUITE, "compiled", OURS, "no CUDA device")]
    rows = []
    for batch, width, dname, act in cases:
        models, x, grad = _models(batch, width, getattr(torch, dname), act)
        case = f"compiled {mode} batch {batch} {width}->{width} {dname} {act}"
        fns, colds, errors = {}, {}, {}
        for name, model in models.items():
            fn = _compiled_step(torch.compile(model, mode=mode, fullgraph=True), model, x, grad)
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            colds[name] = time.perf_counter() - t0
            for _ in range(5):  # CUDA graphs are recorded on the first repeats
                fn()
            errors[name] = _step_error(fn, model, x, grad)
            fns[name] = fn
        res = _interleaved(fns, steps, samples)
        for name, t in res.items():
            rows.append(row(SUITE, case, name, t, us=t["median_s"] * 1e6,
                            cold_first_call_s=colds[name], compiled_vs_eager_max_abs=errors[name]))
        rows.append(row(SUITE, case, "ratio ours/torch", {},
                        ratio=res[OURS]["median_s"] / res[TORCH]["median_s"]))
    return rows


def _products_graph(x, weight, grad):
    """A CUDA graph (:func:`_graphed`) of a step's three products alone: ``x @ W.T``,
    ``dz @ W`` and ``dz.T @ x`` as bare ``torch.mm`` calls (``grad`` stands in for ``dz``),
    and the graph's outputs (held here: their memory is the graph's)."""
    x, weight = x.detach(), weight.detach()
    return _graphed(lambda: (torch.mm(x, weight.t()), torch.mm(grad, weight),
                             torch.mm(grad.t(), x)))


def floor_rows(batches, widths, dtypes, acts, steps, samples):
    """Per case: ours' and torch's eager steps and :func:`_products_graph`'s replay, timed
    interleaved; ratio rows ours/torch and products/torch."""
    if not _cuda():
        return [absent(SUITE, "floor", PRODUCTS, "no CUDA device")]
    rows = []
    for label, models, x, grad in _layer_cases(batches, widths, dtypes, acts):
        case = f"floor {label}"
        graph, outs = _products_graph(x, models[OURS].weight, grad)
        fns = {name: _step(model, x, grad) for name, model in models.items()}
        fns[PRODUCTS] = graph.replay
        for fn in fns.values():
            for _ in range(3):
                fn()
        res = _interleaved(fns, steps, samples)
        for name, t in res.items():
            rows.append(row(SUITE, case, name, t, us=t["median_s"] * 1e6,
                            eager=name != PRODUCTS))
        for who, num in (("ours", OURS), ("products", PRODUCTS)):
            rows.append(row(SUITE, case, f"ratio {who}/torch", {},
                            ratio=res[num]["median_s"] / res[TORCH]["median_s"]))
        del graph, outs
    return rows


def wgrad_rows(shapes, dtypes, algorithms):
    if not _cuda():
        return [absent(SUITE, "wgrad", "nvmath Matmul", "no CUDA device")]
    from nvmath.linalg.advanced import Matmul, MatmulEpilog, MatmulPlanPreferences
    rows = []
    for m, n, k in shapes:
        for dname in dtypes:
            dt = getattr(torch, dname)
            x = torch.randn(m, k, device="cuda", dtype=dt)
            dz = torch.randn(m, n, device="cuda", dtype=dt)
            case = f"wgrad batch {m} {k}->{n} {dname}"
            forms = {"x.T @ dz, BGRADB": (x.t(), dz, MatmulEpilog.BGRADB),
                     "dz.T @ x, BGRADA": (dz.t(), x, MatmulEpilog.BGRADA),
                     "dz.T @ x, no epilog": (dz.t(), x, None)}
            for form, (a, b, epilog) in forms.items():
                with Matmul(a, b) as mm:
                    algos = mm.plan(preferences=MatmulPlanPreferences(limit=algorithms),
                                    epilog=epilog)
                    for i, algo in enumerate(algos[:algorithms]):
                        kernels = _step_kernels(lambda: mm.execute(algorithm=algo), 10, ())
                        rows.append(row(SUITE, case, f"nvmath {form}, algorithm {i}", {},
                                        us=sum(t for _, _, t in kernels), kernels=kernels))
            kernels = _step_kernels(lambda: (dz.t() @ x, dz.sum(0)), 10, ())
            rows.append(row(SUITE, case, "torch dz.T @ x, dz.sum(0)", {},
                            us=sum(t for _, _, t in kernels), kernels=kernels))
    return rows


def run(quick=False, sections=("phases", "graphed")):
    if quick:
        sizes = dict(batches=(16,), widths=(32,), dtypes=("float32",))
        ph, gr = dict(sizes, steps=5, samples=3), dict(sizes, acts=("relu",), steps=5, samples=3)
    else:
        sizes = dict(batches=(256, 8192), widths=(1024, 4096))
        ph = dict(sizes, dtypes=("float16",), steps=40, samples=7)
        gr = dict(sizes, dtypes=("float16", "bfloat16"), acts=("relu", "gelu"), steps=50,
                  samples=9)
    wg = dict(shapes=((8192, 1024, 1024), (8192, 4096, 4096), (256, 4096, 4096)),
              dtypes=("float16", "bfloat16"), algorithms=3)
    co = dict(cases=[(b, 1024, "float16", a) for b in (256, 8192) for a in ("relu", "gelu")]
              + [(8192, 4096, "float16", "relu")], steps=50, samples=7)
    fl = dict(batches=(256, 8192), widths=(1024, 4096), dtypes=("float16", "bfloat16"),
              acts=("relu", "gelu"), steps=50, samples=9)
    if quick:
        fl = dict(gr)
        wg = dict(shapes=((64, 32, 32),), dtypes=("float16",), algorithms=1)
        co = dict(cases=[(16, 32, "float32", "relu")], steps=5, samples=3)
    rows = []
    if "compiled" in sections:
        rows += compiled_rows(**co)
    if "wgrad" in sections:
        rows += wgrad_rows(**wg)
    if "floor" in sections:
        rows += floor_rows(**fl)
    if "phases" in sections:
        rows += phase_rows(**ph)
    if "graphed" in sections:
        rows += graphed_rows(**gr)
    return rows


def summarize(rows):
    """One line per case and model."""
    lines = []
    for r in rows:
        if "fwd_host_us" in r:
            lines.append(f"{r['case']}: {r['impl']}: step {r['step_us']:.1f} us, forward host "
                         f"{r['fwd_host_us']:.1f}, backward host {r['bwd_host_us']:.1f}")
        elif "kernels" in r:
            kern = "; ".join(f"{name[:60]} x{c:g} {t} us" for name, c, t in r["kernels"])
            lines.append(f"{r['case']}: {r['impl']}: {r['us']:.1f} us [{kern}]")
        elif "compiled_vs_eager_max_abs" in r:
            lines.append(f"{r['case']}: {r['impl']}: {r['us']:.1f} us (cold "
                         f"{r['cold_first_call_s']:.2f} s; compiled - eager "
                         f"{r['compiled_vs_eager_max_abs']:.2g})")
        elif "eager" in r:
            lines.append(f"{r['case']}: {r['impl']}: {r['us']:.1f} us")
        elif "us" in r:
            lines.append(f"{r['case']}: {r['impl']}: {r['us']:.1f} us "
                         f"(replay - eager {r['replay_vs_eager_max_abs']:.2g})")
        elif "ratio" in r:
            lines.append(f"{r['case']}: {r['impl']} {r['ratio']:.3f}")
    return lines


def main(argv=None):
    import argparse
    import json

    from benchmarks import _harness
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suites.dense_torch_steps")
    parser.add_argument("--json", help="write the rows here (JSON lines, as they are made)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sections", default="phases,graphed")
    args = parser.parse_args(argv)
    if args.json:
        _harness.stream_to(args.json)
    rows = run(quick=args.quick, sections=tuple(args.sections.split(",")))
    print("\n".join(summarize(rows)))
    print(json.dumps({"device": str(_device())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
