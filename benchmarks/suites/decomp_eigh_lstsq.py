"""Symmetric eigenproblems and least squares against torch and CuPy on the same GPU, same run
(DESIGN §5: ``lstsq`` 200000x500 fp64 and ``eigh`` 8192^2 at or below torch).

Cases: ``eigh`` of a symmetric 8192^2 matrix in fp64 and fp32 (torch.linalg.eigh,
cupy.linalg.eigh); a batch of 20000 symmetric 16^2 fp32 matrices (torch.linalg.eigh); the top
50 eigenpairs of a 16384^2 fp64 matrix by ``subset_by_index`` against the full ``eigh``;
``lstsq`` of a 200000x500 fp64 system with 2 right-hand sides (torch.linalg.lstsq, driver
gels), by the default (gelsd: QR, then the SVD of R) and ``gelsy`` (QR and trsm) routes.
gpulinalg runs on NumPy, CuPy and torch inputs, each row with its cold first call and warm
median (:func:`benchmarks._harness.timed_sync`) and an accuracy figure: for eigh
``||A V - V diag(w)||_F / ||A||_F`` and ``||V^T V - I||_F``, for lstsq the relative residual
``||b - A x||_F / ||b||_F`` beside torch's. Without a GPU every row is absent.

``python -m benchmarks decomp_eigh_lstsq [--quick] [--json PATH]`` (under 5 minutes on an
H100; ``--quick``: small sizes).
"""

from benchmarks._harness import absent, gpu_libraries, row, run_sections, timed_sync

SUITE = "decomp_eigh_lstsq"


def run(quick=False):
    cupy, torch, why = gpu_libraries()
    if cupy is None:
        return [absent(SUITE, case, "all", why)
                for case in ("eigh", "eigh batched", "eigh subset", "lstsq")]
    n = 1024 if quick else 8192
    nbig = 2048 if quick else 16384
    m, k = (20000, 100) if quick else (200000, 500)
    sections = (("eigh", lambda: _eigh_rows(cupy, torch, n, quick)),
                ("eigh batched", lambda: _batched_rows(cupy, torch, 2000 if quick else 20000)),
                ("eigh subset", lambda: _subset_rows(cupy, nbig)),
                ("lstsq", lambda: _lstsq_rows(cupy, torch, m, k, quick)))
    return run_sections(SUITE, sections, cupy)


def _symmetric(cupy, shape, dtype, seed=0):
    x = cupy.random.default_rng(seed).standard_normal(shape, dtype="float64")
    return ((x + x.swapaxes(-1, -2)) / 2).astype(dtype)


def _eig_accuracy(cupy, a, w, v):
    w, v = cupy.asarray(w), cupy.asarray(v)
    res = cupy.linalg.norm(a @ v - v * w[..., None, :]) / cupy.linalg.norm(a)
    orth = cupy.linalg.norm(v.swapaxes(-1, -2) @ v - cupy.eye(v.shape[-1], dtype=v.dtype))
    return {"residual": float(res), "orthogonality": float(orth)}


def _to_cupy(cupy, out):
    return tuple(cupy.from_dlpack(x.contiguous()) for x in out)


def _inputs(cupy, torch, a):
    """gpulinalg's inputs: ``(label, array, converter of results to CuPy)``."""
    yield "cupy in", a, lambda out: tuple(out)
    yield "numpy in", cupy.asnumpy(a), lambda out: tuple(cupy.asarray(x) for x in out)
    if torch is not None:
        yield "torch in", torch.from_dlpack(a), lambda out: _to_cupy(cupy, out)


def _where():
    import gpulinalg
    rec = gpulinalg.last_run()
    return {"where": rec.backend, **{k: v for k, v in rec.details.items()
                                     if isinstance(v, (str, int, float, bool))}}


def _eigh_rows(cupy, torch, n, quick):
    from gpulinalg.decomp import eigh
    rows = []
    repeat = 2 if quick else 3
    for dtype in ("float64", "float32"):
        a = _symmetric(cupy, (n, n), dtype)
        case = f"eigh {n}x{n} {dtype}"
        for label, x, back in _inputs(cupy, torch, a):
            timing, out = timed_sync(lambda x=x: eigh(x, check_finite=False), repeat)
            rows.append(row(SUITE, case, f"gpulinalg eigh ({label})", timing, **_where(),
                            **_eig_accuracy(cupy, a, *back(out))))
        timing, out = timed_sync(lambda: cupy.linalg.eigh(a), repeat)
        rows.append(row(SUITE, case, "cupy.linalg.eigh", timing, **_eig_accuracy(cupy, a, *out)))
        if torch is not None:
            ta = torch.from_dlpack(a)
            timing, out = timed_sync(lambda: torch.linalg.eigh(ta), repeat)
            rows.append(row(SUITE, case, "torch.linalg.eigh", timing,
                            **_eig_accuracy(cupy, a, *_to_cupy(cupy, out))))
        else:
            rows.append(absent(SUITE, case, "torch.linalg.eigh", "torch with CUDA not installed"))
        del a
    return rows


def _batched_rows(cupy, torch, count):
    from gpulinalg.decomp import eigh
    a = _symmetric(cupy, (count, 16, 16), "float32")
    case = f"eigh batched {count}x16x16 float32"
    rows = []
    for label, x, back in _inputs(cupy, torch, a):
        timing, out = timed_sync(lambda x=x: eigh(x, check_finite=False), 5)
        rows.append(row(SUITE, case, f"gpulinalg eigh ({label})", timing, **_where(),
                        **_eig_accuracy(cupy, a, *back(out))))
    if torch is not None:
        ta = torch.from_dlpack(a)
        timing, out = timed_sync(lambda: torch.linalg.eigh(ta), 5)
        rows.append(row(SUITE, case, "torch.linalg.eigh", timing,
                        **_eig_accuracy(cupy, a, *_to_cupy(cupy, out))))
    else:
        rows.append(absent(SUITE, case, "torch.linalg.eigh", "torch with CUDA not installed"))
    return rows


def _subset_rows(cupy, n):
    from gpulinalg.decomp import eigh
    a = _symmetric(cupy, (n, n), "float64", seed=1)
    case = f"eigh top 50 of {n}x{n} float64"
    timing, out = timed_sync(lambda: eigh(a, subset_by_index=(n - 50, n - 1),
                                          check_finite=False), 1)
    rows = [row(SUITE, case, "gpulinalg eigh subset_by_index (cupy in)", timing, **_where(),
                **_eig_accuracy(cupy, a, *out))]
    timing, out = timed_sync(lambda: eigh(a, check_finite=False), 1)
    w, v = out
    rows.append(row(SUITE, case, "gpulinalg eigh, all (cupy in)", timing, **_where(),
                    **_eig_accuracy(cupy, a, w[n - 50:], v[:, n - 50:])))
    return rows


def _lstsq_rows(cupy, torch, m, k, quick):
    from gpulinalg.decomp import lstsq
    rng = cupy.random.default_rng(2)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((m, 2))
    case = f"lstsq {m}x{k} float64, 2 right-hand sides"
    repeat = 2 if quick else 3
    nb = float(cupy.linalg.norm(b))

    def resid(x):
        return {"rel_residual": float(cupy.linalg.norm(b - a @ cupy.asarray(x)) / nb)}
    rows = []
    for driver in (None, "gelsy"):
        for label, x, back in _inputs(cupy, torch, a):
            bb = {"cupy in": b, "numpy in": cupy.asnumpy(b)}.get(label)
            bb = bb if bb is not None else torch.from_dlpack(b)
            timing, out = timed_sync(lambda x=x, bb=bb, d=driver: lstsq(
                x, bb, check_finite=False, lapack_driver=d), repeat)
            sol = back((out[0],))[0]
            rows.append(row(SUITE, case, f"gpulinalg lstsq {driver or 'default'} ({label})",
                            timing, rank=int(out[2]), **_where(), **resid(sol)))
    if torch is not None:
        ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
        timing, out = timed_sync(lambda: torch.linalg.lstsq(ta, tb, driver="gels"), repeat)
        rows.append(row(SUITE, case, "torch.linalg.lstsq driver=gels", timing,
                        **resid(cupy.from_dlpack(out.solution.contiguous()))))
    else:
        rows.append(absent(SUITE, case, "torch.linalg.lstsq", "torch with CUDA not installed"))
    return rows

