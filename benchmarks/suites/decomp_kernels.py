"""The fused small-stack kernels alone: device time per launch (CUDA events, no read-back)
per potrf tile, the fused SVD per single-precision mode with its accuracy, and the wide
single-matrix triangular solve.

The ``kernels`` section of ``python -m benchmarks.suites.decomp_batched`` (``--sections kernels``;
``--cases`` picks rows by op or by the public call, ``potrf:512:128`` or ``cholesky:512:128``):
the figures the route table (``gpulinalg/decomp/_batched_plan.py``) and the tile table
(``_fused_cuda.TILE``) are set from.
"""

from benchmarks._harness import absent, event_timing as _event_timing, row
from benchmarks._harness import make_inputs as _make, timed_sync as _timed

SUITE = "decomp_batched"  # the kernels section of that suite: its rows are that suite's
DTYPES = ("float32", "float64")


def _kernel_case(cp, op, batch, n, dtype, rng, rows, tiles):
    """Device time of a fused kernel alone (CUDA events around 20 launches, no read-back), per
    potrf tile in ``tiles`` (``_fused_cuda.TILE`` patched: a side ``TS``, or ``(TS, M)`` with
    ``M`` resident blocks asked of the compiler)."""
    import numpy as np

    from gpulinalg.decomp._kernels import _fused_cuda as fc
    a, b = _make(cp, "cholesky", batch, n, dtype, rng)
    summ, _ = fc.summary(cp, op, a.data.device_id)
    saved, out = dict(fc.TILE), cp.empty_like(a if op == "potrf" else b)
    key = (next(s for s in fc.SIZES[op] if n <= s), np.dtype(dtype).char)
    for tile in (tiles if op == "potrf" else (None,)):
        fc.TILE.update({key: tile} if tile else {})
        label = "" if tile is None else "x".join(str(v) for v in np.atleast_1d(tile))
        try:
            fn = (lambda: fc.potrf(a, out, summ, True, True, 1 << 30)) if op == "potrf" \
                else (lambda: fc.trsm(a, b, out, summ, 0, 0, 0, 0, 0, 1))  # noqa: E731
            fn()
            rows.append(row(SUITE, f"kernel {op} {batch}x{n}^2 {dtype}", f"kernel TS={label}",
                            _event_timing(cp, fn, 20), op=op, batch=batch, n=n, dtype=dtype))
        except Exception as exc:
            rows.append(absent(SUITE, f"kernel {op} {batch}x{n}^2 {dtype}", f"TS={label}",
                               f"failed: {type(exc).__name__}: {exc}"[:300]))
        finally:
            fc.TILE.clear()
            fc.TILE.update(saved)
    cp.get_default_memory_pool().free_all_blocks()


def _svd_kernel_case(cp, batch, n, dtype, rng, rows):
    """The fused SVD (``_fused_svd_cuda.svd``, vectors) per way the single types can run
    (``_SINGLE_MODE``: the A/B rows), 30 synchronized calls, with the accuracy of one call on
    its first 64 matrices in float64: backward error and orthogonality over ``n eps``, singular
    values over ``eps s_max``."""
    import numpy as np

    from gpulinalg.decomp._kernels import _fused_svd_cuda as fs
    a = rng.standard_normal((batch, n, n), dtype=dtype)
    saved, eps = fs._SINGLE_MODE, float(np.finfo(dtype).eps)
    for mode in ("single", "wide", "double") if dtype == "float32" else ("double",):
        fs._SINGLE_MODE = mode
        try:
            timing, (u, s, vh) = _timed(lambda: fs.svd(a, False, True, np.dtype(dtype)), 30)
            x, u, s, vh = (cp.asnumpy(v[:64]).astype(np.float64) for v in (a, u, s, vh))
            back = np.linalg.norm(x - (u * s[:, None]) @ vh, axis=(1, 2)) / np.linalg.norm(
                x, axis=(1, 2))
            ortho = np.linalg.norm(vh @ vh.swapaxes(1, 2) - np.eye(n), axis=(1, 2))
            ref = np.linalg.svd(x, compute_uv=False)
            rows.append(row(SUITE, f"kernel gesvd {batch}x{n}^2 {dtype}", f"mode={mode}", timing,
                            op="gesvd", batch=batch, n=n, dtype=dtype,
                            back_n_eps=float(back.max() / n / eps),
                            ortho_n_eps=float(max(ortho.max(), np.linalg.norm(
                                u.swapaxes(1, 2) @ u - np.eye(n), axis=(1, 2)).max()) / n / eps),
                            s_eps=float((np.abs(s - ref).max(axis=1) / ref[:, 0]).max() / eps)))
        except Exception as exc:
            rows.append(absent(SUITE, f"kernel gesvd {batch}x{n}^2 {dtype}", f"mode={mode}",
                               f"failed: {type(exc).__name__}: {exc}"[:300]))
        finally:
            fs._SINGLE_MODE = saved
    cp.get_default_memory_pool().free_all_blocks()


#: (op, batch, n, potrf tiles) of the kernel section: the fused kernels' device time. A tile
#: is a side ``TS`` or ``(TS, M)`` (``M`` resident blocks per multiprocessor asked of the
#: compiler); order 128: TS 4 is 1024 threads of 56 (fp32) / 64 (fp64) registers, TS 8 256
#: of 103 / 188, (8, 2) caps fp64 at 128 (ptxas: 2 KiB spilled).
KERNELS = [("trsm", 4096, 64, ()), ("trsm", 4096, 8, ()), ("potrf", 4096, 8, (1, 2)),
           ("potrf", 1024, 32, (2, 4)), ("potrf", 4096, 64, (2, 4, 8)),
           ("potrf", 512, 128, (8, 4, (8, 2))), ("gesvd", 512, 32, ()), ("gesvd", 4096, 16, ()),
           ("wide", 1, 64, ()), ("wide", 1, 1024, ()), ("wide", 1, 4096, ()),
           ("wide", 1, 16384, ())]
#: the grid op of a kernel row (``--cases`` names either).
_KERNEL_API = {"potrf": "cholesky", "trsm": "cho_solve", "gesvd": "svd",
               "wide": "solve_triangular"}


def _wide_kernel_case(cp, n, dtype, rows):
    """Device time of the wide triangular solve alone (``_wide_trsm_cuda``: one matrix, one
    right-hand side, SciPy's checks on; CUDA events around 100 launches, no read-back)."""
    import numpy as np

    from gpulinalg.decomp._kernels import _fused_cuda as fc
    from gpulinalg.decomp._kernels import _wide_trsm_cuda as wide
    cp.random.seed(0)
    a = cp.tril(cp.random.standard_normal((n, n), dtype=dtype)) / np.sqrt(n)
    a += 2 * cp.eye(n, dtype=dtype)
    b = cp.random.standard_normal((1, n, 1), dtype=dtype)
    x = cp.empty_like(b)
    summ, totals = fc.summary(cp, "trsm", a.data.device_id)
    case = f"kernel wide 1x{n}^2 {dtype}"
    try:
        def fn():
            wide.trsm(a[None], b, x, summ, 0, 0, 0, 0, 0, True, True)
        fn()
        totals.get()
        rows.append(row(SUITE, case, "kernel", _event_timing(cp, fn, 100), op="wide", batch=1,
                        n=n, dtype=dtype))
    except Exception as exc:
        rows.append(absent(SUITE, case, "kernel", f"failed: {type(exc).__name__}: {exc}"[:300]))
    del a
    cp.get_default_memory_pool().free_all_blocks()


def run(cp, rng, rows, budget, quick=False, cases=None):
    """Append the kernel rows picked by ``cases`` (all of :data:`KERNELS` without; the first two,
    at order <= 64, with ``quick``) to ``rows`` while ``budget`` lasts."""
    want = {tuple(x.split(":")) for x in (cases or "").split(",") if x}
    kernels = KERNELS[:2] if quick else [k for k in KERNELS if not want or want & {
        (o, str(k[1]), str(k[2])) for o in (k[0], _KERNEL_API[k[0]])}]
    for op, batch, n, tiles in kernels:
        for dtype in DTYPES:
            if budget.left() > 0:
                if op == "gesvd":  # the fused SVD per single-precision mode, with accuracy
                    _svd_kernel_case(cp, batch, n, dtype, rng, rows)
                elif op == "wide":  # the single-matrix solve: its kernel against its call
                    _wide_kernel_case(cp, min(n, 256) if quick else n, dtype, rows)
                else:
                    _kernel_case(cp, op, batch, min(n, 64) if quick else n, dtype, rng, rows,
                                 tiles)
