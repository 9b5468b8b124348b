"""CPU parity: gpulinalg on a machine without a GPU (``backend="cpu"``) against the library it
stands in for, on the same NumPy inputs in the same process.

* ``pca``: ``decomp.PCA`` against ``sklearn.decomposition.PCA`` for every ``svd_solver``,
  ``fit``, ``fit_transform`` and ``transform``, on medium inputs;
* ``dense``: the dense calls of ``decomp`` against ``scipy.linalg`` (``truncated_svd`` against
  scikit-learn's ``randomized_svd``).

Ours and the reference are timed interleaved (one run of each in turn, medians of ``--repeat``
runs), so a busy machine slows both alike. Each ``ratio`` row is ours / reference; the bar is
``<= 1.1``. ``python -m benchmarks cpu_parity [--sections pca,dense] [--quick] [--json PATH]``.
"""

import argparse
import sys
import warnings

from benchmarks._harness import have, interleaved_sync, print_and_write, row

SUITE = "cpu_parity"
#: (rows, columns, dtype, n_components) of the PCA cells.
PCA_SHAPES = ((200_000, 100, "float32", 10), (50_000, 500, "float64", 20),
              (5_000, 2_000, "float32", 50))
PCA_QUICK = ((20_000, 50, "float32", 5),)
SOLVERS = ("auto", "full", "covariance_eigh", "randomized", "arpack")
METHODS = ("fit", "fit_transform", "transform")
#: ``full`` (an exact SVD of the whole matrix) is skipped where it takes minutes on two cores.
FULL_MAX_ELEMENTS = 10_000_000


def interleaved(ours, ref, repeat):
    """Medians (seconds) of ``repeat`` runs of ``ours`` and ``ref``, run in turn after one
    warm-up each (:func:`benchmarks._harness.interleaved_sync`, nothing to synchronize)."""
    timings, failed = interleaved_sync({"ours": ours, "ref": ref}, repeat, wait=lambda: None)
    for exc in failed.values():
        raise exc
    return timings["ours"]["median_s"], timings["ref"]["median_s"]


def _cell(case, ours, ref, repeat, **extra):
    t_ours, t_ref = interleaved(ours, ref, repeat)
    return row(SUITE, case, "ratio", {"median_s": t_ours, "reference_s": t_ref,
                                      "runs": repeat}, ratio=t_ours / t_ref, **extra)


def pca_rows(quick, repeat):
    import numpy as np
    from sklearn.decomposition import PCA as SkPCA

    from gpulinalg.decomp import PCA
    rows, rng = [], np.random.default_rng(0)
    for m, n, dtype, k in (PCA_QUICK if quick else PCA_SHAPES):
        X = rng.standard_normal((m, n)).astype(dtype)
        for solver in SOLVERS:
            if solver == "full" and m * n > FULL_MAX_ELEMENTS:
                continue
            for method in METHODS:
                ours = PCA(k, svd_solver=solver, random_state=0)
                ref = SkPCA(k, svd_solver=solver, random_state=0)
                if method == "transform":
                    ours.fit(X)
                    ref.fit(X)
                rows.append(_cell(f"PCA.{method} {m}x{n} {dtype} k={k} {solver}",
                                  lambda e=ours, f=method: getattr(e, f)(X),
                                  lambda e=ref, f=method: getattr(e, f)(X), repeat))
    return rows


def dense_cases(np, n, rng):
    import scipy.linalg as sl
    from sklearn.utils.extmath import randomized_svd

    from gpulinalg import decomp as D
    a = rng.standard_normal((n, n))
    spd = a @ a.T + n * np.eye(n)
    b = rng.standard_normal((n, 5))
    tri = np.triu(a) + n * np.eye(n)
    tall = rng.standard_normal((4 * n, n // 5))
    bt = rng.standard_normal(4 * n)
    c = sl.cho_factor(spd)
    wide = rng.standard_normal((3 * n, n))
    return {
        "qr": (lambda: D.qr(a), lambda: sl.qr(a)),
        "qr economic (tall)": (lambda: D.qr(tall, mode="economic"),
                               lambda: sl.qr(tall, mode="economic")),
        "svd": (lambda: D.svd(a), lambda: sl.svd(a)),
        "svd thin (tall)": (lambda: D.svd(tall, full_matrices=False),
                            lambda: sl.svd(tall, full_matrices=False)),
        "cholesky": (lambda: D.cholesky(spd), lambda: sl.cholesky(spd)),
        "cho_solve": (lambda: D.cho_solve(c, b), lambda: sl.cho_solve(c, b)),
        "solve_triangular": (lambda: D.solve_triangular(tri, b),
                             lambda: sl.solve_triangular(tri, b)),
        "solve": (lambda: D.solve(a, b), lambda: sl.solve(a, b)),
        "lu_factor": (lambda: D.lu_factor(a), lambda: sl.lu_factor(a)),
        "lstsq (tall)": (lambda: D.lstsq(tall, bt), lambda: sl.lstsq(tall, bt)),
        "eigh": (lambda: D.eigh(spd), lambda: sl.eigh(spd)),
        "inv": (lambda: D.inv(a), lambda: sl.inv(a)),
        "det": (lambda: D.det(a), lambda: sl.det(a)),
        "truncated_svd k=20": (lambda: D.truncated_svd(wide, 20, random_state=0),
                               lambda: randomized_svd(wide, 20, random_state=0)),
    }


def dense_rows(quick, repeat):
    import numpy as np
    n = 200 if quick else 1000
    cases = dense_cases(np, n, np.random.default_rng(0))
    return [_cell(f"{name} n={n} float64", ours, ref, repeat)
            for name, (ours, ref) in cases.items()]


SECTIONS = {"pca": pca_rows, "dense": dense_rows}


def run(quick=False, sections=tuple(SECTIONS), repeat=5):
    if not have("sklearn"):
        return []
    import gpulinalg
    rows = []
    with warnings.catch_warnings(), gpulinalg.config_context(backend="cpu"):
        warnings.simplefilter("ignore")
        for name in sections:
            rows.extend(SECTIONS[name](quick, repeat))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks cpu_parity")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of each side")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    rows = run(quick=args.quick, sections=tuple(args.sections.split(",")), repeat=args.repeat)
    for r in rows:
        print(f"{r['case']:55s} ours {r['median_s'] * 1e3:9.2f} ms  reference "
              f"{r['reference_s'] * 1e3:9.2f} ms  ratio {r['ratio']:.2f}", file=sys.stderr)
    print_and_write(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
