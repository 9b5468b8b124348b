"""Where ``solve(a, b, assume_a="pos", precision="mixed")`` spends its time on a GPU, and
variants of its TF32 Cholesky factor, measured before one of them replaces the library's.

Usage (on the GPU machine)::

    python -m benchmarks mixed_spd_parts [--n 16384] [--repeat 3] [--json out.json]

Rows (``case`` says the order ``n``; ``A = G G^T / n + I``, float64, one right-hand side):

* the whole solve, mixed (with the factor's settings, and with each variant of
  :data:`SOLVE_VARIANTS`) and float64 (``details``: the mixed call's ``last_run()``), and
  torch's float64 ``cholesky`` + ``cholesky_solve`` on the same matrix;
* the factor alone (:func:`~gpulinalg.decomp.cholesky._cholesky_tensor_cuda.factor`) at
  several panels and with the variants of :data:`VARIANTS` (``inner``: two-level;
  ``inverted``: block columns by the diagonal blocks' inverses), with ``factor_err``
  (``max |L L^T - A| / max |A|`` over the leading block of 2048);
* the factor's solve ``(L L^T)^-1 b``: ``cho_solve`` (the refinement's six solves without
  the inverted blocks) against the block substitution of ``_cholesky_tensor_cuda.solve``;
* ``kernel`` rows: the device time of each kernel name in one mixed solve with the first of
  :data:`SOLVE_VARIANTS` (torch's profiler).

Timings are wall clock around calls on the thread's stream
(:func:`gpulinalg._runtime.streams.get_stream`), where the dispatcher runs the factor and to
which cuBLAS and cuSOLVER are bound; the stream is synchronized after each call.
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np

from benchmarks import _harness

SUITE = "mixed_spd_parts"
#: Panels of the factor as it is, and the variants ``(panel, inner, inverted)`` timed beside.
PANELS = (1024, 2048, 4096)
VARIANTS = ((2048, 256, False), (2048, 512, False), (2048, 0, True), (2048, 512, True),
            (4096, 512, True), (1024, 0, True))
#: Variants ``(panel, inner, inverted)`` of the whole mixed solve.
SOLVE_VARIANTS = ((2048, 0, True), (2048, 512, True), (1024, 0, True))


@contextlib.contextmanager
def factor_settings(panel, inner, inverted):
    """The library factor's ``PANEL``, ``INNER`` and ``INVERTED`` for the block."""
    from gpulinalg.decomp.cholesky import _cholesky_tensor_cuda as tensor
    saved = tensor.PANEL, tensor.INNER, tensor.INVERTED
    tensor.PANEL, tensor.INNER, tensor.INVERTED = panel, inner, inverted
    try:
        yield
    finally:
        tensor.PANEL, tensor.INNER, tensor.INVERTED = saved


def _variant_name(panel, inner, inverted):
    return f"panel {panel}" + (f", inner {inner}" if inner else "") + \
        (", inverted diagonal" if inverted else "")


def _solve_rows(cupy, case, a32, repeat):
    from gpulinalg._runtime.streams import get_stream
    from gpulinalg.decomp.cholesky import _cholesky_cuda, _cholesky_tensor_cuda
    with get_stream() as stream:
        w = cupy.asfortranarray(a32)
        inverses = []
        _cholesky_tensor_cuda.factor(w, 2048, 0, True, inverses)
        b = cupy.random.default_rng(1).standard_normal((a32.shape[0], 1), dtype=np.float32)
        fns = {"solve: library cho_solve": lambda: _cholesky_cuda.cho_solve(
                   w[None], True, b[None], False, np.float32, False, False)[0],
               "solve: inverted diagonal blocks":
                   lambda: _cholesky_tensor_cuda.solve(w, inverses, b)}
        rows = []
        a64 = a32.astype(np.float64)
        for name, fn in fns.items():
            timing, x = _harness.timed_sync(fn, repeat, wait=stream.synchronize)
            res = float(cupy.abs(a64 @ x.astype(np.float64) - b).max() /
                        (cupy.abs(a64).sum(axis=1).max() * cupy.abs(x).max()))
            rows.append(_harness.row(SUITE, case, name, timing, backward_err=res))
        stream.synchronize()
    return rows


def _factor_err(cupy, w, a):
    k = min(2048, a.shape[0])
    low = cupy.tril(w[:k, :k]).astype(np.float64)
    return float(cupy.abs(low @ low.T - a[:k, :k]).max() / cupy.abs(a).max())


def _factor_rows(cupy, case, a32, repeat):
    from gpulinalg._runtime.streams import get_stream
    from gpulinalg.decomp.cholesky import _cholesky_tensor_cuda
    fns = {f"library factor, panel {p}": (lambda w, p=p: _cholesky_tensor_cuda.factor(w, p, 0,
                                                                                   False))
           for p in PANELS}
    for p, inner, inv in VARIANTS:
        fns[f"variant, {_variant_name(p, inner, inv)}"] = \
            lambda w, p=p, inner=inner, inv=inv: _cholesky_tensor_cuda.factor(w, p, inner, inv)
    rows = []
    with get_stream() as stream:
        for name, fn in fns.items():
            works = [cupy.asfortranarray(a32) for _ in range(repeat + 1)]
            stream.synchronize()
            it = iter(works)
            timing, code = _harness.timed_sync(lambda fn=fn: fn(next(it)), repeat,
                                               wait=stream.synchronize)
            rows.append(_harness.row(SUITE, case, name, timing, code=code,
                                     factor_err=_factor_err(cupy, works[-1], a32)))
            del works
    return rows


def run(n, repeat):
    import cupy

    import gpulinalg
    from gpulinalg.decomp import solve
    case = f"n={n}"
    rng = cupy.random.default_rng(0)
    g = rng.standard_normal((n, n))
    a = g @ g.T / n + cupy.eye(n)
    del g
    b = rng.standard_normal(n)
    rows = []

    def mixed():
        return solve(a, b, assume_a="pos", precision="mixed")
    fns = {"gpulinalg solve mixed": mixed,
           "gpulinalg solve float64": lambda: solve(a, b, assume_a="pos")}

    def variant(settings):
        def call():
            with factor_settings(*settings):
                return mixed()
        return call
    for settings in SOLVE_VARIANTS:
        fns[f"gpulinalg solve mixed, {_variant_name(*settings)}"] = variant(settings)
    if _harness.cuda_torch():
        import torch
        ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)[:, None]
        fns["torch cholesky + cholesky_solve float64"] = \
            lambda: torch.cholesky_solve(tb, torch.linalg.cholesky(ta))
    timings, failed = _harness.interleaved_sync(fns, repeat)
    x = mixed()
    details = gpulinalg.last_run().details
    backward = float(cupy.abs(a @ x - b).max() / (cupy.abs(a).sum(axis=1).max() *
                                                   cupy.abs(x).max()))
    extra = {"gpulinalg solve mixed": {"details": details, "backward_err": backward}}
    for settings in SOLVE_VARIANTS:
        with factor_settings(*settings):
            xv = mixed()
        extra[f"gpulinalg solve mixed, {_variant_name(*settings)}"] = {
            "details": gpulinalg.last_run().details,
            "backward_err": float(cupy.abs(a @ xv - b).max() / (
                cupy.abs(a).sum(axis=1).max() * cupy.abs(xv).max()))}
    for name, t in timings.items():
        rows.append(_harness.row(SUITE, case, name, t, **extra.get(name, {})))
    rows += [_harness.absent(SUITE, case, name, _harness.why_failed(e))
             for name, e in failed.items()]
    rows += _factor_rows(cupy, case, a.astype(np.float32), repeat)
    rows += _solve_rows(cupy, case, a.astype(np.float32), max(repeat, 5))
    if _harness.cuda_torch():
        cupy.cuda.Device().synchronize()
        first = variant(SOLVE_VARIANTS[0])  # the default's profile is in earlier results
        rows += _harness.kernel_rows(SUITE, case,
                                     lambda: (first(), cupy.cuda.Device().synchronize()))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks mixed_spd_parts",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=16384, help="the system's order")
    p.add_argument("--repeat", type=int, default=3, help="warm calls")
    p.add_argument("--json", help="write the rows and the environment here")
    args = p.parse_args(argv)
    _harness.run_keeping_rows(lambda: run(args.n, args.repeat), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
