"""The LU family against torch and CuPy on the same GPU, same run (DESIGN §5: ``solve`` n=16384
fp64 at or below torch).

Cases: ``solve`` of a random n x n system with one right-hand side, n = 4096, 8192, 16384, in
float64 and float32 (torch.linalg.solve, cupy.linalg.solve on the same data); ``solve(...,
precision="mixed")`` of float64 general and SPD systems of condition 3 and 1e8 at n = 8192,
16384 (and 32768 SPD) against the float64 solves (torch's ``cholesky`` + ``cholesky_solve`` for
SPD); a batch of
10000 systems of 32 x 32 in float32 (torch.linalg.solve); ``det`` and ``inv`` at n = 4096 in
float64 (torch.linalg.det/inv, cupy.linalg.det/inv). gpulinalg runs on NumPy, CuPy and torch
inputs, each row with its cold first call and warm median (:func:`benchmarks._harness.timed_sync`)
and an accuracy figure: for solves the normwise backward error
``||b - A x||_inf / (||A||_inf ||x||_inf)``, for ``inv``
``||A X - I||_inf / (||A||_inf ||X||_inf)``,
for ``det`` the relative difference from ``slogdet``'s value in float64. gpulinalg's rows include
its conditioning estimate (three solves through the factor: SciPy's ill-conditioning warning),
which the peers do not make; ``check_finite=False`` as the peers do not check. Without a GPU
every row is absent.

``python -m benchmarks decomp_solve [--quick] [--json PATH]`` (about 2 minutes on an H100;
``--quick``: small sizes).
"""

import argparse
import sys

from benchmarks._harness import (absent, gpu_libraries, print_and_write, row, run_sections,
                                 timed_sync)

SUITE = "decomp_solve"
CASES = ("solve", "solve mixed", "solve batched", "det", "inv")


def run(quick=False):
    cupy, torch, why = gpu_libraries()
    if cupy is None:
        return [absent(SUITE, case, "all", why) for case in CASES]
    sizes = (1024, 2048) if quick else (4096, 8192, 16384)
    n_small = 1024 if quick else 4096
    mixed_sizes = (1024, 2048) if quick else (8192, 16384, 32768)
    sections = (("solve", lambda: _solve_rows(cupy, torch, sizes, quick)),
                ("solve mixed", lambda: _mixed_rows(cupy, torch, mixed_sizes, quick)),
                ("solve batched", lambda: _batched_rows(cupy, torch, 1000 if quick else 10000)),
                ("det", lambda: _det_rows(cupy, torch, n_small)),
                ("inv", lambda: _inv_rows(cupy, torch, n_small)))
    return run_sections(SUITE, sections, cupy)


def _system(cupy, batch, n, k, dtype, seed=0):
    rng = cupy.random.default_rng(seed)
    a = rng.standard_normal(batch + (n, n), dtype="float64")
    b = rng.standard_normal(batch + ((n,) if k is None else (n, k)), dtype="float64")
    return a.astype(dtype), b.astype(dtype)


def _backward(cupy, a, x, b):
    """max over a stack of ``||b - A x||_inf / (||A||_inf ||x||_inf)``, in float64."""
    a, x, b = (cupy.asarray(t).astype("float64") for t in (a, x, b))
    if x.ndim == a.ndim - 1:
        x, b = x[..., None], b[..., None]
    r = cupy.abs(b - a @ x).max(axis=(-2, -1))
    an = cupy.abs(a).sum(axis=-1).max(axis=-1)
    return float((r / (an * cupy.abs(x).max(axis=(-2, -1)))).max())


def _inputs(cupy, torch, *arrays):
    """gpulinalg's inputs: ``(label, arrays, converter of a result to CuPy)``."""
    yield "cupy in", arrays, cupy.asarray
    yield "numpy in", tuple(cupy.asnumpy(x) for x in arrays), cupy.asarray
    if torch is not None:
        yield "torch in", tuple(torch.from_dlpack(x) for x in arrays), \
            lambda t: cupy.from_dlpack(t.contiguous())


def _where():
    import gpulinalg
    rec = gpulinalg.last_run()
    return {"where": rec.backend, **{k: v for k, v in rec.details.items()
                                     if isinstance(v, (str, int, float, bool))}}


def _peers(cupy, torch, case, rows, repeat, cupy_fn, torch_fn, accuracy, tensors):
    """The rows of CuPy's and torch's function on the same data."""
    if cupy_fn is not None:
        timing, out = timed_sync(cupy_fn, repeat)
        rows.append(row(SUITE, case, cupy_fn.__doc__ or "cupy", timing, **accuracy(out)))
    if torch is None:
        rows.append(absent(SUITE, case, "torch", "torch with CUDA not installed"))
        return
    timing, out = timed_sync(lambda: torch_fn(*tensors), repeat)
    name = "torch.linalg." + getattr(torch_fn, "__name__", "fn").replace("linalg_", "")
    rows.append(row(SUITE, case, name, timing, **accuracy(cupy.from_dlpack(out.contiguous()))))


def _solve_rows(cupy, torch, sizes, quick):
    from gpulinalg.decomp import solve
    rows = []
    repeat = 2 if quick else 3
    for dtype in ("float64", "float32"):
        for n in sizes:
            a, b = _system(cupy, (), n, None, dtype, seed=n)
            case = f"solve {n}x{n} {dtype}, 1 right-hand side"
            extra = {"flops": 2 * n ** 3 / 3 + 2 * n * n}
            for label, (x_a, x_b), back in _inputs(cupy, torch, a, b):
                timing, out = timed_sync(lambda x_a=x_a, x_b=x_b: solve(
                    x_a, x_b, check_finite=False), repeat)
                rows.append(row(SUITE, case, f"gpulinalg solve ({label})", timing, **extra,
                                **_where(), backward_err=_backward(cupy, a, back(out), b)))

            def cupy_solve():
                """cupy.linalg.solve"""
                return cupy.linalg.solve(a, b)
            tensors = (torch.from_dlpack(a), torch.from_dlpack(b)) if torch else ()
            _peers(cupy, torch, case, rows, repeat, cupy_solve,
                   torch.linalg.solve if torch else None,
                   lambda x: {"backward_err": _backward(cupy, a, x, b), **extra}, tensors)
            cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _conditioned(cupy, n, cond, spd, seed):
    """A float64 ``n x n`` matrix with singular values spread from 1 to ``cond`` (log-spaced)
    between random orthogonal factors; symmetric positive definite with ``spd``."""
    rng = cupy.random.default_rng(seed)
    q1, _ = cupy.linalg.qr(rng.standard_normal((n, n)))
    q2 = q1 if spd else cupy.linalg.qr(rng.standard_normal((n, n)))[0]
    a = (q1 * cupy.logspace(0, cupy.log10(cond), n)) @ q2.T
    return (a + a.T) / 2 if spd else a


def _mixed_rows(cupy, torch, sizes, quick):
    """``solve(..., precision="mixed")`` against the float64 solves of gpulinalg, torch and CuPy
    on general and SPD systems of condition 3 and 1e8 (the refinement's two outcomes: refined,
    or sent to float64 by the condition estimate), one right-hand side."""
    from gpulinalg.decomp import solve
    rows = []
    repeat = 2 if quick else 3
    for kind in ("pos", "gen"):
        for cond in (3.0, 1e8):
            for n in sizes:
                if kind == "gen" and n > 16384:
                    continue  # the general route's factor is cuSOLVER's float32 getrf
                a = _conditioned(cupy, n, cond, kind == "pos", seed=n)
                b = cupy.random.default_rng(1).standard_normal(n)
                case = f"solve mixed {kind} {n}x{n} cond {cond:.0e}, 1 right-hand side"
                inputs = _inputs(cupy, torch, a, b) if n == 16384 or quick else \
                    [("cupy in", (a, b), cupy.asarray)]
                for label, (x_a, x_b), back in inputs:
                    timing, out = timed_sync(lambda x_a=x_a, x_b=x_b: solve(
                        x_a, x_b, assume_a=kind, check_finite=False, precision="mixed"), repeat)
                    rows.append(row(SUITE, case, f"gpulinalg solve mixed ({label})", timing,
                                    **_where(), backward_err=_backward(cupy, a, back(out), b)))
                timing, out = timed_sync(lambda: solve(a, b, assume_a=kind, check_finite=False),
                                         repeat)
                rows.append(row(SUITE, case, "gpulinalg solve float64 (cupy in)", timing,
                                **_where(), backward_err=_backward(cupy, a, out, b)))

                def cupy_solve():
                    """cupy.linalg.solve"""
                    return cupy.linalg.solve(a, b)
                tensors = (torch.from_dlpack(a), torch.from_dlpack(b)) if torch else ()
                _peers(cupy, torch, case, rows, repeat, cupy_solve,
                       _torch_pos_solve(torch) if kind == "pos" and torch else
                       (torch.linalg.solve if torch else None),
                       lambda x: {"backward_err": _backward(cupy, a, x, b)}, tensors)
                del a, out
                cupy.get_default_memory_pool().free_all_blocks()
    return rows


def _torch_pos_solve(torch):
    def linalg_cholesky_and_cholesky_solve(a, b):
        return torch.cholesky_solve(b[:, None], torch.linalg.cholesky(a))[:, 0]
    return linalg_cholesky_and_cholesky_solve


def _batched_rows(cupy, torch, count):
    from gpulinalg.decomp import solve
    a, b = _system(cupy, (count,), 32, 1, "float32", seed=3)
    a += 8 * cupy.eye(32, dtype="float32")  # no stack member near singular
    case = f"solve batched {count}x32x32 float32, 1 right-hand side"
    rows = []
    for label, (x_a, x_b), back in _inputs(cupy, torch, a, b):
        timing, out = timed_sync(lambda x_a=x_a, x_b=x_b: solve(x_a, x_b, check_finite=False), 5)
        rows.append(row(SUITE, case, f"gpulinalg solve ({label})", timing, **_where(),
                        backward_err=_backward(cupy, a, back(out), b)))
    tensors = (torch.from_dlpack(a), torch.from_dlpack(b)) if torch else ()
    _peers(cupy, torch, case, rows, 5, None, torch.linalg.solve if torch else None,
           lambda x: {"backward_err": _backward(cupy, a, x, b)}, tensors)
    return rows


def _det_rows(cupy, torch, n):
    from gpulinalg.decomp import det, slogdet
    a, _ = _system(cupy, (), n, None, "float64", seed=5)
    a = cupy.eye(n) + a * (0.5 / n ** 0.5)  # |det| within float64's range
    sign, logabs = slogdet(a)
    ref = float(sign) * float(cupy.exp(cupy.asarray(logabs)))
    case = f"det {n}x{n} float64"

    def accuracy(d):
        return {"rel_err": abs(float(d) - ref) / abs(ref)}
    rows = []
    for label, (x_a,), back in _inputs(cupy, torch, a):
        timing, out = timed_sync(lambda x_a=x_a: det(x_a, check_finite=False), 3)
        rows.append(row(SUITE, case, f"gpulinalg det ({label})", timing, **_where(),
                        **accuracy(back(out))))

    def cupy_det():
        """cupy.linalg.det"""
        return cupy.linalg.det(a)
    _peers(cupy, torch, case, rows, 3, cupy_det, torch.linalg.det if torch else None, accuracy,
           (torch.from_dlpack(a),) if torch else ())
    return rows


def _inv_rows(cupy, torch, n):
    from gpulinalg.decomp import inv
    a, _ = _system(cupy, (), n, None, "float64", seed=7)
    case = f"inv {n}x{n} float64"
    eye = cupy.eye(n)
    an = float(cupy.abs(a).sum(axis=-1).max())

    def accuracy(x):
        x = cupy.asarray(x)
        return {"residual": float(cupy.abs(a @ x - eye).sum(axis=-1).max()
                                  / (an * float(cupy.abs(x).sum(axis=-1).max())))}
    rows = []
    for label, (x_a,), back in _inputs(cupy, torch, a):
        timing, out = timed_sync(lambda x_a=x_a: inv(x_a, check_finite=False), 3)
        rows.append(row(SUITE, case, f"gpulinalg inv ({label})", timing, **_where(),
                        **accuracy(back(out))))

    def cupy_inv():
        """cupy.linalg.inv"""
        return cupy.linalg.inv(a)
    _peers(cupy, torch, case, rows, 3, cupy_inv, torch.linalg.inv if torch else None, accuracy,
           (torch.from_dlpack(a),) if torch else ())
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks decomp_solve")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    print_and_write(run(quick=args.quick), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
