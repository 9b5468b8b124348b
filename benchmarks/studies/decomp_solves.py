"""Triangular and Cholesky solves against torch and CuPy on the same GPU, same run.

``python -m benchmarks.studies.decomp_solves [--json PATH]``. CuPy inputs (torch gets the same data
through DLPack), float64: ``solve_triangular`` with one and 256 right-hand sides at n = 4096,
``cho_solve`` with one right-hand side at n = 4096 and over a batch of 200 matrices of 512 x 512.
The gpulinalg rows include the conditioning check the solves make (one small read-back); each row
carries the backward error ``||A x - b|| / (||A|| ||x||)``.
"""

import argparse
import json
import sys


from benchmarks._harness import absent, have, row, time_gpu, write_rows

SUITE = "decomp"


def _spd(cp, batch, n, seed):
    g = cp.random.default_rng(seed).standard_normal(batch + (n, n))
    return g @ g.swapaxes(-1, -2) / n + cp.eye(n)


def _backward(cp, a, x, b):
    r = a @ x - b
    return float(cp.linalg.norm(r) / (cp.linalg.norm(a) * cp.linalg.norm(x)))


def _triangular_rows(cp, torch, n, k):
    from gpulinalg.decomp import solve_triangular
    a = cp.linalg.cholesky(_spd(cp, (), n, 1))
    b = cp.random.default_rng(2).standard_normal((n, k) if k > 1 else (n,))
    case = f"solve_triangular n={n} k={k} fp64 (CuPy in)"
    out = [row(SUITE, case, "gpulinalg", time_gpu(
        lambda: solve_triangular(a, b, lower=True, check_finite=False)),
        backward_error=_backward(cp, a, solve_triangular(a, b, lower=True), b))]
    import cupyx.scipy.linalg as cpl
    out.append(row(SUITE, case, "cupyx.scipy.linalg.solve_triangular", time_gpu(
        lambda: cpl.solve_triangular(a, b, lower=True, check_finite=False))))
    if torch is not None:
        ta, tb = torch.from_dlpack(a), torch.from_dlpack(b if k > 1 else b[:, None])
        out.append(row(SUITE, case, "torch.linalg.solve_triangular", time_gpu(
            lambda: torch.linalg.solve_triangular(ta, tb, upper=False))))
    return out


def _cho_rows(cp, torch, batch, n):
    from gpulinalg.decomp import cho_factor, cho_solve
    a = _spd(cp, batch, n, 3)
    b = cp.random.default_rng(4).standard_normal(batch + (n, 1))
    c = cho_factor(a, lower=True)
    case = f"cho_solve {batch[0] if batch else 1}x{n}^2 k=1 fp64 (CuPy in)"
    out = [row(SUITE, case, "gpulinalg", time_gpu(lambda: cho_solve(c, b, check_finite=False)),
               backward_error=_backward(cp, a, cho_solve(c, b), b))]
    if torch is not None:
        tl, tb = torch.from_dlpack(c[0]).tril(), torch.from_dlpack(b)
        out.append(row(SUITE, case, "torch.cholesky_solve", time_gpu(
            lambda: torch.cholesky_solve(tb, tl))))
    return out


def run(quick=False):
    if not have("cupy"):
        return [absent(SUITE, "solves", "all", "cupy not installed")]
    import gpulinalg
    if not gpulinalg.gpu_available():
        return [absent(SUITE, "solves", "all", "no GPU")]
    import cupy as cp
    torch = __import__("torch") if have("torch") else None
    n = 512 if quick else 4096
    rows = _triangular_rows(cp, torch, n, 1) + _triangular_rows(cp, torch, n, 256)
    rows += _cho_rows(cp, torch, (), n) + _cho_rows(cp, torch, (20 if quick else 200,), 512)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.decomp_solves")
    parser.add_argument("--json")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    for r in rows:
        print(json.dumps(r, default=str), flush=True)
    if args.json:
        write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
