"""gpulinalg.decomp.qr on both backends: accuracy ratios, modes, batches, layouts, errors."""

import contextlib
import numpy as np
import pytest

import gpulinalg
from gpulinalg import FallbackWarning
from gpulinalg import testing
from gpulinalg.decomp import QRResult, qr

from tests.support.decomp_dense_ref import (DTYPES, SPECTRA, backward_ratio, host,
                                            orthogonality_ratio, random, with_singular_values)

SHAPES = [(40, 12), (12, 40), (25, 25)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", SPECTRA)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["economic", "full"])
def test_qr_ratios(backend, rng, dtype, kind, shape, mode):
    from tests.support.decomp_dense_ref import spectrum
    m, n = shape
    a = with_singular_values(rng, m, n, spectrum(kind, min(m, n), dtype), dtype)
    q, r = qr(a, mode=mode)
    k = min(m, n)
    assert q.shape == (m, m if mode == "full" else k)
    assert r.shape == (m if mode == "full" else k, n)
    assert q.dtype == dtype and r.dtype == dtype
    assert np.allclose(np.tril(host(r), -1), 0)
    assert backward_ratio(a, host(q) @ host(r), dtype) <= 30
    assert orthogonality_ratio(q, dtype) <= 30


@pytest.mark.parametrize("dtype", DTYPES)
def test_qr_mode_r_matches_full(backend, rng, dtype):
    a = random(rng, (30, 10), dtype)
    out = qr(a, mode="r")
    assert isinstance(out, tuple) and len(out) == 1  # SciPy's (R,)
    r_only = out[0]
    _, r = qr(a)
    assert r_only.shape == (30, 10) and r_only.dtype == dtype
    tol = 100 * np.finfo(dtype).eps * np.abs(host(r)).max()
    assert np.allclose(np.abs(host(r_only)), np.abs(host(r)), atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(12, 5), (5, 12), (2, 7, 7)])
def test_qr_raw_matches_scipy(backend, rng, dtype, shape):
    import scipy.linalg
    a = random(rng, shape, dtype)
    (h, tau), r = qr(a, mode="raw")
    k = min(shape[-2:])
    assert h.shape == shape and tau.shape == shape[:-2] + (k,) and r.shape == \
        shape[:-2] + (k, shape[-1])
    tol = 1e3 * np.finfo(dtype).eps
    for idx in np.ndindex(*shape[:-2]):
        (h_ref, tau_ref), r_ref = scipy.linalg.qr(a[idx], mode="raw")
        assert np.allclose(host(h)[idx], h_ref, atol=tol * np.abs(h_ref).max())
        assert np.allclose(host(tau)[idx], tau_ref, atol=tol)
        assert np.allclose(host(r)[idx], r_ref, atol=tol * np.abs(r_ref).max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["full", "economic", "r", "raw"])
@pytest.mark.parametrize("shape", [(9, 6), (6, 9), (2, 8, 8)])
def test_qr_pivoting(backend, rng, dtype, mode, shape):
    import scipy.linalg
    a = random(rng, shape, dtype)
    a[..., 1] *= 1e-3  # a column LAPACK's geqp3 moves to the back
    before = a.copy()
    with contextlib.ExitStack() as stack:
        if backend == "gpu":  # no cuSOLVER geqp3: the GPU asked for, the CPU ran, visibly
            stack.enter_context(pytest.warns(gpulinalg.FallbackWarning, match="geqp3"))
        out = qr(a, mode=mode, pivoting=True)
    p = host(out[-1])
    assert p.dtype == np.int32 and p.shape == shape[:-2] + (shape[-1],)
    assert np.array_equal(a, before)
    for idx in np.ndindex(*shape[:-2]):
        ref = scipy.linalg.qr(a[idx], mode=mode, pivoting=True)
        assert np.array_equal(p[idx], ref[-1])
        r = host(out[-2])[idx]
        assert np.allclose(r, ref[-2], atol=1e3 * np.finfo(dtype).eps * np.abs(r).max())
        d = np.abs(np.diagonal(r))
        assert np.all(d[:-1] >= d[1:] * (1 - 1e-5))
        if mode in ("full", "economic"):
            q = host(out[0])[idx]
            assert backward_ratio(a[idx][:, p[idx]], q @ r, dtype) <= 30
    assert gpulinalg.last_run().backend == "cpu"  # no cuSOLVER geqp3: the CPU, visibly


def test_qr_pivoting_numpy_input_stays_on_host(rng, fake_gpu):
    a = random(rng, (30, 20), np.float64)
    q, r, p = qr(a, pivoting=True)  # auto: offloading a host-only algorithm never pays
    assert gpulinalg.last_run().backend == "cpu"
    assert backward_ratio(a[:, p], q @ r, np.float64) <= 30


def test_qr_pivoting_under_backend_gpu_is_a_visible_fallback(rng, fake_gpu):
    a = random(rng, (30, 20), np.float64)
    with gpulinalg.config(backend="gpu"), pytest.warns(gpulinalg.FallbackWarning, match="geqp3"):
        q, r, p = qr(a, pivoting=True)
    rec = gpulinalg.last_run()
    assert rec.backend == "cpu" and rec.fell_back and "no cuSOLVER routine" in rec.reason
    assert backward_ratio(a[:, p], q @ r, np.float64) <= 30


def test_qr_lwork_and_overwrite_on_cpu(rng):
    a = random(rng, (20, 10), np.float64)
    with gpulinalg.config(backend="cpu"):
        q, r = qr(a, lwork=200)
        assert backward_ratio(a, q @ r, np.float64) <= 30
        with pytest.raises(ValueError):
            qr(a, lwork=0)  # below LAPACK's minimum
        f = np.asfortranarray(a)
        q2, r2 = qr(f, overwrite_a=True)
        assert np.allclose(r2, r)


@pytest.mark.parametrize("shape", [(2, 3, 9, 5), (4, 5, 9)])
def test_qr_batched(backend, rng, shape):
    a = random(rng, shape, np.float64)
    q, r = qr(a, mode="economic")
    assert q.shape == shape[:-2] + (shape[-2], min(shape[-2:]))
    for idx in np.ndindex(*shape[:-2]):
        assert backward_ratio(a[idx], host(q)[idx] @ host(r)[idx], np.float64) <= 30
        assert orthogonality_ratio(host(q)[idx], np.float64) <= 30
    qc, rc = qr(a, mode="full")
    assert qc.shape == shape[:-2] + (shape[-2], shape[-2])
    assert backward_ratio(a, host(qc) @ host(rc), np.float64) <= 30


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 4)])
@pytest.mark.parametrize("mode", ["full", "economic", "r", "raw"])
@pytest.mark.parametrize("pivoting", [False, True])
def test_qr_empty(backend, shape, mode, pivoting):
    import scipy.linalg
    a = np.zeros(shape)
    out = qr(a, mode=mode, pivoting=pivoting)
    assert gpulinalg.last_run().backend == "none"
    ref = scipy.linalg.qr(a[(0,) * (a.ndim - 2)], mode=mode, pivoting=pivoting)
    if mode == "full" and not pivoting:
        assert isinstance(out, QRResult)
    flat_out = [host(x) for x in (out[0] + out[1:] if mode == "raw" else out)]
    flat_ref = list(ref[0] + ref[1:] if mode == "raw" else ref)
    assert len(flat_out) == len(flat_ref)
    for got, want in zip(flat_out, flat_ref):
        assert got.shape == a.shape[:-2] + want.shape and got.dtype == want.dtype
        assert np.array_equal(got[(0,) * (a.ndim - 2)], want)


def test_qr_1x1(backend):
    q, r = qr(np.array([[-3.0]]))
    assert q.shape == r.shape == (1, 1)
    assert np.isclose(host(q)[0, 0] * host(r)[0, 0], -3.0) and abs(host(q)[0, 0]) == 1


@pytest.mark.parametrize("layout", ["C", "F", "view"])
def test_qr_layouts_and_input_unmodified(backend, rng, layout):
    base = random(rng, (40, 30), np.float64)
    a = {"C": base, "F": np.asfortranarray(base), "view": base[::2, ::3]}[layout]
    before = a.copy()
    q, r = qr(a)
    assert np.array_equal(a, before)
    assert backward_ratio(a, host(q) @ host(r), np.float64) <= 30


def test_qr_dtypes(backend, rng):
    assert qr(np.arange(6).reshape(3, 2))[0].dtype == np.float64
    assert qr(random(rng, (3, 2), np.float32))[1].dtype == np.float32


def test_qr_errors():
    with pytest.raises(ValueError, match="Mode.*NumPy's name: use 'economic'"):
        qr(np.eye(2), mode="reduced")
    with pytest.raises(ValueError, match="Mode"):
        qr(np.eye(2), mode="complete")
    with pytest.raises(ValueError, match="ndim"):
        qr(np.ones(3))
    with pytest.raises(TypeError):
        qr(np.array([["a"]]))
    with pytest.raises(ValueError, match="NaN"):
        qr(np.array([[1.0, np.nan]]))
    qr(np.array([[1.0, np.nan]]), check_finite=False)


def test_qr_fallback_on_oom(rng, fake_gpu):
    a = random(rng, (20, 10), np.float64)
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(FallbackWarning):
            q, r = qr(a)
    assert gpulinalg.last_run().fell_back
    assert backward_ratio(a, q @ r, np.float64) <= 30


def test_qr_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(random(rng, (8, 5), np.float64))
    q, r = qr(a)
    assert isinstance(q, torch.Tensor) and isinstance(r, torch.Tensor)
    assert torch.allclose(q @ r, a)


@pytest.mark.gpu
def test_qr_cupy_in_cupy_out(xp_gpu, rng):
    a = xp_gpu.asarray(random(rng, (300, 120), np.float64))
    q, r = qr(a)
    assert isinstance(q, xp_gpu.ndarray) and gpulinalg.last_run().backend == "gpu"
    assert backward_ratio(a, q @ r, np.float64) <= 30


@pytest.mark.gpu
def test_qr_gpu_matches_cpu(rng):
    a = random(rng, (3, 200, 90), np.float64)
    with gpulinalg.config(backend="gpu"):
        _, r_gpu = qr(a)
        raw_gpu = qr(a, mode="raw")
    with gpulinalg.config(backend="cpu"):
        _, r_cpu = qr(a)
        raw_cpu = qr(a, mode="raw")
    assert np.allclose(np.abs(r_gpu), np.abs(r_cpu), atol=1e-10)
    # cuSOLVER's geqrf follows LAPACK's Householder convention: the same reflectors
    assert np.allclose(raw_gpu[0][0], raw_cpu[0][0], atol=1e-9)
    assert np.allclose(raw_gpu[0][1], raw_cpu[0][1], atol=1e-9)


@pytest.mark.gpu
def test_qr_pivoting_cupy_in_cupy_out(xp_gpu, rng):
    a = random(rng, (200, 80), np.float64)
    q, r, p = qr(xp_gpu.asarray(a), pivoting=True, mode="economic")
    rec = gpulinalg.last_run()
    assert isinstance(q, xp_gpu.ndarray) and isinstance(p, xp_gpu.ndarray)
    assert rec.backend == "cpu" and "no cuSOLVER routine" in rec.reason
    assert backward_ratio(a[:, p.get()], q.get() @ r.get(), np.float64) <= 30


@pytest.mark.gpu
def test_qr_real_oom_falls_back(xp_gpu, rng):
    a = random(rng, (2000, 1000), np.float64)
    pool = xp_gpu.get_default_memory_pool()
    pool.free_all_blocks()
    pool.set_limit(size=1 << 20)
    try:
        with gpulinalg.config(backend="gpu"), pytest.warns(FallbackWarning):
            q, r = qr(a)
    finally:
        pool.set_limit(size=0)
    assert gpulinalg.last_run().backend == "cpu"
    assert backward_ratio(a, q @ r, np.float64) <= 30


@pytest.mark.parametrize("scipy_deprecates", [False, True])
def test_lwork_warns_as_the_installed_scipy(monkeypatch, scipy_deprecates):
    """SciPy 1.18 deprecated qr's lwork: passing it at all (None included) warns there, and so
    here with that SciPy installed; leaving it out never warns; bad values still raise."""
    import warnings
    from gpulinalg.decomp.qr import _qr_api
    monkeypatch.setattr(_qr_api, "_LWORK_WARNS", [scipy_deprecates])
    a = np.array([[8.0, 2, 3], [2, 9, 3], [5, 3, 6]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q, r = qr(a)
    for lwork in (None, 10, -1):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            q2, r2 = qr(a, lwork=lwork)
        ours = [w for w in seen if issubclass(w.category, DeprecationWarning)]
        assert len(ours) == (1 if scipy_deprecates else 0), [str(w.message) for w in seen]
        np.testing.assert_allclose(q2 @ r2, a)
    for bad in (0, 2):
        with pytest.raises(ValueError):
            qr(a, lwork=bad)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2000, 50), (50, 2000), (5, 300, 100), (3, 40, 12),
                                   (64, 16, 16)])
@pytest.mark.parametrize("mode", ["economic", "r", "full"])
def test_gpu_qr_check_finite_of_device_input(xp_gpu, rng, shape, mode):
    """CuPy input: the engine flags NaN and Inf in its own copy (the library routes) or up
    front (the fused small stacks) and raises as SciPy does; without the check it runs."""
    cp = xp_gpu
    if mode == "full" and shape[-2] > 1000:
        mode = "economic"  # a 2000 x 2000 Q says nothing more
    a = random(rng, shape, np.float64)
    out = qr(cp.asarray(a), mode=mode)
    r = cp.asnumpy(out[0] if mode == "r" else out[1])
    ref = qr(a, mode=mode)
    assert np.allclose(np.abs(r), np.abs(ref[0] if mode == "r" else ref[1]), atol=1e-8)
    a[(0,) * (a.ndim - 2) + (shape[-2] - 1, 3)] = np.nan
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        qr(cp.asarray(a), mode=mode)
    qr(cp.asarray(a), mode=mode, check_finite=False)
