"""Tall QR by Cholesky (CholeskyQR2, ``decomp.qr._cholqr_cuda``): the route of ``qr`` for tall
matrices in modes ``economic`` and ``r``, its check and its fallback to Householder QR; against
an emulation of cuBLAS/cuSOLVER on the CPU, and on the GPU (``gpu`` mark)."""

import math

import numpy as np
import pytest

from gpulinalg import decomp, last_run
from gpulinalg.decomp._gpu import _batched_plan
from gpulinalg.decomp.qr import _cholqr_cuda, _qr_cuda
from gpulinalg.decomp.qr import _qr_host

from tests.support.cusolver_emulator import CALLS, dev, plain
from tests.support.decomp_dense_ref import (DTYPES, backward_ratio, orthogonality_ratio, random,
                               with_singular_values)



def _engine(a, mode, dtype, finite=False):
    """CholeskyQR2 itself (stacks too: the route sends single matrices only)."""
    return _cholqr_cuda.qr(dev(a), mode, np.dtype(dtype), finite)


def _phases(r_ref):
    """The unit scalars ``d`` with ``R_ref = d R`` row by row for R of positive diagonal."""
    d = np.diagonal(r_ref, axis1=-2, axis2=-1)
    return d / np.abs(d)


def _assert_qr(a, q, r, dtype, positive=True):
    """A QR of ``a``; ``positive``: R's diagonal real and positive (CholeskyQR2's; Householder
    QR, which stacks keep, makes no such promise)."""
    k = a.shape[-1]
    assert q.shape == a.shape and r.shape == a.shape[:-2] + (k, k)
    assert backward_ratio(a, q @ r, dtype) <= 30
    assert orthogonality_ratio(q, dtype) <= 30
    assert np.allclose(np.tril(r, -1), 0)
    if positive:
        diag = np.diagonal(r, axis1=-2, axis2=-1)
        assert np.all(diag.real > 0) and np.allclose(diag.imag, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(64, 8), (2, 160, 5), (2, 2, 136, 3), (9, 1)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_emulated_economic(emu, rng, dtype, shape, order):
    a = np.asarray(random(rng, shape, dtype), order=order)
    CALLS.clear()
    q, r = (plain(x) for x in _engine(a, "economic", dtype))
    nb = math.prod(shape[:-2])
    assert CALLS["gemm"] == 2 * nb and CALLS["trsm_right"] == 2 * nb
    assert CALLS["geqrf"] == 0 and CALLS["get"] == 1  # one read-back: codes and checks
    _assert_qr(a, q, r, dtype)
    ref = _qr_host.qr(a, "economic", False, None, False, np.dtype(dtype))
    d = _phases(ref.R)  # Householder's R is ours with rows scaled by unit scalars
    tol = 1e-4 if np.finfo(dtype).bits <= 32 else 1e-10
    assert np.allclose(ref.R, d[..., :, None] * r, atol=tol)
    assert np.allclose(ref.Q, q * d[..., None, :], atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_mode_r(emu, rng, dtype):
    a = random(rng, (3, 144, 6), dtype)
    CALLS.clear()
    (r,) = _engine(a, "r", dtype)
    r = plain(r)
    assert CALLS["gemm"] == 6 and CALLS["trsm_right"] == 3  # Q's last solve left out
    (ref,) = _qr_host.qr(a, "r", False, None, False, np.dtype(dtype))
    assert r.shape == ref.shape == (3, 144, 6) and np.all(r[:, 6:] == 0)
    tol = 1e-4 if np.finfo(dtype).bits <= 32 else 1e-10
    assert np.allclose(np.abs(r), np.abs(ref), atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gemm_max", [0, 512])
def test_emulated_gram_by_syrk_or_gemm(emu, rng, monkeypatch, dtype, gemm_max):
    """Both ways to the Gram matrix give the same factorization (SYRK/HERK: its upper
    triangle only)."""
    monkeypatch.setattr(_cholqr_cuda, "GRAM_GEMM_MAX", gemm_max)
    a = random(rng, (2, 150, 7), dtype)
    CALLS.clear()
    q, r = (plain(x) for x in _engine(a, "economic", dtype))
    assert (CALLS["rank_k"], CALLS["gemm"]) == ((4, 0) if gemm_max == 0 else (0, 4))
    _assert_qr(a, q, r, dtype)


@pytest.mark.parametrize("mode", ["economic", "r"])
def test_emulated_route_takes_single_matrices(emu, rng, mode):
    """``qr`` sends a single tall matrix to CholeskyQR2 and a stack of them to Householder
    QR (its stream lanes; no stack was timed)."""
    one, stack = random(rng, (160, 5), np.float64), random(rng, (2, 160, 5), np.float64)
    for a, gemms, geqrfs in ((one, 2, 0), (stack, 0, 2)):
        CALLS.clear()
        _qr_cuda.qr(dev(a), mode, False, None, False, np.dtype(np.float64))
        assert (CALLS["gemm"], CALLS["geqrf"]) == (gemms, geqrfs)


@pytest.mark.parametrize("mode", ["full", "raw"])
def test_emulated_modes_householder_keeps(emu, rng, mode):
    a = random(rng, (64, 4), np.float64)
    CALLS.clear()
    _qr_cuda.qr(dev(a), mode, False, None, False, np.dtype(np.float64))
    assert CALLS["gemm"] == 0 and CALLS["geqrf"] == 1


def test_emulated_not_tall_keeps_householder(emu, rng):
    a = random(rng, (150, 100), np.float64)  # 1.5 rows a column: below TALL_QR's ratio
    assert not _batched_plan.tall_qr(150, 100)
    CALLS.clear()
    q, r = (plain(x) for x in _qr_cuda.qr(dev(a), "economic", False, None, False,
                                          np.dtype(np.float64)))
    assert CALLS["gemm"] == 0 and CALLS["geqrf"] == 1
    assert backward_ratio(a, q @ r, np.float64) <= 30


@pytest.mark.parametrize("dtype,cond", [(np.float64, 1e12), (np.float64, 1e9),
                                        (np.float32, 1e5), (np.complex128, 1e12)])
def test_emulated_ill_conditioned_falls_back(emu, rng, dtype, cond):
    """Past ``sqrt(GRAM_TOL / eps)`` the check rejects CholeskyQR2 (a failed Cholesky factor,
    or a second Gram matrix far from I) and Householder QR gives the result."""
    s = np.geomspace(1.0, 1.0 / cond, 6)
    a = np.stack([with_singular_values(rng, 96, 6, s, dtype) for _ in range(2)])
    a[0] = random(rng, (96, 6), dtype)  # one well-conditioned matrix: the stack is rejected
    assert _engine(a, "economic", dtype) is None
    CALLS.clear()
    q, r = (plain(x) for x in _qr_cuda.qr(dev(a[1]), "economic", False, None, False,
                                          np.dtype(dtype)))
    assert CALLS["gemm"] == 2 and CALLS["geqrf"] == 1
    assert backward_ratio(a[1], q @ r, dtype) <= 30
    assert orthogonality_ratio(q, dtype) <= 30


def test_emulated_check_rejects_a_loose_gram(emu, rng, monkeypatch):
    """With the check's limit at 0 every result is rejected (the limit is read)."""
    monkeypatch.setattr(_cholqr_cuda, "GRAM_TOL", 0.0)
    CALLS.clear()
    assert _cholqr_cuda.qr(dev(random(rng, (40, 4), np.float64)), "economic",
                           np.dtype(np.float64)) is None
    assert CALLS["gemm"] == 2


def test_emulated_rank_deficient_falls_back(emu, rng):
    a = random(rng, (80, 5), np.float64)
    a[:, 3] = a[:, 1]  # singular Gram matrix: the first Cholesky factor fails
    CALLS.clear()
    q, r = (plain(x) for x in _qr_cuda.qr(dev(a), "economic", False, None, False,
                                          np.dtype(np.float64)))
    assert CALLS["geqrf"] == 1
    assert backward_ratio(a, q @ r, np.float64) <= 30
    assert abs(r[3, 3]) < 1e-12 * abs(r[0, 0])


def test_emulated_nonfinite(emu, rng):
    a = random(rng, (64, 4), np.float64)
    a[7, 2] = np.nan
    with pytest.raises(ValueError, match="infs or NaNs"):
        _qr_cuda.qr(dev(a), "economic", False, None, False, np.dtype(np.float64), True)
    CALLS.clear()  # unchecked: NaN in, NaN out, through Householder QR (the check rejects)
    q, r = _qr_cuda.qr(dev(a), "economic", False, None, False, np.dtype(np.float64))
    assert CALLS["geqrf"] == 1 and np.isnan(plain(r)).any()


def test_tall_qr_limits(monkeypatch):
    monkeypatch.setattr(_batched_plan, "TALL_QR", (4, 100))
    assert _batched_plan.tall_qr(400, 100) and not _batched_plan.tall_qr(399, 100)
    assert not _batched_plan.tall_qr(4000, 101) and not _batched_plan.tall_qr(10, 0)


# -- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(20000, 500), (3, 4096, 64), (100000, 1), (8192, 2048)])
def test_gpu_tall_qr(rng, dtype, shape):
    import cupy
    a = random(rng, shape, dtype)
    q, r = decomp.qr(cupy.asarray(a), mode="economic")
    assert last_run().details.get("qr") == ("cholesky_qr2" if len(shape) == 2 else None)
    _assert_qr(a, cupy.asnumpy(q), cupy.asnumpy(r), dtype, positive=len(shape) == 2)
    (r_only,) = decomp.qr(cupy.asarray(a), mode="r")
    tol = 1e-3 if np.finfo(dtype).bits <= 32 else 1e-9
    assert np.allclose(cupy.asnumpy(r_only)[..., :shape[-1], :], cupy.asnumpy(r),
                       atol=tol * float(np.abs(cupy.asnumpy(r)).max()))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,cond,route", [
    (np.float64, 1e5, "cholesky_qr2"), (np.float64, 1e12, "householder"),
    (np.float32, 10.0, "cholesky_qr2"), (np.float32, 1e5, "householder")])
def test_gpu_conditioning(rng, dtype, cond, route):
    """Accepted well below the check's limit (``cond(A)`` about ``sqrt(GRAM_TOL / eps)``),
    Householder QR well above it: accurate on both sides."""
    import cupy
    s = np.geomspace(1.0, 1.0 / cond, 256)
    a = with_singular_values(rng, 20000, 256, s, dtype)
    q, r = decomp.qr(cupy.asarray(a), mode="economic")
    assert last_run().details.get("qr") == route
    q, r = cupy.asnumpy(q), cupy.asnumpy(r)
    assert backward_ratio(a, q @ r, dtype) <= 30
    assert orthogonality_ratio(q, dtype) <= 30


@pytest.mark.gpu
def test_gpu_nonfinite_and_torch(rng):
    import cupy
    torch = pytest.importorskip("torch")
    a = random(rng, (8192, 128), np.float32)
    a[100, 5] = np.inf
    with pytest.raises(ValueError, match="infs or NaNs"):
        decomp.qr(cupy.asarray(a), mode="economic")
    a[100, 5] = 1.0
    q, r = decomp.qr(torch.from_numpy(a).cuda(), mode="economic")
    assert isinstance(q, torch.Tensor) and q.is_cuda and q.dtype == torch.float32
    _assert_qr(a, q.cpu().numpy(), r.cpu().numpy(), np.float32)
