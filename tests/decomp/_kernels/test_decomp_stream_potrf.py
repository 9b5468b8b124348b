"""The streamed Cholesky factorization (``decomp._kernels._stream_potrf_cuda``: stacks of medium
matrices, one launch and one read-back per call) on the CPU emulation and on the device
(``gpu``-marked): factors equal the per-matrix ones for both triangles, every layout and the
other triangle's two contents; failures name their slice and minor; NaN and Inf raise."""

import numpy as np
import pytest

from gpulinalg import NotPositiveDefiniteError
from gpulinalg.decomp._gpu import _batched_plan
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.cholesky import _cholesky_host
from gpulinalg.decomp._kernels import _stream_potrf_cuda
from gpulinalg.decomp import cho_factor, cho_solve, cholesky

from tests.support.cusolver_emulator import CALLS, dev, medium_potrf_route, plain
from tests.decomp._kernels.test_decomp_fused import assert_cholesky_failures, spd



@pytest.fixture
def streamed(monkeypatch):
    """Every Cholesky stack above the fused kernel's orders takes the streamed kernel."""
    medium_potrf_route(monkeypatch, "stream")


def test_fits_real_and_complex64_up_to_its_order():
    assert _stream_potrf_cuda.fits(200, np.float64) and _stream_potrf_cuda.fits(1024, "f")
    assert _stream_potrf_cuda.fits(300, np.complex64)
    assert not _stream_potrf_cuda.fits(300, np.complex128)  # its tiles: static shared memory
    assert not _stream_potrf_cuda.fits(_stream_potrf_cuda.MAX_ORDER + 1, np.float64)
    # no row of the table takes it until it has been timed on a GPU
    assert _batched_plan.route("potrf", 200, 64, stream=True, dtype="float64") == "batched"
    assert "stream" not in {r[2] for r in _batched_plan.TABLE["potrf"]}


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_emulated_stream_cholesky_equals_host(emu, streamed, rng, lower, clean, order, dtype):
    a = spd(rng, (3,), 70, dtype)
    a = np.asfortranarray(a) if order == "F" else a
    for finite in (True, False):
        CALLS.clear()
        got = plain(_cholesky_cuda.cholesky(dev(a), lower, False, clean, np.dtype(dtype),
                                            finite))
        assert CALLS["stream_potrf"] == 1 and CALLS["get"] == 1
        assert CALLS["flag_flat"] == int(finite)  # all of a, before the launch
        ref = np.stack([_cholesky_host.cholesky(x, lower, False, clean, np.dtype(dtype))
                        for x in a])
        tol = 1e-4 if np.finfo(np.dtype(dtype)).bits <= 32 else 1e-12
        assert np.allclose(got, ref, rtol=tol, atol=tol)


def test_emulated_stream_cholesky_names_the_failing_slice(emu, streamed, rng):
    a = spd(rng, (3, 2), 90, np.float64)
    a[2, 1, 40, 40] = -100.0
    with pytest.raises(NotPositiveDefiniteError) as info:
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    assert info.value.batch_index == (2, 1) and info.value.minor == 41
    a[2, 1, 40, 40] = np.nan
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    with pytest.raises(ValueError, match=r"batch entry \(2, 1\)"):
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), False)


def test_emulated_stream_cholesky_never_factors_in_place(emu, streamed, rng):
    a = spd(rng, (4,), 80, np.float64)
    keep = a.copy()
    got = plain(_cholesky_cuda.cholesky(dev(a), True, True, True, np.dtype("f8"), False))
    assert np.allclose(got, np.linalg.cholesky(keep)) and np.array_equal(a, keep)


# -- the device ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("n", [65, 100, 129, 256, 300, 512])
def test_gpu_stream_cholesky_equals_numpy(xp_gpu, streamed, rng, dtype, n):
    cp = xp_gpu
    a_h = spd(rng, (3,), n, dtype)
    ref = np.linalg.cholesky(a_h.astype(np.complex128 if np.dtype(dtype).kind == "c"
                                        else np.float64))
    eps = float(np.finfo(dtype).eps)
    for order in ("C", "F"):
        a = cp.asarray(a_h, order=order)
        for lower in (True, False):
            got = cp.asnumpy(cholesky(a, lower=lower))
            want = ref if lower else np.conj(ref.swapaxes(-1, -2))
            assert np.abs(got - want).max() <= 50 * n * eps * np.abs(ref).max(), (order, lower)
            c, low = cho_factor(a, lower=lower)
            other = np.triu(np.ones((n, n), bool), 1) if lower else \
                np.tril(np.ones((n, n), bool), -1)
            assert np.array_equal(cp.asnumpy(c)[:, other], a_h[:, other])  # a's entries kept
            b = rng.standard_normal((3, n, 2)).astype(dtype)
            x = cp.asnumpy(cho_solve((c, low), cp.asarray(b)))
            assert np.abs(np.linalg.solve(a_h, b) - x).max() <= 1e3 * n * eps * np.abs(x).max()


@pytest.mark.gpu
def test_gpu_stream_cholesky_failures(xp_gpu, streamed, rng):
    cp = xp_gpu
    a = spd(rng, (3, 2), 200, np.float64)
    assert_cholesky_failures(cp, a, 150)
    a[2, 1, 150, 150] = 1.0
    a[0, 0, 3, 190] = np.inf  # the triangle potrf does not read: SciPy's check refuses it
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        cholesky(cp.asarray(a), lower=True)
