"""The fused small-stack QR (``decomp._kernels._fused_qr_cuda``, route ``fused`` of ``geqrf``): on
the CPU emulation (the route taken, layouts, modes, results equal LAPACK's per matrix) and on the
device (``gpu``-marked): per matrix against NumPy/SciPy, Q orthonormal, R upper triangular,
``Q R = A``, R's signs as LAPACK's and as the library route's, every mode, NaN input as on the
other routes (``check_finite`` raises; without it, NaN stays in its own slice)."""

import math

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg.decomp._gpu import _batched_plan
from gpulinalg.decomp.qr import _qr_host
from gpulinalg.decomp._kernels import _fused_qr_cuda
from gpulinalg.decomp.qr import _qr_cuda
from gpulinalg.decomp import qr

from tests.support.cusolver_emulator import CALLS, dev, plain
from tests.support.decomp_dense_ref import layout, random as stack

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
MODES = ["full", "economic", "r", "raw"]



def tol(dtype):
    return 1e-4 if np.finfo(np.dtype(dtype)).bits <= 32 else 1e-10


def parts(out, mode):
    """The arrays of a result, in order (raw: h, tau, R)."""
    return [out[0][0], out[0][1], out[1]] if mode == "raw" else list(out)


def test_route_rows():
    assert _batched_plan.route("geqrf", 64, 2, fused=True, dtype="float32") == "fused"
    assert _batched_plan.route("geqrf", 65, 4096, fused=False) == "batched"
    assert _batched_plan.route("geqrf", 16, 1) == "looped"  # one matrix: the library
    assert _fused_qr_cuda.fits(64, np.complex128) and not _fused_qr_cuda.fits(65, np.float32)
    assert not _fused_qr_cuda.fits(8, np.float16)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 9, 4), (3, 4, 9), (2, 2, 6, 6), (2, 1, 1), (2, 64, 64),
                                   (2, 64, 5), (2, 3, 64)])
@pytest.mark.parametrize("mode", MODES)
def test_emulated_fused_qr_equals_lapack(emu, rng, dtype, shape, mode):
    a = stack(rng, shape, dtype)
    CALLS.clear()
    out = _qr_cuda.qr(dev(a), mode, False, None, False, np.dtype(dtype))
    assert CALLS["small_qr"] == 1 and CALLS["geqrf_batched"] == 0 and CALLS["get"] == 0
    for idx in np.ndindex(shape[:-2]):
        ref = _qr_host.qr(a[idx], mode, False, None, False, np.dtype(dtype))
        for got, want in zip(parts(out, mode), parts(ref, mode)):
            got = plain(got)[idx]
            assert got.shape == want.shape and got.dtype == want.dtype
            assert np.abs(got - want).max() <= tol(dtype) * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("order", ["C", "F", "strided"])
def test_emulated_fused_qr_layouts_and_input_kept(emu, rng, order):
    a = stack(rng, (4, 7, 5), np.float64)
    x = layout(a, order, dev)
    before = plain(x).copy()
    q, r = _qr_cuda.qr(x, "economic", False, None, False, np.dtype("f8"))
    assert np.array_equal(plain(x), before)
    assert np.allclose(plain(q) @ plain(r), a)


def test_emulated_fused_qr_promotes_the_input(emu, rng):
    a = rng.integers(-5, 5, (3, 6, 4))
    q, r = _qr_cuda.qr(dev(a), "economic", False, None, False, np.dtype("f8"))
    assert plain(q).dtype == np.float64 and np.allclose(plain(q) @ plain(r), a)


def test_emulated_fused_qr_nan_stays_in_its_slice(emu, rng):
    a = stack(rng, (3, 6, 6), np.float64)
    a[1, 2, 3] = np.nan
    q, r = (plain(x) for x in _qr_cuda.qr(dev(a), "full", False, None, False, np.dtype("f8")))
    assert not np.isfinite(r[1]).all()
    for i in (0, 2):
        assert np.allclose(q[i] @ r[i], a[i])


# -- the device ---------------------------------------------------------------------------------

def _check(q, r, a, mode, dtype):
    """Q orthonormal, R upper triangular, Q R = A (LAPACK-style ratios), per matrix."""
    eps = float(np.finfo(np.dtype(dtype)).eps)
    m, n = a.shape[-2:]
    for idx in np.ndindex(a.shape[:-2]):
        qi, ri, ai = q[idx], r[idx], a[idx].astype(np.complex128)
        assert np.array_equal(np.tril(ri, -1), np.zeros_like(ri))
        ortho = np.linalg.norm(qi.conj().T @ qi - np.eye(qi.shape[1])) / (max(m, 1) * eps)
        back = np.linalg.norm(ai - qi @ ri) / (max(m, n) * max(np.linalg.norm(ai), 1e-300) * eps)
        assert ortho <= 30 and back <= 30, (idx, ortho, back)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, n", [(1, 1), (5, 3), (3, 5), (8, 8), (16, 16), (33, 20), (20, 33),
                                  (64, 64), (64, 7), (7, 64), (32, 32)])
@pytest.mark.parametrize("mode", MODES)
def test_gpu_fused_qr_against_lapack(xp_gpu, rng, dtype, m, n, mode):
    a = stack(rng, (3, m, n), dtype)
    assert _batched_plan.route("geqrf", max(m, n), 3, fused=_fused_qr_cuda.fits(max(m, n), dtype),
                               dtype=dtype) == "fused"
    with gpulinalg.config(backend="gpu"):
        out = qr(xp_gpu.asarray(a), mode=mode)
    got = [xp_gpu.asnumpy(x) for x in parts(out, mode)]
    for i in range(3):
        ref = parts(scipy.linalg.qr(a[i], mode=mode), mode)
        for g, w in zip(got, ref):
            assert g[i].shape == w.shape and g.dtype == np.dtype(dtype)
            scale = 100 * max(m, n) * float(np.finfo(np.dtype(dtype)).eps)
            assert np.abs(g[i] - w).max() <= scale * max(1.0, np.abs(w).max())  # LAPACK's signs
    if mode in ("full", "economic"):
        _check(got[0], got[1], a, mode, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["C", "F", "strided"])
@pytest.mark.parametrize("shape", [(1000, 16, 16), (2, 3, 64, 64), (300, 40, 12)])
def test_gpu_fused_qr_equals_library_route(xp_gpu, monkeypatch, rng, dtype, order, shape):
    a = stack(rng, shape, dtype)
    x = layout(a, order, xp_gpu.asarray)
    with gpulinalg.config(backend="gpu"):
        q, r = qr(x, mode="economic")
        monkeypatch.setitem(_batched_plan.TABLE, "geqrf", ((math.inf, 2, "batched"),))
        q1, r1 = qr(x, mode="economic")
    q, r, q1, r1 = (xp_gpu.asnumpy(v) for v in (q, r, q1, r1))
    eps = float(np.finfo(np.dtype(dtype)).eps)
    assert np.abs(r - r1).max() <= 100 * shape[-1] * eps * np.abs(r1).max()  # same signs
    assert np.abs(q - q1).max() <= 100 * shape[-1] * eps * 10
    assert np.array_equal(xp_gpu.asnumpy(x), a)  # input kept
    _check(q, r, a, "economic", dtype)


@pytest.mark.gpu
def test_gpu_fused_qr_nan_as_other_routes(xp_gpu, monkeypatch, rng):
    a = stack(rng, (4, 10, 6), np.float64)
    a[2, 5, 1] = np.nan
    x = xp_gpu.asarray(a)
    with gpulinalg.config(backend="gpu"):
        with pytest.raises(ValueError, match="infs or NaNs"):
            qr(x)
        q, r = (xp_gpu.asnumpy(v) for v in qr(x, check_finite=False))
        monkeypatch.setitem(_batched_plan.TABLE, "geqrf", ((math.inf, 2, "batched"),))
        q1, r1 = (xp_gpu.asnumpy(v) for v in qr(x, check_finite=False))
    assert not np.isfinite(r[2]).all() and not np.isfinite(r1[2]).all()
    for i in (0, 1, 3):
        assert np.allclose(q[i] @ r[i], a[i]) and np.allclose(r[i], r1[i])


@pytest.mark.gpu
def test_gpu_fused_qr_records_gpu_and_torch_in_out(xp_gpu, rng):
    torch = pytest.importorskip("torch")
    a = stack(rng, (64, 12, 12), np.float32)
    t = torch.as_tensor(a, device="cuda")
    q, r = qr(t, mode="economic")
    assert isinstance(q, torch.Tensor) and q.device.type == "cuda"
    assert gpulinalg.last_run().backend == "gpu"
    assert np.allclose((q @ r).cpu().numpy(), a, atol=1e-4)
