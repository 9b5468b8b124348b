"""Sparse direct solves against SciPy, CuPy and nvmath's one-shot cuDSS, same run (DESIGN §5).

Cases: 2-D Poisson (300², 700², 1400²), 3-D Poisson (20³, 40³, 60³, 100³) and scikit-fem
assembled matrices (3-D linear elasticity on an unstructured tetrahedral ball, nrefs 3 and 4;
Poisson on an unstructured triangulated disk, nrefs 6 and 8). ``quick=True`` runs 2-D 300² and
700², 3-D 20³ and 40³ and the smallest FEM meshes. Slow peers run only up to a size per matrix
family (``RUN_LIMITS``); above it their time is extrapolated from the largest case of the family
they ran on, ``t ~ n^1.5`` (2-D) or ``n^2`` (3-D), and reported as ``extrapolated_s`` (not
measured), which keeps the full run within a few minutes.
``$GPULINALG_BENCH_SPARSE_CASES`` (comma-separated substrings of case names, e.g.
``"poisson2d 700,poisson3d 40"``) runs a subset.

``spsolve`` cases (SciPy's name, ``gpulinalg.sparse.spsolve``, CuPy in) on a 3-D Poisson matrix
(80³, n = 512 000) and a 2-D upwind convection–diffusion matrix (700², unsymmetric), against
``cupyx.scipy.sparse.linalg.spsolve`` and nvmath's ``direct_solver`` with default options:
warm (one call first, not timed), one shot each (``quick``: 40³ and 100²).

Every row: ``one_shot_s`` (matrix and right-hand side on the device for GPU rows, on the host
for CPU rows; wall clock including synchronization), the ``analysis_s`` /
``factorization_s`` / ``solve_s`` split where the implementation exposes it,
``refactorize_solve_s`` (new values on the same pattern, then one solve), and the backward
error ``||b - A x||_inf / (||A||_inf ||x||_inf + ||b||_inf)`` of the one-shot solution.
Targets: 2-D Poisson n=490k one shot <= 1 s and refactorize + solve <= 15 ms; 3-D Poisson
n=64k one shot <= 0.5 s.
"""

import statistics
import time

import numpy as np

from benchmarks._harness import absent, have, row

SUITE = "sparse"
TARGETS = {"poisson2d 700^2": {"one_shot_s": 1.0, "refactorize_solve_s": 0.015},
           "poisson3d 40^3": {"one_shot_s": 0.5}}
#: largest n each peer is run on, per matrix family; beyond it the peer's time is extrapolated
#: from the largest case of the same family it ran on (time ~ n^SCALING[family]), not measured.
_CPU = {"2d": 100_000, "3d": 10_000, "fem2d": 150_000, "fem3d": 5_000, "cd": 10_000}
RUN_LIMITS = {"scipy.spsolve": _CPU, "scipy.splu": _CPU, "gpulinalg (backend=cpu)": _CPU,
              "gpulinalg (backend=cpu, reordering=MMD_AT_PLUS_A)":
                  {"2d": 100_000, "3d": 10_000, "fem2d": 10_000, "fem3d": 5_000},
              "cupy.spsolve": {"2d": 100_000, "3d": 10_000, "fem2d": 10_000, "fem3d": 5_000,
                               "cd": 10_000},
              "nvmath.direct_solver (no threading layer)": {"2d": 500_000, "3d": 70_000,
                                                            "fem2d": 150_000, "fem3d": 20_000},
              "gpulinalg (reordering=amd)": {"2d": 100_000, "3d": 10_000, "fem2d": 10_000,
                                             "fem3d": 5_000}}
SCALING = {"2d": 1.5, "3d": 2.0, "fem2d": 1.5, "fem3d": 2.0, "cd": 1.5}
#: peers whose skipped sizes get an extrapolated time (the CPU ones and CuPy's QR)
EXTRAPOLATED = {k for k in RUN_LIMITS if k.startswith(("scipy", "gpulinalg (backend=cpu",
                                                       "cupy"))}
_MEASURED = {}  # (impl, family) -> (n, seconds) of the largest case measured in this run
_META = {}  # n, nnz, build_s of the case being run (merged into every row as it is made)


def poisson2d(m):
    import scipy.sparse as sp
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    eye = sp.identity(m)
    return (sp.kron(eye, t) + sp.kron(t, eye)).tocsr()


def poisson3d(m):
    import scipy.sparse as sp
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    eye = sp.identity(m)
    return (sp.kron(sp.kron(eye, eye), t) + sp.kron(sp.kron(eye, t), eye)
            + sp.kron(sp.kron(t, eye), eye)).tocsr()


def fem_elasticity(nrefs):
    """3-D linear elasticity (E=1e3, nu=0.3) on scikit-fem's tetrahedral ball, one side fixed."""
    import skfem
    from skfem.models.elasticity import lame_parameters, linear_elasticity
    basis = skfem.Basis(skfem.MeshTet.init_ball(nrefs=nrefs),
                        skfem.ElementVector(skfem.ElementTetP1()))
    k = linear_elasticity(*lame_parameters(1e3, 0.3)).assemble(basis)
    fixed = basis.get_dofs(lambda x: x[0] < -0.9).all()
    a = skfem.condense(k, np.ones(k.shape[0]), D=fixed)[0]
    return a.tocsr()


def fem_poisson(nrefs):
    """Poisson on scikit-fem's unstructured triangulated disk, boundary condensed out."""
    import skfem
    from skfem.models.poisson import laplace
    basis = skfem.Basis(skfem.MeshTri.init_circle(nrefs=nrefs), skfem.ElementTriP1())
    a = laplace.assemble(basis)
    return skfem.condense(a, np.ones(a.shape[0]), D=basis.get_dofs())[0].tocsr()


def convection_diffusion(m, peclet=50.0):
    """2-D ``-Δu + c·∇u`` on an m×m grid, upwind differences: unsymmetric, nonsingular."""
    import scipy.sparse as sp
    h = 1.0 / (m + 1)
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m)) / h**2
    d = sp.diags([-1.0, 1.0], [-1, 0], shape=(m, m)) * (peclet / h)
    eye = sp.identity(m)
    return (sp.kron(eye, t + d) + sp.kron(t + 0.5 * d, eye)).tocsr()


def spsolve_cases(quick):
    """``spsolve`` cases: ``(name, family, builder)``; the small ones give the extrapolation
    base of the peers that do not run at the large sizes."""
    out = [("spsolve convdiff 100^2", "cd", lambda: convection_diffusion(100))]
    if quick:
        return out + [("spsolve poisson3d 40^3", "3d", lambda: poisson3d(40))]
    return out + [("spsolve poisson3d 80^3", "3d", lambda: poisson3d(80)),
                  ("spsolve convdiff 700^2", "cd", lambda: convection_diffusion(700))]


def cases(quick):
    """``(name, family, builder)``; builders return a SciPy CSR matrix."""
    grid2 = (300, 700) if quick else (300, 700, 1400)
    grid3 = (20, 40) if quick else (20, 40, 60, 100)
    out = [(f"poisson2d {m}^2", "2d", lambda m=m: poisson2d(m)) for m in grid2]
    out += [(f"poisson3d {m}^3", "3d", lambda m=m: poisson3d(m)) for m in grid3]
    if not have("skfem"):
        return out + [("fem (scikit-fem)", "fem3d", None)]
    for k in (3,) if quick else (3, 4):
        out.append((f"fem elasticity ball (nrefs={k})", "fem3d", lambda k=k: fem_elasticity(k)))
    for k in (6,) if quick else (6, 8):
        out.append((f"fem poisson disk (nrefs={k})", "fem2d", lambda k=k: fem_poisson(k)))
    return out + spsolve_cases(quick)


def _sync():
    import gpulinalg
    if gpulinalg.gpu_available():
        import cupy
        cupy.cuda.Device().synchronize()


def measure(fn, *, budget_s=10.0, repeat=3):
    """Wall-clock seconds of ``fn`` (synchronized): one run, more while under ``budget_s``."""
    times, out = [], None
    while len(times) < repeat and sum(times) < budget_s:
        t0 = time.perf_counter()
        out = fn()
        _sync()
        times.append(time.perf_counter() - t0)
        if len(times) == 1 and times[0] * repeat > budget_s:
            break
    return {"median_s": statistics.median(times), "min_s": min(times), "runs": len(times)}, out


def backward_error(a, x, b):
    """Normwise backward error, on the host in float64."""
    x = x.get() if hasattr(x, "get") else np.asarray(x)
    r = b - a @ x
    anorm = float(abs(a).sum(axis=1).max())
    return float(abs(r).max() / (anorm * abs(x).max() + abs(b).max()))


def _row(case, impl, timing, family=None, **figures):
    """A measured row (with the case's n/nnz), remembered for extrapolating skipped peers."""
    if family is not None and "median_s" in timing:
        n = _META.get("n", 0)
        if n >= _MEASURED.get((impl, family), (0, 0))[0]:
            _MEASURED[(impl, family)] = (n, timing["median_s"])
    return row(SUITE, case, impl, timing, **_META, **figures)


def _skip(case, impl, family):
    """``None`` when ``impl`` runs on this case; else its extrapolated (not measured) row."""
    n = _META.get("n", 0)
    limit = RUN_LIMITS.get(impl, {}).get(family)
    if limit is None or n <= limit:
        return None
    base = _MEASURED.get((impl, family)) if impl in EXTRAPOLATED else None
    if base is None:
        return absent(SUITE, case, impl, f"not run: n={n} > {limit} (would take too long)")
    est = base[1] * (n / base[0]) ** SCALING[family]
    return row(SUITE, case, impl, {}, **_META, extrapolated_s=est, extrapolated_from_n=base[0],
               note=f"not run (n > {limit}); time ~ n^{SCALING[family]} from the measured "
                    f"n={base[0]}")


def _target(case, figures):
    t = TARGETS.get(case)
    if not t:
        return {}
    meets = all(figures.get(k) is not None and figures[k] <= v for k, v in t.items())
    return {"targets": t, "meets_targets": meets}


def _ours_gpu(case, a, b, family, reordering=None):
    """gpulinalg on the GPU: one-shot solve, factorize split, refactorize + solve."""
    import cupy
    import cupyx.scipy.sparse as csp

    import gpulinalg
    from gpulinalg.sparse import factorize, solve
    ad, bd = csp.csr_matrix(a), cupy.asarray(b)
    with gpulinalg.config(backend="gpu"):
        if reordering is None:
            timing, x = measure(lambda: solve(ad, bd))
        else:
            def one_shot():
                with factorize(ad, reordering=reordering) as fac:
                    return fac.solve(bd)
            timing, x = measure(one_shot)
        details = dict(gpulinalg.last_run().details)
        with factorize(ad, reordering=reordering) as fac:
            fac.solve(bd)
            info = fac.info
            new = ad.data * 1.5

            def refac():
                fac.refactorize(new)
                return fac.solve(bd)
            refac_timing, _ = measure(refac, repeat=5, budget_s=5.0)
            info_after = fac.info
    figures = {"one_shot_s": timing["median_s"],
               "analysis_s": info["analysis_seconds"],
               "factorization_s": info["factorization_seconds"],
               "solve_s": info["solve_seconds"],
               "refactorize_solve_s": refac_timing["median_s"],
               "refactorize_factorization_s": info_after["factorization_seconds"],
               "backward_error": backward_error(a, x, b),
               "library": info["library"], "reordering": info["reordering"],
               "multithreaded_analysis": info["multithreaded_analysis"],
               "factor_nnz": info["factor_nnz"], "method": info["method"],
               "refinement_steps": details.get("refinement_steps")}
    label = "gpulinalg" if reordering is None else f"gpulinalg (reordering={reordering})"
    return _row(case, label, timing, family, **figures, **_target(case, figures))


def _nvmath_rows(case, a, b, family):
    import cupy
    import cupyx.scipy.sparse as csp
    from nvmath.sparse.advanced import DirectSolverOptions, direct_solver

    from gpulinalg.sparse import _cudss_cuda as _cudss
    ad = csp.csr_matrix(a)
    bd = cupy.asarray(b)
    out = []
    mt = _cudss.mtlayer_path() if _cudss.available() else None
    variants = [("nvmath.direct_solver (threading layer)", mt),
                ("nvmath.direct_solver (no threading layer)", None)]
    for label, lib in variants:
        if not _cudss.available():
            out.append(absent(SUITE, case, label, "cuDSS not loadable"))
            continue
        if lib is None and label.endswith("(threading layer)"):
            out.append(absent(SUITE, case, label, "libcudss_mtlayer_gomp.so.0 not found"))
            continue
        skipped = _skip(case, label, family)
        if skipped is not None:
            out.append(skipped)
            continue
        opts = DirectSolverOptions(multithreading_lib=lib, logger=_cudss._nvmath_log)
        timing, x = measure(lambda: direct_solver(ad, bd, options=opts))
        figures = {"one_shot_s": timing["median_s"], "backward_error": backward_error(a, x, b)}
        out.append(_row(case, label, timing, family, **figures))
    return out


def _cpu_rows(case, a, b, family):
    import scipy.sparse.linalg as spla

    import gpulinalg
    from gpulinalg.sparse import solve
    out = []
    peers = {
        "scipy.spsolve": lambda: spla.spsolve(a, b),
        "scipy.splu": lambda: spla.splu(a.tocsc()).solve(b),
        "gpulinalg (backend=cpu)": lambda: _with_cpu(gpulinalg, lambda: solve(a, b)),
        "gpulinalg (backend=cpu, reordering=MMD_AT_PLUS_A)":
            lambda: _with_cpu(gpulinalg, lambda: _factor_solve(a, b, "MMD_AT_PLUS_A")),
    }
    for label, fn in peers.items():
        skipped = _skip(case, label, family)
        if skipped is not None:
            out.append(skipped)
            continue
        timing, x = measure(fn, repeat=2)
        figures = {"one_shot_s": timing["median_s"], "backward_error": backward_error(a, x, b)}
        if label == "scipy.splu":
            figures["refactorize_solve_s"] = timing["median_s"]  # SciPy cannot reuse analysis
        out.append(_row(case, label, timing, family, **figures))
    return out


def _factor_solve(a, b, reordering):
    from gpulinalg.sparse import factorize
    with factorize(a, reordering=reordering) as fac:
        return fac.solve(b)


def _with_cpu(gpulinalg, fn):
    with gpulinalg.config(backend="cpu"):
        return fn()


def _cupy_row(case, a, b, family):
    label = "cupy.spsolve"
    skipped = _skip(case, label, family)
    if skipped is not None:
        return skipped
    import cupy
    import cupyx.scipy.sparse as csp
    import cupyx.scipy.sparse.linalg as cspla
    ad, bd = csp.csr_matrix(a), cupy.asarray(b)
    timing, x = measure(lambda: cspla.spsolve(ad, bd), repeat=1)
    return _row(case, label, timing, family, one_shot_s=timing["median_s"],
                backward_error=backward_error(a, x, b))


def _spsolve_rows(case, a, b, family, gpu):
    """SciPy's name ``gpulinalg.sparse.spsolve`` (CuPy in) against CuPy's ``spsolve`` and
    nvmath's ``direct_solver`` with default options, and SciPy's ``spsolve`` (host): warm, one
    shot."""
    import scipy.sparse.linalg as spla

    import gpulinalg
    peers = {"scipy.spsolve": lambda: spla.spsolve(a, b)}
    if gpu:
        import cupy
        import cupyx.scipy.sparse as csp
        import cupyx.scipy.sparse.linalg as cspla
        from nvmath.sparse.advanced import direct_solver

        from gpulinalg.sparse import spsolve
        ad, bd = csp.csr_matrix(a), cupy.asarray(b)
        peers = {"gpulinalg.sparse.spsolve": lambda: spsolve(ad, bd),
                 "nvmath.direct_solver (default options)": lambda: direct_solver(ad, bd),
                 "cupy.spsolve": lambda: cspla.spsolve(ad, bd), **peers}
    out = []
    for label, fn in peers.items():
        skipped = _skip(case, label, family)
        if skipped is not None:
            out.append(skipped)
            continue
        with gpulinalg.config(backend="gpu" if gpu and "scipy" not in label else "cpu"):
            fn()  # warm: libraries loaded, handles and pools made
            _sync()
            timing, x = measure(fn, repeat=3)
        figures = {"one_shot_s": timing["median_s"], "warm": True,
                   "backward_error": backward_error(a, x, b)}
        out.append(_row(case, label, timing, family, **figures))
    return out


def run_case(name, family, build, gpu):
    if build is None:
        return [absent(SUITE, name, "all", "scikit-fem not importable")]
    t0 = time.perf_counter()
    a = build()
    _META.clear()
    _META.update(n=a.shape[0], nnz=int(a.nnz), build_s=time.perf_counter() - t0)
    b = np.random.default_rng(0).standard_normal(a.shape[0])
    if name.startswith("spsolve "):
        return _spsolve_rows(name, a, b, family, gpu)
    rows = []
    if gpu:
        rows.append(_ours_gpu(name, a, b, family))
        amd = _skip(name, "gpulinalg (reordering=amd)", family)
        rows.append(amd if amd is not None else _ours_gpu(name, a, b, family, reordering="amd"))
        rows += _nvmath_rows(name, a, b, family)
        rows.append(_cupy_row(name, a, b, family))
    return rows + _cpu_rows(name, a, b, family)


def _selected(name):
    """``$GPULINALG_BENCH_SPARSE_CASES``: comma-separated substrings of case names to run."""
    import os
    wanted = [w.strip() for w in os.environ.get("GPULINALG_BENCH_SPARSE_CASES", "").split(",")
              if w.strip()]
    return not wanted or any(w in name for w in wanted)


def run(quick=False):
    if not have("scipy"):
        return [absent(SUITE, "all", "all", "scipy not installed")]
    import gpulinalg
    gpu = have("cupy") and gpulinalg.gpu_available()
    _MEASURED.clear()
    rows = [] if gpu else [absent(SUITE, "all", "GPU rows", "no GPU")]
    for name, family, build in cases(quick):
        if not _selected(name):
            continue
        try:
            rows += run_case(name, family, build, gpu)
        except Exception as exc:  # one broken case must not hide the others' figures
            rows.append(absent(SUITE, name, "all", f"failed: {type(exc).__name__}: {exc}"))
    return rows
