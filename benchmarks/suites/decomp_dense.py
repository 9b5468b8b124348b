"""Dense factorizations against torch and CuPy on the same GPU, same run (DESIGN §5).

Cases: full SVD of a tall fp64 matrix with a known spectrum (target <= 150 ms at 20000x2000),
QR of the same matrix, Cholesky of an SPD fp64 matrix (target <= 290 ms at n=32768).
Every row carries an accuracy figure: for SVD the max relative error of the singular values
against the known spectrum and the backward error ``||A - U S Vh||_F / ||A||_F``; for QR the
backward error and ``||I - Q^T Q||_F``; for Cholesky ``||L (L^T x) - A x|| / (||A|| ||x||)``
on a random ``x``. ``ours`` runs with ``check_finite=False`` (the peers do not check); the
``ours (check_finite)`` row adds the finiteness pass.
"""

from benchmarks._harness import absent, have, row, time_cpu, time_gpu

SUITE = "decomp"


def run(quick=False):
    if not have("cupy"):
        return [absent(SUITE, "dense factorizations", "all", "cupy not installed")]
    import gpulinalg
    if not gpulinalg.gpu_available():
        return [absent(SUITE, "dense factorizations", "all", "no GPU")] + _cpu_rows(quick)
    m, n = (2000, 200) if quick else (20000, 2000)
    nc = 2048 if quick else 32768
    reps = dict(warmup=1, repeat=3 if quick else 5)
    rows = []
    for name, section in (("SVD", lambda: _svd_rows(m, n, reps, quick)),
                          ("QR", lambda: _qr_rows(m, n, reps)),
                          ("Cholesky", lambda: _cholesky_rows(nc, reps))):
        try:
            rows += section()
        except Exception as exc:  # one broken case must not hide the others' figures
            rows.append(absent(SUITE, name, "all", f"failed: {type(exc).__name__}: {exc}"))
        _free()
    return rows


def _free():
    import cupy
    cupy.cuda.Device().synchronize()
    cupy.get_default_memory_pool().free_all_blocks()


def _known_spectrum(m, n):
    import cupy
    rng = cupy.random.default_rng(0)
    u, _ = cupy.linalg.qr(rng.standard_normal((m, n)))
    v, _ = cupy.linalg.qr(rng.standard_normal((n, n)))
    s = cupy.logspace(0.0, -6.0, n)  # singular values 1 ... 1e-6
    return (u * s) @ v.T, s


def _svd_accuracy(a, s_true, out):
    import cupy
    u, s, vh = (cupy.asarray(x) for x in out)
    rel = float(cupy.max(cupy.abs(s - s_true) / s_true))
    back = float(cupy.linalg.norm(a - (u * s) @ vh) / cupy.linalg.norm(a))
    return {"max_rel_err_s": rel, "backward_err": back}


def _where():
    import gpulinalg
    rec = gpulinalg.last_run()
    return {"where": rec.backend, **rec.details}  # driver, qr_first, h_err_sigma...


def _svd_rows(m, n, reps, quick):
    import cupy

    from gpulinalg.decomp.svd import _svd_drivers
    from gpulinalg.decomp import svd
    a, s_true = _known_spectrum(m, n)
    case = f"full SVD {m}x{n} fp64"
    extra = {"target_s": None if quick else 0.150, "flops": 4 * m * n * n + 22 * n ** 3}
    rows = []
    for driver in ("auto", "gesvd", "gesvdj", "gesvdp"):
        fn = lambda d=driver: svd(a, False, check_finite=False, driver=d)  # noqa: E731
        out = fn()
        rows.append(row(SUITE, case, f"gpulinalg svd driver={driver}", time_gpu(fn, **reps),
                        **extra, **_svd_accuracy(a, s_true, out), **_where()))
    s_def = s_true.copy()  # the same matrix with its last tenth of singular values set to 0
    s_def[-(n // 10):] = 0
    u0, _, vh0 = svd(a, False, check_finite=False)
    deficient = (u0 * s_def) @ vh0
    fn = lambda: svd(deficient, False, check_finite=False)  # noqa: E731
    out = fn()
    rows.append(row(SUITE, f"{case}, rank deficient", "gpulinalg svd driver=auto",
                    time_gpu(fn, **reps), backward_err=_svd_accuracy(deficient, s_true, out)
                    ["backward_err"], **_where()))
    del deficient, u0, vh0
    saved = _svd_drivers.QR_FIRST_RATIO
    _svd_drivers.QR_FIRST_RATIO = float("inf")  # the same kernel on the tall matrix, no QR step
    try:
        fn = lambda: svd(a, False, check_finite=False, driver="gesvd")  # noqa: E731
        out = fn()
        rows.append(row(SUITE, case, "gpulinalg svd gesvd, no QR step", time_gpu(fn, **reps),
                        **extra, **_svd_accuracy(a, s_true, out), **_where()))
    finally:
        _svd_drivers.QR_FIRST_RATIO = saved
    sq, s_sq = _known_spectrum(n, n)  # the square step alone: where the time goes
    for driver in ("gesvd", "gesvdj", "gesvdp"):
        fn = lambda d=driver: svd(sq, False, check_finite=False, driver=d)  # noqa: E731
        rows.append(row(SUITE, f"full SVD {n}x{n} fp64 (the R step)", f"gpulinalg svd "
                        f"driver={driver}", time_gpu(fn, **reps),
                        **_svd_accuracy(sq, s_sq, fn()), **_where()))
    del sq
    fn = lambda: cupy.linalg.svd(a, full_matrices=False)  # noqa: E731
    rows.append(row(SUITE, case, "cupy.linalg.svd", time_gpu(fn, **reps), **extra,
                    **_svd_accuracy(a, s_true, fn())))
    rows.append(_torch_row(case, "torch.linalg.svd", extra,
                           lambda t, ta: t.linalg.svd(ta, full_matrices=False),
                           a, reps, lambda out: _svd_accuracy(a, s_true, out)))
    return rows


def _torch_row(case, label, extra, call, a, reps, accuracy):
    if not have("torch"):
        return absent(SUITE, case, label, "torch not installed")
    import cupy
    import torch
    if not torch.cuda.is_available():
        return absent(SUITE, case, label, "torch without CUDA")
    ta = torch.from_dlpack(a)
    stream = torch.cuda.current_stream()

    def fn():
        return call(torch, ta)
    out = fn()
    timing = time_gpu(fn, stream=cupy.cuda.ExternalStream(stream.cuda_stream), **reps)
    conv = tuple(cupy.from_dlpack(x.contiguous()) for x in (out if isinstance(out, tuple)
                                                            else (out,)))
    return row(SUITE, case, label, timing, **extra,
               **accuracy(conv if len(conv) > 1 else conv[0]))


def _qr_accuracy(a, out):
    import cupy
    q, r = out
    back = float(cupy.linalg.norm(a - q @ r) / cupy.linalg.norm(a))
    orth = float(cupy.linalg.norm(q.T @ q - cupy.eye(q.shape[1])))
    return {"backward_err": back, "orthogonality_err": orth}


def _qr_rows(m, n, reps):
    import cupy

    from gpulinalg.decomp import qr
    a, _ = _known_spectrum(m, n)
    case = f"QR {m}x{n} fp64"
    extra = {"flops": 4 * m * n * n - 4 * n ** 3 / 3}
    fn = lambda: qr(a, mode="economic", check_finite=False)  # noqa: E731
    rows = [row(SUITE, case, "gpulinalg qr", time_gpu(fn, **reps), **extra,
                **_qr_accuracy(a, fn()), **_where())]
    rows += _alg_rows(case, extra, "GEQRF", fn, lambda out: _qr_accuracy(a, out), reps)
    fn = lambda: cupy.linalg.qr(a)  # noqa: E731
    rows.append(row(SUITE, case, "cupy.linalg.qr", time_gpu(fn, **reps), **extra,
                    **_qr_accuracy(a, fn())))
    rows.append(_torch_row(case, "torch.linalg.qr", extra, lambda t, ta: t.linalg.qr(ta), a,
                           reps, lambda o: _qr_accuracy(a, o)))
    return rows


def _spd(n):
    import cupy
    rng = cupy.random.default_rng(1)
    a = rng.standard_normal((n, n))
    a += a.T
    a *= 0.5
    a[cupy.arange(n), cupy.arange(n)] += 2.0 * n ** 0.5 + 1.0
    return a


def _chol_accuracy(a, c):
    import cupy
    x = cupy.random.default_rng(2).standard_normal(a.shape[0])
    lhs = c @ (c.T @ x)
    rhs = a @ x
    return {"backward_err": float(cupy.linalg.norm(lhs - rhs)
                                  / (cupy.linalg.norm(a, 1) * cupy.linalg.norm(x)))}


def _cholesky_rows(n, reps):
    import cupy

    from gpulinalg.decomp import cho_factor, cholesky
    a = _spd(n)
    case = f"Cholesky n={n} fp64"
    extra = {"target_s": 0.290 if n >= 32768 else None, "flops": n ** 3 / 3}
    rows = []
    a_f = cupy.asfortranarray(a)
    for label, fn in (("gpulinalg cholesky", lambda: cholesky(a, True, check_finite=False)),
                      ("gpulinalg cholesky (F-order input: lower kernel)",
                       lambda: cholesky(a_f, lower=True, check_finite=False)),
                      ("gpulinalg cholesky (check_finite)", lambda: cholesky(a, lower=True)),
                      ("gpulinalg cho_factor",
                       lambda: cho_factor(a, lower=True, check_finite=False)[0])):
        out = fn()
        acc = _chol_accuracy(a, cupy.tril(out))
        rows.append(row(SUITE, case, label, time_gpu(fn, **reps), **extra, **acc, **_where()))
        del out
    del a_f
    rows += _alg_rows(case, extra, "POTRF", lambda: cholesky(a, True, check_finite=False),
                      lambda out: _chol_accuracy(a, out), reps)
    fn = lambda: cupy.linalg.cholesky(a)  # noqa: E731
    rows.append(row(SUITE, case, "cupy.linalg.cholesky", time_gpu(fn, **reps), **extra,
                    **_chol_accuracy(a, fn())))
    rows.append(_torch_row(case, "torch.linalg.cholesky", extra,
                           lambda t, ta: t.linalg.cholesky(ta), a, reps,
                           lambda c: _chol_accuracy(a, c)))
    return rows


def _alg_rows(case, extra, function, fn, accuracy, reps):
    """The same call under cuSOLVER's other algorithms for ``function`` (SetAdvOptions)."""
    from gpulinalg.decomp._gpu import _cusolver_cuda
    rows = []
    default = _cusolver_cuda._new_params
    for algo in ("ALG_1", "ALG_2"):
        _cusolver_cuda._new_params = _params_with(default, function, algo)
        label = f"gpulinalg, cusolverDnSetAdvOptions({function}, {algo})"
        try:
            out = fn()
            rows.append(row(SUITE, case, label, time_gpu(fn, **reps), **extra,
                            **accuracy(out), **_where()))
        except Exception as exc:  # cuSOLVER refuses a combination it does not offer
            rows.append(absent(SUITE, case, label, f"{type(exc).__name__}: {exc}"))
        finally:
            _cusolver_cuda._new_params = default
    return rows


def _params_with(default, function, algo):
    """A stand-in for ``_cusolver_cuda._new_params`` that also selects cuSOLVER algorithm
    ``algo`` for the 64-bit routine ``function`` (``"POTRF"``, ``"GEQRF"``...)."""
    from nvmath.bindings import cusolver, cusolverDn

    def new_params():
        params = default()
        cusolverDn.set_adv_options(params, int(cusolverDn.Function[function]),
                                   int(cusolver.AlgMode[algo]))
        return params
    return new_params


def _cpu_rows(quick):
    """Without a GPU: gpulinalg's CPU path against SciPy called directly (target <= 1.1x)."""
    import numpy as np
    import scipy.linalg

    from gpulinalg.decomp import cholesky, qr, svd
    rng = np.random.default_rng(0)
    m, n = (1000, 100) if quick else (4000, 400)
    a = rng.standard_normal((m, n))
    spd = a.T @ a + n * np.eye(n)
    rows = []
    for case, ours, ref in (
            (f"SVD {m}x{n}", lambda: svd(a, full_matrices=False),
             lambda: scipy.linalg.svd(a, full_matrices=False)),
            (f"QR {m}x{n}", lambda: qr(a, mode="economic"),
             lambda: scipy.linalg.qr(a, mode="economic")),
            (f"Cholesky n={n}", lambda: cholesky(spd), lambda: scipy.linalg.cholesky(spd))):
        t_ours, t_ref = time_cpu(ours), time_cpu(ref)
        rows.append(row(SUITE, case, "gpulinalg (cpu)", t_ours,
                        vs_scipy=t_ours["median_s"] / t_ref["median_s"]))
        rows.append(row(SUITE, case, "scipy", t_ref))
    return rows
