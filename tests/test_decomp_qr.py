"""gpulinalg.decomp.qr on both backends: accuracy ratios, modes, batches, layouts, errors."""

import numpy as np
import pytest

import gpulinalg
from gpulinalg import FallbackWarning
from gpulinalg._runtime import testing
from gpulinalg.decomp import QRResult, qr

from _decomp_dense_ref import (DTYPES, SPECTRA, backward_ratio, host, orthogonality_ratio,
                               random, with_singular_values)

SHAPES = [(40, 12), (12, 40), (25, 25)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", SPECTRA)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_ratios(backend, rng, dtype, kind, shape, mode):
    from _decomp_dense_ref import spectrum
    m, n = shape
    a = with_singular_values(rng, m, n, spectrum(kind, min(m, n), dtype), dtype)
    q, r = qr(a, mode=mode)
    k = min(m, n)
    assert q.shape == (m, m if mode == "complete" else k)
    assert r.shape == (m if mode == "complete" else k, n)
    assert q.dtype == dtype and r.dtype == dtype
    assert np.allclose(np.tril(host(r), -1), 0)
    assert backward_ratio(a, host(q) @ host(r), dtype) <= 30
    assert orthogonality_ratio(q, dtype) <= 30


@pytest.mark.parametrize("dtype", DTYPES)
def test_qr_mode_r_matches_reduced(backend, rng, dtype):
    a = random(rng, (30, 10), dtype)
    r_only = qr(a, mode="r")
    _, r = qr(a)
    assert r_only.shape == (10, 10) and r_only.dtype == dtype
    tol = 100 * np.finfo(dtype).eps * np.abs(host(r)).max()
    assert np.allclose(np.abs(host(r_only)), np.abs(host(r)), atol=tol)


@pytest.mark.parametrize("shape", [(2, 3, 9, 5), (4, 5, 9)])
def test_qr_batched(backend, rng, shape):
    a = random(rng, shape, np.float64)
    q, r = qr(a)
    assert q.shape == shape[:-2] + (shape[-2], min(shape[-2:]))
    for idx in np.ndindex(*shape[:-2]):
        assert backward_ratio(a[idx], host(q)[idx] @ host(r)[idx], np.float64) <= 30
        assert orthogonality_ratio(host(q)[idx], np.float64) <= 30
    qc, rc = qr(a, mode="complete")
    assert qc.shape == shape[:-2] + (shape[-2], shape[-2])
    assert backward_ratio(a, host(qc) @ host(rc), np.float64) <= 30


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 4)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_empty(backend, shape, mode):
    a = np.zeros(shape)
    out = qr(a, mode=mode)
    ref = np.linalg.qr(a, mode=mode)
    if mode == "r":
        assert out.shape == ref.shape
    else:
        assert isinstance(out, QRResult)
        assert out.Q.shape == ref.Q.shape and out.R.shape == ref.R.shape
        assert np.allclose(host(out.Q), ref.Q)


def test_qr_1x1(backend):
    q, r = qr(np.array([[-3.0]]))
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
    with pytest.raises(ValueError, match="mode"):
        qr(np.eye(2), mode="economic")
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
    with gpulinalg.config(backend="cpu"):
        _, r_cpu = qr(a)
    assert np.allclose(np.abs(r_gpu), np.abs(r_cpu), atol=1e-10)


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
