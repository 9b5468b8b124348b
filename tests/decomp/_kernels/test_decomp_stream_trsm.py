"""The streamed triangular solve (``decomp._kernels._stream_trsm_cuda``: stacks above order 64 with
few right-hand sides, one launch and one read-back per call) on the CPU emulation and on the device
(``gpu``-marked): results equal the per-matrix ones for every layout, operation and triangle,
``cho_solve``'s two substitutions in one launch, failures name their slice, and the
conditioning rule's bound is the host's."""

import math
import warnings

import numpy as np
import pytest

import gpulinalg
from gpulinalg import IllConditionedWarning, SingularMatrixError
from gpulinalg.decomp._gpu import _batched_plan
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.cholesky import _cholesky_host
from gpulinalg.decomp.triangular import _triangular_host
from gpulinalg.decomp._kernels import _stream_trsm_cuda
from gpulinalg.decomp.triangular import _triangular_cuda
from gpulinalg.decomp import cho_factor, cho_solve, solve_triangular

from tests.support.cusolver_emulator import CALLS, dev, plain, without_fused



def tri(rng, shape, dtype, lower=True):
    n = shape[-1]
    a = (0.5 * rng.standard_normal(shape) / np.sqrt(n) + 2 * np.eye(n)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        a = a + (0.3j * rng.standard_normal(shape) / np.sqrt(n)).astype(dtype)
    return np.tril(a) if lower else np.triu(a)


def spd(rng, batch, n, dtype):
    x = rng.standard_normal(batch + (n, n))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(batch + (n, n))
    return (x @ np.conj(x.swapaxes(-1, -2)) / n + np.eye(n)).astype(dtype)


def reference(a, b, trans, lower, unit):
    n = a.shape[-1]
    m = np.tril(a) if lower else np.triu(a)
    if unit:
        m = m.copy()
        m[..., np.arange(n), np.arange(n)] = 1
    op = m if trans == 0 else (m.swapaxes(-1, -2) if trans == 1 else np.conj(m.swapaxes(-1, -2)))
    bb = b if b.ndim > 1 else b[:, None]
    bb = np.broadcast_to(bb, np.broadcast_shapes(op.shape[:-2], bb.shape[:-2]) + bb.shape[-2:])
    x = np.linalg.solve(np.broadcast_to(op, bb.shape[:-2] + op.shape[-2:]), bb)
    return x[..., 0] if b.ndim == 1 else x


# -- the table and the plan ---------------------------------------------------------------------

def test_group_sizes_fill_the_device_and_shared_memory():
    assert _stream_trsm_cuda.group(512, 4, 200, "float64") == 3  # 400 blocks
    assert _stream_trsm_cuda.group(2048, 4, 8, "float64") == 1  # 32 blocks: as many as it gets
    assert _stream_trsm_cuda.group(256, 16, 4096, "complex128") == 4
    big = _stream_trsm_cuda.MAX_SHARED // 16  # one column of complex128 fills shared memory
    assert _stream_trsm_cuda.group(big, 4, 4096, "complex128") == 1
    assert _stream_trsm_cuda.fits(big, 1, "complex128")
    assert not _stream_trsm_cuda.fits(big + 1, 1, "complex128")
    assert not _stream_trsm_cuda.fits(100, _stream_trsm_cuda.MAX_RHS + 1, "float64")
    assert not _stream_trsm_cuda.fits(100, 1, "float16")


def test_route_takes_the_stream_only_where_it_fits():
    stream = (65, 100, 2, "stream")  # (n, batch, ...) for rows of a forced table
    with pytest.MonkeyPatch.context() as m:
        m.setitem(_batched_plan.TABLE, "trsm", ((64, 2, "fused"), (4096, 2, "stream"),
                                                (math.inf, 1, "batched")))
        assert _batched_plan.route("trsm", 65, 100, stream=True) == "stream"
        assert _batched_plan.route("trsm", 65, 100, stream=False) == "batched"
        assert _batched_plan.route("trsm", 5000, 100, stream=True) == "batched"
        assert _batched_plan.route("trsm", 65, 1, stream=True) == "looped"  # one matrix
    assert stream[3] in {r[2] for r in _batched_plan.TABLE["trsm"]}


# -- the CPU emulation: the engine's use of the kernel -------------------------------------------

def test_emulated_small_shared_memory_devices_keep_the_library_route(emu, rng, monkeypatch):
    """A device whose blocks may take less shared memory (laptop GPUs allow 99 KiB in all,
    older ones 64) streams only the orders whose solution column fits beside the static part;
    larger ones go to trsmBatched instead of failing to launch. Here 1 KiB is left: 128
    float64 entries."""
    from tests.support.cusolver_emulator import DEVICE_ATTRIBUTES
    monkeypatch.setitem(DEVICE_ATTRIBUTES, "MaxSharedMemoryPerBlockOptin",
                        _stream_trsm_cuda.STATIC_SHARED + 1024)
    from gpulinalg._runtime import device
    monkeypatch.setattr(device, "_attributes", {})  # attributes are read once per device
    _triangular_cuda._PLANS.clear()
    limit = _stream_trsm_cuda.shared_limit()
    assert limit == 1024
    for n, streamed in ((limit // 8, 1), (limit // 8 + 1, 0)):
        a = tri(rng, (2, n, n), np.float64)
        b = rng.standard_normal((2, n, 1))
        CALLS.clear()
        got = plain(_triangular_cuda.solve_triangular(dev(a), dev(b), 0, True, False, False,
                                                      np.dtype("f8"), True))
        assert (CALLS["stream_trsm"], CALLS["trsm_batched"]) == (streamed, 1 - streamed)
        assert np.allclose(got, np.linalg.solve(a, b), rtol=1e-9, atol=1e-9)
    _triangular_cuda._PLANS.clear()  # plans made under this device's limit


@pytest.mark.parametrize("a_shape, b_shape", [((3, 70, 70), (3, 70, 2)),
                                              ((2, 1, 97, 97), (3, 97, 1)),
                                              ((4, 66, 66), (66, 6)), ((2, 80, 80), (80,))])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_emulated_stream_solve_triangular_equals_host(emu, rng, a_shape, b_shape, trans, lower,
                                                      unit, dtype):
    a = tri(rng, a_shape, dtype, lower)
    b = rng.standard_normal(b_shape).astype(dtype)
    CALLS.clear()
    got = plain(_triangular_cuda.solve_triangular(dev(a), dev(b), trans, lower, unit, False,
                                                  np.dtype(dtype), True, True))
    assert CALLS["stream_trsm"] == 1 and CALLS["get"] == 1 and CALLS["trsm_batched"] == 0
    ref = _triangular_host.solve_triangular(a, b, trans, lower, unit, False, np.dtype(dtype))
    assert got.shape == np.shape(ref) and np.allclose(got, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
def test_emulated_stream_cho_solve_is_one_launch(emu, rng, lower, order):
    a = spd(rng, (5,), 90, np.float64)
    c = np.stack([_cholesky_host.cholesky(x, lower, False, False, np.dtype("f8")) for x in a])
    c = np.asfortranarray(c) if order == "F" else c
    b = rng.standard_normal((5, 90, 3))
    CALLS.clear()
    got = plain(_cholesky_cuda.cho_solve(dev(c), lower, dev(b), False, np.dtype("f8"), True,
                                         True))
    assert CALLS["stream_trsm"] == 1 and CALLS["get"] == 1 and CALLS["trsm_batched"] == 0
    assert CALLS["flag_flat"] == 1  # check_finite: all of c, by the flat kernel, before
    assert np.allclose(got, np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)
    CALLS.clear()  # nothing to check: no read-back at all
    _cholesky_cuda.cho_solve(dev(c), lower, dev(b), False, np.dtype("f8"))
    assert CALLS["stream_trsm"] == 1 and CALLS["get"] == 0 and CALLS["flag_nonfinite"] == 0


def test_emulated_stream_failures_name_the_slice(emu, rng):
    t = tri(rng, (3, 2, 70, 70), np.float64)
    b = rng.standard_normal((3, 2, 70, 2))
    t[2, 1, 33, 33] = 0
    for check in (True, False):
        with pytest.raises(SingularMatrixError, match=r"batch entry \(2, 1\).*entry 33"):
            _triangular_cuda.solve_triangular(dev(t), dev(b), 0, True, False, False,
                                              np.dtype("f8"), check)
    t[2, 1, 33, 33] = 1.0
    t[0, 1, 3, 50] = np.nan  # the other triangle: SciPy's check still refuses it
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        _triangular_cuda.solve_triangular(dev(t), dev(b), 0, True, False, False,
                                          np.dtype("f8"), True, True)
    t[0, 1, 3, 50] = 0.0
    t[1, 0, 40, 40] = 1e-30
    with pytest.warns(IllConditionedWarning):
        _triangular_cuda.solve_triangular(dev(t), dev(b), 0, True, False, False,
                                          np.dtype("f8"), True)


# -- the device ---------------------------------------------------------------------------------

@pytest.fixture
def streamed(monkeypatch):
    """Every stack of the triangular solves above order 64 takes the streamed kernel."""
    monkeypatch.setitem(_batched_plan.TABLE, "trsm", ((64, 2, "fused"), (math.inf, 2, "stream"),
                                                      (math.inf, 1, "looped")))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_gpu_stream_kernel_equals_numpy(xp_gpu, streamed, rng, dtype):
    """Orders around the panel size and far above it, C and column-major matrices (the two
    ways of reading a panel), vector and matrix right-hand sides (groups of one to four
    columns), broadcasts, op and triangle, unit diagonal."""
    cp = xp_gpu
    eps = float(np.finfo(dtype).eps)
    for n in (65, 96, 100, 257, 600):
        a_h = tri(rng, (3, n, n), dtype, lower=True) + tri(rng, (3, n, n), dtype, lower=False)
        for order in ("C", "F"):
            a_d = cp.asarray(a_h, order=order)
            for b_shape in ((3, n, 1), (3, n, 5), (n, 3), (n,), (3, n, 16)):
                assert_solves(cp, a_d, a_h, rng.standard_normal(b_shape).astype(dtype),
                              1e3 * n * eps, (n, order, b_shape))


def assert_solves(cp, a_d, a_h, b_h, tol, label):
    """``solve_triangular`` of ``a_d`` (``a_h`` on the host) and ``b_h`` on the GPU equals
    NumPy's within ``tol`` relative to the result, for both triangles, each ``trans`` and a
    unit diagonal."""
    for trans, lower, unit in ((0, True, False), (1, True, False), (2, False, False),
                               (0, False, True), (2, True, True)):
        x = cp.asnumpy(solve_triangular(a_d, cp.asarray(b_h), trans=trans, lower=lower,
                                        unit_diagonal=unit))
        assert gpulinalg.last_run().backend == "gpu"
        ref = reference(a_h, b_h, trans, lower, unit)
        assert x.shape == ref.shape
        assert np.abs(x - ref).max() <= tol * np.abs(ref).max(), (*label, trans, lower, unit)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("n", [65, 130, 512, 1100])
def test_gpu_stream_cho_solve_equals_numpy(xp_gpu, streamed, rng, dtype, n):
    assert_cho_solve(xp_gpu, spd(rng, (3,), n, dtype),
                     rng.standard_normal((3, n, 4)).astype(dtype))


def assert_cho_solve(cp, spd_h, b_h):
    """``cho_solve`` with both factors of ``spd_h``, C-ordered and column-major, equals
    NumPy's solve in double precision within ``1e4 n eps`` of ``b_h``'s dtype."""
    dtype, n = b_h.dtype, spd_h.shape[-1]
    ref = np.linalg.solve(spd_h.astype(np.complex128 if dtype.kind == "c" else np.float64), b_h)
    eps = float(np.finfo(dtype).eps)
    for lower in (True, False):
        cf = cho_factor(cp.asarray(spd_h), lower=lower)
        for c in (cf[0], cp.asfortranarray(cf[0])):
            x = cp.asnumpy(cho_solve((c, lower), cp.asarray(b_h)))
            err = np.abs(x - ref).max() / np.abs(ref).max()
            assert err <= 1e4 * n * eps, (lower, err)


@pytest.mark.gpu
def test_gpu_stream_failures_name_the_slice(xp_gpu, streamed, rng):
    cp = xp_gpu
    t = tri(rng, (4, 300, 300), np.float64)
    b = cp.ones((4, 300, 2))
    t[3, 129, 129] = 0
    with pytest.raises(SingularMatrixError, match=r"batch entry \(3,\).*entry 129"):
        solve_triangular(cp.asarray(t), b, lower=True)
    t[3, 129, 129] = 2.0
    t[2, 3, 250] = np.nan  # above the diagonal: not read by the solve
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        solve_triangular(cp.asarray(t), b, lower=True)
    assert np.isfinite(cp.asnumpy(solve_triangular(cp.asarray(t), b, lower=True,
                                                   check_finite=False))).all()
    t[2, 3, 250] = 0.0
    bb = cp.ones((4, 300, 2))
    bb[1, 5, 1] = cp.inf
    with pytest.raises(ValueError, match="b must not contain infs or NaNs"):
        solve_triangular(cp.asarray(t), bb, lower=True)
    t[1, 200, 200] = 1e-30
    with pytest.warns(IllConditionedWarning):
        solve_triangular(cp.asarray(t), b, lower=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("op", ["solve_triangular", "cho_solve"])
def test_gpu_stream_bound_is_the_host_judges(xp_gpu, monkeypatch, rng, dtype, op):
    cp = xp_gpu
    t = (np.tril(rng.standard_normal((3, 2, 200, 200))) / 15 + 3 * np.eye(200)).astype(dtype)
    t[1, 1, 90, 90] = 0.05  # the bound comes from this pivot; fp32 keeps some digits
    b = cp.asarray(rng.standard_normal((3, 2, 200, 4)).astype(dtype))
    t = cp.asarray(t)
    got = []
    for own in (True, False):
        with monkeypatch.context() as m:
            if own:
                m.setitem(_batched_plan.TABLE, "trsm", ((math.inf, 2, "stream"),))
            else:
                without_fused(m)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                x = cho_solve((t, True), b) if op == "cho_solve" else \
                    solve_triangular(t, b, lower=True)
            got.append((gpulinalg.last_run().details["rcond_bound"], cp.asnumpy(x)))
    assert np.isclose(got[0][0], got[1][0], rtol=1e-6 if dtype == np.float64 else 1e-2)
    assert np.allclose(got[0][1], got[1][1], rtol=1e-2 if dtype != np.float64 else 1e-9,
                       atol=1e-3 if dtype != np.float64 else 1e-9)


def test_emulated_plans_are_kept_per_device(emu, rng, monkeypatch):
    """A plan holds kernels compiled for one device: the same layout on another device of the
    process gets its own plan (the solve's and the fused Cholesky's)."""
    import types
    from tests.support.cusolver_emulator import FakeDev

    class OnDevice1(FakeDev):
        @property
        def data(self):
            return types.SimpleNamespace(ptr=self.ctypes.data, device_id=1)
    made = []
    monkeypatch.setattr(_triangular_cuda, "_PLANS", {})
    monkeypatch.setattr(_cholesky_cuda, "_PLANS", {})
    for mod, name in ((_triangular_cuda, "_solve_plan"), (_cholesky_cuda, "_factor_plan")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *args, real=real: made.append(1) or real(*args))
    a = tri(rng, (3, 70, 70), np.float64)
    s = np.stack([x @ x.T + np.eye(8) for x in rng.standard_normal((3, 8, 8))])
    for arr in (dev, dev, lambda x: np.array(x, order="K").view(OnDevice1)):
        _triangular_cuda.solve_triangular(arr(a), arr(np.ones((3, 70, 1))), 0, True, False,
                                          False, np.dtype("f8"), True)
        _cholesky_cuda.cholesky(arr(s), True, False, True, np.dtype("f8"), True)
    assert len(made) == 4  # device 0: made once and kept; device 1: made again
