"""Where ``PCA(k).fit_transform`` of a tall float32 CuPy array spends its time on the
``covariance_eigh`` path (scikit-learn's ``auto`` for tall data), and the alternatives for
each part, next to scikit-learn's PCA on the same array under array-API dispatch.

Usage (on the GPU machine)::

    python -m benchmarks pca_parts [--shape 200000x1000] [--k 20] [--repeat 5] [--json out.json]

Rows (``case`` says the shape and ``k``; ``X`` standard normal plus a column offset):

* the whole ``fit_transform``: ours with the Gram matrix by one GEMM and by GEMMs over
  ``GRAM_BLOCKS`` column blocks of its lower triangle (:data:`BLOCKS`), scikit-learn's;
* the Gram matrix alone (the same routes, and cuBLAS SYRK through ``cupy.cublas``);
* the mirror of the block-triangle Gram matrix's computed triangle (ours: ``triu(c) +
  triu(c, 1).T``; one ``where`` with a mask made per call or kept), with ``mirror_ok``;
* ``eigh`` of the ``n x n`` float64 covariance: CuPy's, ours (whole, and the top ``k`` by
  ``subset_by_index``), cuSOLVER's Jacobi ``syevj`` (float64, float32) with ``eig_err``, the
  largest eigenvalue difference from ``cupy.linalg.eigvalsh`` relative to the largest;
* the column mean: ours (float32 panels summed in float64), a batched GEMV with a ones vector,
  ``X.mean(axis=0)`` in float64, with ``mean_err`` against the float64 mean;
* ``kernel`` rows: the device time per kernel name of one of our ``fit_transform`` calls.

Timings are wall clock around calls, the device synchronized after each (our calls run on
the thread's stream, which a device synchronization covers). scikit-learn's array-API dispatch
needs ``SCIPY_ARRAY_API=1`` before SciPy is imported: :func:`main` sets it when it can.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import numpy as np

from benchmarks import _harness

SUITE = "pca_parts"
#: Column blocks of the block-triangle Gram matrix timed (1: one GEMM).
BLOCKS = (1, 2, 4, 8)
#: Rows summed in float32 before the float64 sum, for the batched-GEMV mean.
PANEL_ROWS = 1024


@contextlib.contextmanager
def _blocks(n):
    """Our Gram matrix by ``n`` column blocks of its lower triangle (1: one GEMM) inside."""
    from gpulinalg.decomp._gpu import _blas_cuda
    saved = _blas_cuda.GRAM_BLOCKS, _blas_cuda.GRAM_MIN
    _blas_cuda.GRAM_BLOCKS, _blas_cuda.GRAM_MIN = max(n, 1), (saved[1] if n > 1 else 1 << 62)
    try:
        yield
    finally:
        _blas_cuda.GRAM_BLOCKS, _blas_cuda.GRAM_MIN = saved


def _with(blocks, fn):
    def call():
        with _blocks(blocks):
            return fn()
    return call


def _timed(rows, case, fns, repeat, **extra):
    timings, failed = _harness.interleaved_sync(fns, repeat)
    for name, t in timings.items():
        rows.append(_harness.row(SUITE, case, name, t, **extra.get(name, {})))
    rows += [_harness.absent(SUITE, case, name, _harness.why_failed(e))
             for name, e in failed.items()]


def _whole(rows, case, x, k, repeat):
    from gpulinalg.decomp import PCA
    fns = {f"ours fit_transform, Gram {b} block{'s' if b > 1 else ''}":
           _with(b, lambda: PCA(k, svd_solver="covariance_eigh").fit_transform(x))
           for b in BLOCKS}
    try:
        import sklearn
        from sklearn.decomposition import PCA as SkPCA
        sklearn.set_config(array_api_dispatch=True)
        fns["scikit-learn fit_transform (array API, auto)"] = lambda: SkPCA(k).fit_transform(x)
    except Exception as exc:  # scikit-learn absent or without array-API support here
        rows.append(_harness.absent(SUITE, case, "scikit-learn", _harness.why_failed(exc)))
    _timed(rows, case, fns, repeat)


def _gram(rows, case, x, repeat):
    import cupy
    import cupy.cublas  # a submodule CuPy 14 does not import with cupy

    from gpulinalg._runtime.streams import get_stream
    from gpulinalg.decomp._gpu import _blas_cuda

    def ours(b):
        def call():
            with get_stream(), _blocks(b):
                return _blas_cuda.gram(x) if b > 1 else x.T @ x
        return call
    fns = {f"Gram {b} block{'s' if b > 1 else ''}": ours(b) for b in BLOCKS}
    fns["Gram by SYRK (cupy.cublas.syrk)"] = lambda: cupy.cublas.syrk("T", x)
    _timed(rows, case, fns, repeat)


def _mirror(rows, case, n, repeat):
    import cupy
    rng = cupy.random.default_rng(2)
    g = rng.standard_normal((n, n), dtype=np.float32)
    g = g + g.T
    c = cupy.triu(g) + cupy.tril(rng.standard_normal((n, n), dtype=np.float32), -1)  # junk below
    kept = cupy.arange(n)[:, None] <= cupy.arange(n)[None, :]

    def per_call():
        i = cupy.arange(n)
        return cupy.where(i[:, None] <= i[None, :], c, c.T)
    fns = {"mirror: triu(c) + triu(c, 1).T (ours)": lambda: cupy.triu(c) + cupy.triu(c, 1).T,
           "mirror: where, mask per call": per_call,
           "mirror: where, mask kept": lambda: cupy.where(kept, c, c.T)}
    extra = {name: {"mirror_ok": bool((fn() == g).all())} for name, fn in fns.items()}
    _timed(rows, case, fns, repeat, **extra)


def _eigh(rows, case, c, k, repeat):
    import cupy
    import cupyx.cusolver

    from gpulinalg.decomp import eigh
    n = c.shape[0]
    ref = cupy.linalg.eigvalsh(c)
    fns = {"eigh: cupy.linalg.eigh": lambda: cupy.linalg.eigh(c),
           "eigh: ours": lambda: eigh(c),
           f"eigh: ours, top {k} (subset_by_index)":
               lambda: eigh(c, subset_by_index=[n - k, n - 1]),
           "eigh: syevj float64": lambda: cupyx.cusolver.syevj(c, with_eigen_vector=True),
           "eigh: syevj float32": lambda: cupyx.cusolver.syevj(c.astype(np.float32),
                                                                 with_eigen_vector=True)}
    extra = {}
    for name in ("eigh: syevj float64", "eigh: syevj float32"):
        try:
            w = cupy.sort(fns[name]()[0].astype(np.float64))
            extra[name] = {"eig_err": float(cupy.abs(w - ref).max() / cupy.abs(ref).max())}
        except Exception:  # the timed call records the failure
            pass
    _timed(rows, case, fns, repeat, **extra)


def _mean(rows, case, x, repeat):
    import cupy

    from gpulinalg.decomp.pca import _pca_xp
    m, n = x.shape
    ref = x.astype(np.float64).mean(axis=0)
    full = m - m % PANEL_ROWS
    ones = cupy.ones(PANEL_ROWS, dtype=x.dtype)

    def gemv():
        s = cupy.matmul(ones, x[:full].reshape(-1, PANEL_ROWS, n)).sum(axis=0, dtype=np.float64)
        if full < m:
            s += x[full:].sum(axis=0, dtype=np.float64)
        return s / m
    fns = {"mean: ours (float32 panels, float64 sum)": lambda: _pca_xp._column_mean(cupy, x, False),
           "mean: batched GEMV with ones": gemv,
           "mean: X.mean(axis=0, float64)": lambda: x.mean(axis=0, dtype=np.float64)}
    scale = float(cupy.abs(ref).max())
    extra = {name: {"mean_err": float(cupy.abs(fn() - ref).max()) / scale}
             for name, fn in fns.items()}
    del ref
    _timed(rows, case, fns, repeat, **extra)


def _kernels(rows, case, x, k):
    import cupy

    from gpulinalg.decomp import PCA
    p = PCA(k, svd_solver="covariance_eigh")
    p.fit_transform(x)
    rows += _harness.kernel_rows(SUITE, case, lambda: (p.fit_transform(x),
                                                       cupy.cuda.Device().synchronize()), 25)


def run(m, n, k, repeat):
    import cupy
    case = f"{m}x{n} float32 k={k}"
    rng = cupy.random.default_rng(0)
    x = rng.standard_normal((m, n), dtype=np.float32) + cupy.linspace(0, 3, n, dtype=np.float32)
    rows = []
    _whole(rows, case, x, k, repeat)
    _gram(rows, case, x, repeat)
    _mirror(rows, case, n, repeat)
    xc = x[:min(m, 20 * n)].astype(np.float64)
    c = cupy.cov(xc.T)
    del xc
    _eigh(rows, case, c, k, repeat)
    _mean(rows, case, x, repeat)
    if _harness.cuda_torch():
        _kernels(rows, case, x, k)
    return rows


def main(argv=None):
    if "scipy" not in sys.modules:
        os.environ.setdefault("SCIPY_ARRAY_API", "1")
    p = argparse.ArgumentParser(prog="python -m benchmarks pca_parts",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="200000x1000", help="MxN of the float32 input")
    p.add_argument("--k", type=int, default=20, help="components")
    p.add_argument("--repeat", type=int, default=5, help="warm rounds")
    p.add_argument("--json", help="write the rows and the environment here")
    args = p.parse_args(argv)
    m, n = (int(v) for v in args.shape.lower().split("x"))
    _harness.run_keeping_rows(lambda: run(m, n, args.k, args.repeat), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
