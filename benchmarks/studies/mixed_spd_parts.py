"""Where ``solve(a, b, assume_a="pos", precision="mixed")`` spends its time on a GPU, and
variants of its TF32 Cholesky factor, measured before one of them replaces the library's.

Usage (on the GPU machine)::

    python -m benchmarks mixed_spd_parts [--n 16384] [--repeat 3] [--json out.json]

Rows (``case`` says the order ``n``; ``A = G G^T / n + I``, float64, one right-hand side):

* the whole solve, mixed and float64 (``details``: the mixed call's ``last_run()``), and
  torch's float64 ``cholesky`` + ``cholesky_solve`` on the same matrix;
* the factor alone: the library's (:func:`~gpulinalg.decomp.cholesky._cholesky_tensor_cuda.factor`)
  at several panels, and this module's :func:`variant_factor` with ``factor_err``
  (``max |L L^T - A| / max |A|`` over the leading block of 2048);
* the factor's solve ``(L L^T)^-1 b``: the library's (``cho_solve``, what the refinement
  calls six times) against :func:`blocked_solve` (products with the inverted diagonal blocks);
* ``kernel`` rows: the device time of each kernel name in one mixed solve (torch's profiler).

Timings are wall clock around calls on the thread's stream
(:func:`gpulinalg._runtime.streams.get_stream`), where the dispatcher runs the factor and to
which cuBLAS and cuSOLVER are bound; the stream is synchronized after each call.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks import _harness

SUITE = "mixed_spd_parts"
#: Library panels, and the variants ``(panel, inner, inverted)`` timed against them.
PANELS = (1024, 2048, 4096)
VARIANTS = ((2048, 256, False), (2048, 512, False), (2048, None, True), (2048, 512, True),
            (4096, 512, True))


def variant_factor(w, panel, inner=None, inverted=False):
    """The library's blocked TF32 Cholesky of the column-major float32 ``w`` (lower triangle,
    in place; the ``info`` code returned), with two changes to try: ``inner``, each diagonal
    block factored by this same algorithm with that panel (cuSOLVER's ``potrf`` only on the
    inner blocks, so that their updates run on tensor cores too); ``inverted``, the block
    column ``L21 = A21 L11^-T`` as one TF32 GEMM with ``L11^-1`` (a float32 ``trsm`` of the
    identity) instead of a float32 ``trsm`` of the whole column."""
    import cupy

    from gpulinalg.decomp._gpu._blas_cuda import gemm_update, trsm
    from gpulinalg.decomp._gpu._cusolver_cuda import Solver
    n = w.shape[0]
    with Solver(np.float32, 1) as sv:
        for j in range(0, n, panel):
            e = min(n, j + panel)
            d = w[j:e, j:e]
            if inner and e - j > inner:
                code = variant_factor(d, inner, None, inverted)
            else:
                sv.potrf(d, True)
                code = int(sv.check("potrf")[0])
            if code:
                return code + j
            if e == n:
                break
            col = w[e:, j:e]
            if inverted:
                inv = cupy.asfortranarray(cupy.eye(e - j, dtype=np.float32))
                trsm(d, inv, left=True, lower=True)  # L11^-1
                neg = cupy.asfortranarray(-col)
                col[...] = 0
                gemm_update(col, neg, inv, trans_b=True, compute="tf32")  # 0 - (-A21) L11^-T
            else:
                trsm(d, col, left=False, lower=True, trans=True)
            for c in range(e, n, panel):
                gemm_update(w[c:, c:min(c + panel, n)], w[c:, j:e], w[c:min(c + panel, n), j:e],
                            trans_b=True, compute="tf32")
    return 0


def inverse_blocks(w, panel):
    """The inverses of the ``panel``-wide diagonal blocks of the lower factor in the
    column-major ``w`` (one float32 ``trsm`` of the identity each), for :func:`blocked_solve`."""
    import cupy

    from gpulinalg.decomp._gpu._blas_cuda import trsm
    out = []
    for j in range(0, w.shape[0], panel):
        e = min(w.shape[0], j + panel)
        inv = cupy.asfortranarray(cupy.eye(e - j, dtype=w.dtype))
        trsm(w[j:e, j:e], inv, left=True, lower=True)
        out.append(inv)
    return out


def blocked_solve(w, invs, panel, b):
    """``(L L^T)^-1 b`` for the lower factor in ``w`` (``b``: ``(n, k)``) by block
    substitution: each diagonal block's solve a product with its inverse (``invs``), the
    off-diagonal blocks one product each; matrix-vector products only, no triangular kernel."""
    y = b.astype(w.dtype, copy=True)
    n = w.shape[0]
    starts = list(range(0, n, panel))
    for i, j in enumerate(starts):  # L y = b
        e = min(n, j + panel)
        r = y[j:e] - w[j:e, :j] @ y[:j] if j else y[j:e]
        y[j:e] = invs[i] @ r
    for i in reversed(range(len(starts))):  # L^T x = y
        j = starts[i]
        e = min(n, j + panel)
        r = y[j:e] - w[e:, j:e].T @ y[e:] if e < n else y[j:e]
        y[j:e] = invs[i].T @ r
    return y


def _solve_rows(cupy, case, a32, repeat):
    from gpulinalg._runtime.streams import get_stream
    from gpulinalg.decomp.cholesky import _cholesky_cuda, _cholesky_tensor_cuda
    panel = _cholesky_tensor_cuda.PANEL
    with get_stream() as stream:
        w = cupy.asfortranarray(a32)
        _cholesky_tensor_cuda.factor(w)
        invs = inverse_blocks(w, panel)
        b = cupy.random.default_rng(1).standard_normal((a32.shape[0], 1), dtype=np.float32)
        fns = {"solve: library cho_solve": lambda: _cholesky_cuda.cho_solve(
                   w[None], True, b[None], False, np.float32, False, False)[0],
               "solve: inverted diagonal blocks": lambda: blocked_solve(w, invs, panel, b)}
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
    fns = {f"library factor, panel {p}": (lambda w, p=p: _cholesky_tensor_cuda.factor(w, p))
           for p in PANELS}
    for p, inner, inv in VARIANTS:
        name = f"variant, panel {p}" + (f", inner {inner}" if inner else "") + \
            (", inverted diagonal" if inv else "")
        fns[name] = lambda w, p=p, inner=inner, inv=inv: variant_factor(w, p, inner, inv)
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
    for name, t in timings.items():
        extra = {"details": details, "backward_err": backward} if fns[name] is mixed else {}
        rows.append(_harness.row(SUITE, case, name, t, **extra))
    rows += [_harness.absent(SUITE, case, name, _harness.why_failed(e))
             for name, e in failed.items()]
    rows += _factor_rows(cupy, case, a.astype(np.float32), repeat)
    rows += _solve_rows(cupy, case, a.astype(np.float32), max(repeat, 5))
    if _harness.cuda_torch():
        cupy.cuda.Device().synchronize()
        rows += _harness.kernel_rows(SUITE, case,
                                     lambda: (mixed(), cupy.cuda.Device().synchronize()))
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
