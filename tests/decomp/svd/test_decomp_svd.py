"""gpulinalg.decomp.svd on both backends: accuracy on prescribed spectra, drivers, batches."""

import numpy as np
import pytest

import gpulinalg
from gpulinalg import FallbackWarning
from gpulinalg import testing
from gpulinalg.decomp import SVDResult, svd
from gpulinalg.decomp.svd._svd_drivers import resolve_driver

from tests.support.decomp_dense_ref import (DTYPES, SPECTRA, backward_ratio, eps, host,
                                            orthogonality_ratio, random, spectrum,
                                            with_singular_values)

SHAPES = [(60, 15), (15, 60), (30, 30), (40, 36)]


def _check(a, res, s_true, dtype, full=False):
    u, s, vh = (host(x) for x in res)
    m, n = a.shape[-2:]
    k = min(m, n)
    assert s.dtype == np.finfo(dtype).dtype  # real
    assert u.dtype == dtype and vh.dtype == dtype
    assert np.all(np.diff(s, axis=-1) <= 0) and np.all(s >= 0)
    assert backward_ratio(a, (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], dtype) <= 50
    assert orthogonality_ratio(u, dtype) <= 50
    assert orthogonality_ratio(vh, dtype, rows=True) <= 50
    if s_true is not None:
        scale = max(float(np.max(s_true)), 1.0)
        assert np.max(np.abs(s - s_true)) <= 50 * max(m, n) * eps(dtype) * scale


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", SPECTRA)
@pytest.mark.parametrize("shape", SHAPES)
def test_svd_ratios(backend, rng, dtype, kind, shape):
    m, n = shape
    s_true = spectrum(kind, min(m, n), dtype)
    a = with_singular_values(rng, m, n, s_true, dtype)
    res = svd(a)  # SciPy's default: full matrices
    assert isinstance(res, SVDResult)
    assert res.U.shape == (m, m) and res.Vh.shape == (n, n)
    _check(a, res, s_true, dtype)
    econ = svd(a, full_matrices=False)
    assert econ.U.shape == (m, min(m, n)) and econ.Vh.shape == (min(m, n), n)
    _check(a, econ, s_true, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("driver", ["auto", "gesvd", "gesvdj", "gesvdp"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", SPECTRA)
@pytest.mark.parametrize("shape", [(200, 50), (50, 200), (120, 120), (90, 80)])
def test_svd_gpu_drivers(rng, driver, dtype, kind, shape):
    if driver == "gesvdp" and kind in ("ill", "rankdef"):
        pytest.skip("gesvdp is not backward stable with singular values near zero "
                    "(measured 1e2-6e5 n eps): see test_gesvdp_reports_its_perturbation")
    m, n = shape
    s_true = spectrum(kind, min(m, n), dtype)
    a = with_singular_values(rng, m, n, s_true, dtype)
    with gpulinalg.config(backend="gpu"):
        res = svd(a, full_matrices=False, driver=driver)  # the economy drivers under test
    rec = gpulinalg.last_run()
    assert rec.backend == "gpu"
    assert rec.details["driver"] == driver or (driver == "auto" and "verify_bound" in rec.details)
    _check(a, res, s_true if driver != "gesvdp" else None, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(20, 8), (8, 20), (10, 10)])
def test_svd_full_matrices(backend, rng, dtype, shape):
    a = random(rng, shape, dtype)
    u, s, vh = svd(a, full_matrices=True)
    m, n = shape
    assert u.shape == (m, m) and vh.shape == (n, n)
    _check(a, (u, s, vh), np.linalg.svd(a.astype(np.complex128), compute_uv=False), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_values_only(backend, rng, dtype):
    a = random(rng, (30, 12), dtype)
    s = host(svd(a, compute_uv=False))
    ref = np.linalg.svd(a.astype(np.complex128), compute_uv=False)
    assert s.shape == (12,) and s.dtype == np.finfo(dtype).dtype
    assert np.allclose(s, ref, rtol=100 * eps(dtype))


def test_svd_deterministic_signs(backend, rng):
    a = random(rng, (25, 10), np.complex128)
    u, s, vh = (host(x) for x in svd(a))
    peak = np.take_along_axis(vh, np.argmax(np.abs(vh), axis=-1)[:, None], axis=-1)
    assert np.allclose(peak.imag, 0) and np.all(peak.real > 0)


@pytest.mark.parametrize("shape", [(2, 3, 12, 5), (3, 5, 12), (4, 6, 6)])
def test_svd_batched(backend, rng, shape):
    a = random(rng, shape, np.float64)
    u, s, vh = svd(a, full_matrices=False)
    k = min(shape[-2:])
    assert u.shape == shape[:-2] + (shape[-2], k) and s.shape == shape[:-2] + (k,)
    for idx in np.ndindex(*shape[:-2]):
        _check(a[idx], (host(u)[idx], host(s)[idx], host(vh)[idx]),
               np.linalg.svd(a[idx], compute_uv=False), np.float64)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 4, 0)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_empty(backend, shape, full):
    a = np.zeros(shape)
    u, s, vh = svd(a, full_matrices=full)
    ru, rs, rvh = np.linalg.svd(a, full_matrices=full)
    assert u.shape == ru.shape and s.shape == rs.shape and vh.shape == rvh.shape
    assert svd(a, compute_uv=False).shape == rs.shape


def test_svd_1x1(backend):
    u, s, vh = (host(x) for x in svd(np.array([[-2.0]])))
    assert np.isclose(s[0], 2.0) and np.isclose(u[0, 0] * s[0] * vh[0, 0], -2.0)


@pytest.mark.parametrize("layout", ["C", "F", "view"])
def test_svd_layouts_and_input_unmodified(backend, rng, layout):
    base = random(rng, (50, 40), np.float64)
    a = {"C": base, "F": np.asfortranarray(base), "view": base[::2, ::2]}[layout]
    before = a.copy()
    res = svd(a)
    assert np.array_equal(a, before)
    _check(a, res, np.linalg.svd(a, compute_uv=False), np.float64)


def test_svd_matches_scipy_on_cpu(rng):
    import scipy.linalg
    a = random(rng, (30, 20), np.float64)
    with gpulinalg.config(backend="cpu"):
        s = svd(a, compute_uv=False)
    assert np.allclose(s, scipy.linalg.svd(a, compute_uv=False))


@pytest.mark.parametrize("lapack_driver", ["gesdd", "gesvd"])
def test_svd_lapack_driver_on_cpu(rng, monkeypatch, lapack_driver):
    import scipy.linalg
    seen = []
    real = scipy.linalg.svd
    monkeypatch.setattr(scipy.linalg, "svd",
                        lambda *a, **k: seen.append(k["lapack_driver"]) or real(*a, **k))
    a = random(rng, (12, 7), np.float64)
    with gpulinalg.config(backend="cpu"):
        u, s, vh = svd(a, lapack_driver=lapack_driver)
    assert seen == [lapack_driver]
    assert np.allclose(u[:, :7] * s @ vh, a)


def test_svd_lapack_driver_on_gpu_route(rng, fake_gpu, monkeypatch):
    from gpulinalg.decomp.svd import _svd_cuda
    seen = []
    monkeypatch.setattr(_svd_cuda, "svd", lambda a, full, uv, driver, *rest: seen.append(driver)
                        or _factor_host_svd(a, full, uv, driver, *rest))
    a = random(rng, (12, 7), np.float64)
    with gpulinalg.config(backend="gpu"):
        svd(a, lapack_driver="gesvd")  # gesvd asks for QR iteration on the GPU too
        svd(a)
        svd(a, lapack_driver="gesvd", driver="gesvdj")  # an explicit GPU driver wins
    assert seen == ["gesvd", "auto", "gesvdj"]


def _factor_host_svd(*args):
    from gpulinalg.decomp.svd import _svd_host
    return _svd_host.svd(*args)


def test_svd_signature_is_scipys():
    import inspect

    import scipy.linalg
    ours = list(inspect.signature(svd).parameters.values())
    theirs = list(inspect.signature(scipy.linalg.svd).parameters.values())
    assert [(p.name, p.default) for p in ours[:len(theirs)]] == \
        [(p.name, p.default) for p in theirs]
    assert ours[len(theirs)].kind is inspect.Parameter.KEYWORD_ONLY


def test_resolve_driver():
    assert resolve_driver(20000, 2000) .qr_first
    assert not resolve_driver(100, 90).qr_first
    assert resolve_driver(8, 8).driver == "gesvdj"
    plan = resolve_driver(100, 100)
    assert plan.driver == "gesvdp" and plan.verify
    assert resolve_driver(100, 100, compute_uv=False).driver == "gesvd"
    # values alone of a large matrix: the verified gesvdp (vectors computed, then dropped)
    assert resolve_driver(255, 255, compute_uv=False).driver == "gesvd"
    assert resolve_driver(256, 256, compute_uv=False) == resolve_driver(256, 256)
    assert resolve_driver(200, 5000, compute_uv=False).driver == "gesvd"
    assert resolve_driver(1024, 5000, compute_uv=False).verify
    assert resolve_driver(100, 90, full_matrices=True).driver == "gesvd"
    assert resolve_driver(300, 90, full_matrices=True).driver == "gesvdp"
    assert not resolve_driver(300, 90, "gesvdp").verify
    with pytest.raises(ValueError, match="driver"):
        resolve_driver(3, 3, "gesdd")


def test_svd_errors():
    with pytest.raises(ValueError, match="driver"):
        svd(np.eye(2), driver="lapack")
    with pytest.raises(ValueError, match="ndim"):
        svd(np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        svd(np.array([[np.inf, 1.0]]))


def test_svd_fallback_on_oom(rng, fake_gpu):
    a = random(rng, (20, 10), np.float64)
    with testing.inject_fault("oom", op="decomp.svd"), gpulinalg.config(backend="gpu"):
        with pytest.warns(FallbackWarning):
            res = svd(a)
    assert gpulinalg.last_run().fell_back
    _check(a, res, np.linalg.svd(a, compute_uv=False), np.float64)


@pytest.mark.gpu
def test_svd_cupy_in_cupy_out_and_matches_cpu(xp_gpu, rng):
    a = random(rng, (400, 100), np.float64)
    u, s, vh = svd(xp_gpu.asarray(a))
    assert isinstance(u, xp_gpu.ndarray) and gpulinalg.last_run().backend == "gpu"
    with gpulinalg.config(backend="cpu"):
        uc, sc, vhc = svd(a)
    assert np.allclose(s.get(), sc, rtol=1e-12)
    assert np.allclose(vh.get(), vhc, atol=1e-8)  # same deterministic signs
    assert np.allclose(u.get(), uc, atol=1e-8)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gesvdp_reports_its_perturbation(rng, dtype):
    s_true = spectrum("ill", 60, dtype)
    a = with_singular_values(rng, 150, 60, s_true, dtype)
    with gpulinalg.config(backend="gpu"):
        u, s, vh = (host(x) for x in svd(a, driver="gesvdp"))
    rec = gpulinalg.last_run()
    assert "h_err_sigma" in rec.details and rec.details["h_err_sigma"] >= 0
    # (no accuracy claim: in float32 even the largest singular values moved by 1e-2 here)
    with gpulinalg.config(backend="gpu"):
        res = svd(a)  # auto: gesvdp, verified, recomputed with gesvd when the check fails
    _check(a, res, s_true, dtype)
    details = gpulinalg.last_run().details
    assert details["driver"] in ("gesvdp", "gesvd") and "verify_figures" in details


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("kind", SPECTRA)
@pytest.mark.parametrize("shape", [(300, 100), (100, 100), (100, 300)])
def test_svd_gpu_large_single_precision_goes_to_double(rng, monkeypatch, dtype, kind, shape):
    from gpulinalg.decomp.svd import _svd_drivers
    monkeypatch.setattr(_svd_drivers, "PROMOTE_FROM", 100)  # these factors count as large
    m, n = shape
    s_true = spectrum(kind, min(m, n), dtype)
    a = with_singular_values(rng, m, n, s_true, dtype)
    with gpulinalg.config(backend="gpu"):
        res = svd(a, full_matrices=False)
    details = gpulinalg.last_run().details
    assert details.get("promoted") == str(np.result_type(dtype, np.float64)) \
        or details["driver"] == "gesvd"
    _check(a, res, s_true, dtype)


@pytest.mark.gpu
def test_svd_gpu_float32_2048_runs_double_precision_once(rng):
    a = random(rng, (2048, 2048), np.float32)
    with gpulinalg.config(backend="gpu"):
        res = svd(a, full_matrices=False)
    details = gpulinalg.last_run().details
    assert details["promoted"] == "float64" and "rejected" not in details
    _check(a, res, None, np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("kind", ["well", "ill"])
@pytest.mark.parametrize("shape", [(300, 120), (120, 120), (120, 300)])
def test_svd_gpu_values_alone_through_the_verified_svd(rng, monkeypatch, dtype, kind, shape):
    from gpulinalg.decomp.svd import _svd_drivers
    monkeypatch.setattr(_svd_drivers, "VALUES_BY_FULL_FROM", 100)  # these count as large
    s_true = spectrum(kind, min(shape), dtype)
    a = with_singular_values(rng, *shape, s_true, dtype)
    with gpulinalg.config(backend="gpu"):
        s = host(svd(a, compute_uv=False))
    details = gpulinalg.last_run().details
    assert details["driver"] in ("gesvdp", "gesvd") and "verify_figures" in details
    eps = np.finfo(dtype).eps
    assert np.max(np.abs(s - s_true)) <= 50 * min(shape) * eps * s_true[0]
