"""The blocked Cholesky factorization (``decomp._kernels._blocked_potrf_cuda``: stacks of medium
matrices, two launches and a cuBLAS call per block column of 64 and one read-back per call)
on the CPU
emulation and on the device (``gpu``-marked): factors equal the per-matrix ones for both
triangles and every layout; failures in any block column name their slice and minor; NaN and
Inf raise; ``cho_factor`` keeps the input's other triangle."""

import numpy as np
import pytest

from gpulinalg import NotPositiveDefiniteError
from gpulinalg.decomp._kernels import _blocked_potrf_cuda, _policy_cuda
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.cholesky import _cholesky_host
from gpulinalg.decomp import cho_factor, cho_solve, cholesky

from tests.support.cusolver_emulator import CALLS, dev, medium_potrf_route, plain
from tests.decomp._kernels.test_decomp_fused import assert_cholesky_failures, spd



@pytest.fixture
def blocked(monkeypatch):
    """Every Cholesky stack above the fused kernel's orders takes the blocked route."""
    medium_potrf_route(monkeypatch, "blocked")


@pytest.fixture(params=_blocked_potrf_cuda.BLOCKS)
def width(request, monkeypatch):
    """The block columns' width of the blocked route, for one test."""
    monkeypatch.setattr(_blocked_potrf_cuda, "BLOCK", request.param)
    return request.param


def test_fits_and_table_rows(monkeypatch):
    monkeypatch.setattr(_policy_cuda, "enabled", lambda: True)  # a device the rows were timed on:
    # the route rows apply
    for dtype in (np.float32, np.float64, np.complex64):
        assert _blocked_potrf_cuda.fits(65, dtype) and _blocked_potrf_cuda.fits(1024, dtype)
    assert not _blocked_potrf_cuda.fits(256, np.complex128)  # L11 would not fit in 48 KiB
    with pytest.MonkeyPatch.context() as mp:
        medium_potrf_route(mp, "blocked")
        assert _cholesky_cuda.own_route(256, 64, np.dtype(np.complex128)) == "batched"
        assert _cholesky_cuda.own_route(256, 64, np.dtype(np.complex64)) == "blocked"
    assert not _blocked_potrf_cuda.fits(64, np.float64)  # the fused kernel's alone
    assert not _blocked_potrf_cuda.fits(_blocked_potrf_cuda.MAX_ORDER + 1, np.float64)
    # the table's rows (timed on the H200): orders 65 to 768, and 1024 from 8 matrices on
    for n, batch, want in ((65, 2, "fused"), (65, 133, "blocked"), (129, 2, "blocked"),
                           (256, 64, "blocked"), (768, 2, "blocked"),
                           (1024, 8, "blocked"), (1024, 4, "looped"), (1025, 64, "looped")):
        assert _cholesky_cuda.own_route(n, batch, np.dtype("float64")) == want, (n, batch)
    assert _cholesky_cuda.own_route(128, 512, np.dtype("float32")) == "blocked"
    assert _cholesky_cuda.own_route(128, 256, np.dtype("float32")) == "fused"
    assert _cholesky_cuda.own_route(128, 512, np.dtype("float64")) == "blocked"
    assert _cholesky_cuda.own_route(128, 64, np.dtype("float64")) == "fused"
    assert _cholesky_cuda.own_route(512, 200, np.dtype("complex128")) == "batched"


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("n", [65, 130, 200])
def test_emulated_blocked_cholesky_equals_host(emu, blocked, width, rng, lower, order, dtype,
                                               n):
    a = spd(rng, (3,), n, dtype)
    a = np.asfortranarray(a) if order == "F" else a
    steps = _blocked_potrf_cuda.columns(n, width)
    for finite in (True, False):
        CALLS.clear()
        got = plain(_cholesky_cuda.cholesky(dev(a), lower, False, True, np.dtype(dtype),
                                            finite))
        assert CALLS["small_potrf"] == steps and CALLS["get"] == 1
        assert CALLS["blocked_panel"] == CALLS["gemm_strided_batched"] == steps - 1
        assert CALLS["potrf_batched"] == CALLS["trsm_batched"] == 0
        assert CALLS["zero_triangle"] == 0  # zeroed by the panel steps on the way
        # all of a, in the working copy's own pass
        assert CALLS["flag_nonfinite"] == int(finite) and CALLS["flag_flat"] == 0
        ref = np.stack([_cholesky_host.cholesky(x, lower, False, True, np.dtype(dtype))
                        for x in a])
        tol = 1e-4 if np.finfo(np.dtype(dtype)).bits <= 32 else 1e-12
        assert np.allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_emulated_cho_factor_keeps_the_other_triangle(emu, blocked, width, rng, lower, order,
                                                      overwrite):
    a = spd(rng, (3,), 100, np.float64)
    a = np.asfortranarray(a) if order == "F" else a
    keep = a.copy()
    CALLS.clear()
    got = plain(_cholesky_cuda.cholesky(dev(a), lower, overwrite, False, np.dtype("f8"), True))
    assert CALLS["small_potrf"] == _blocked_potrf_cuda.columns(100, width)
    assert CALLS["potrf_batched"] == 0
    other = np.triu(np.ones((100, 100), bool), 1)
    other = other if lower else other.T
    assert np.array_equal(got[:, other], keep[:, other])  # the input's entries, as SciPy's
    assert np.array_equal(a, keep)  # a copy even with overwrite_a
    ref = np.linalg.cholesky(keep)
    assert np.allclose(np.where(~other, got, 0), ref if lower else ref.swapaxes(-1, -2))


@pytest.mark.parametrize("at", [10, 70, 150])
def test_emulated_blocked_cholesky_names_the_failing_slice(emu, blocked, width, rng, at):
    a = spd(rng, (3, 2), 200, np.float64)
    a[2, 1, at, at] = -100.0
    a[2, 0, 199, 199] = -100.0  # a later matrix failing in the last block column
    with pytest.raises(NotPositiveDefiniteError) as info:
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    assert info.value.batch_index == (2, 0) and info.value.minor == 200
    a[2, 0, 199, 199] = 1.0e3
    with pytest.raises(NotPositiveDefiniteError) as info:
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    assert info.value.batch_index == (2, 1) and info.value.minor == at + 1
    a[2, 1, at, at] = np.nan
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    with pytest.raises(ValueError, match=r"batch entry \(2, 1\)"):
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), False)


def test_width_by_stack():
    """Block columns of 32 for 512 or more float64 matrices up to order 128, else 64."""
    w = _blocked_potrf_cuda.width
    assert w(128, 512, np.float64) == w(65, 4096, np.float64) == 32
    assert w(128, 511, np.float64) == w(129, 512, np.float64) == 64
    assert w(128, 512, np.float32) == w(100, 1024, np.complex64) == 64


@pytest.mark.parametrize("batch, block", [(140, 64), (512, 32)])
def test_emulated_table_route_names_the_failing_minor(emu, rng, batch, block):
    """The table's route and width as shipped (fp64 order 120: blocked from 133 matrices, 32
    wide from 512): the failure read back names the minor of the failing block column."""
    assert _cholesky_cuda.own_route(120, batch, np.dtype("f8")) == "blocked"
    assert _blocked_potrf_cuda.width(120, batch, np.float64) == block
    a = spd(rng, (batch,), 120, np.float64)
    a[137, 70, 70] = -100.0
    CALLS.clear()
    with pytest.raises(NotPositiveDefiniteError) as info:
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    assert info.value.batch_index == (137,) and info.value.minor == 71
    assert CALLS["small_potrf"] == _blocked_potrf_cuda.columns(120, block)
    a[137, 70, 70] = 1.0e3
    got = _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    assert np.allclose(plain(got), np.linalg.cholesky(a))


def test_emulated_flag_slot_kept_and_reset(emu, blocked, rng):
    """The copy's NaN flag: one slot per thread and stream, kept across calls, put back by
    each call (a clean call after a flagged one passes, a flagged one after it raises)."""
    slot = _blocked_potrf_cuda.flag_slot(0)
    assert _blocked_potrf_cuda.flag_slot(0) is slot
    a = spd(rng, (4,), 100, np.float64)
    bad = a.copy()
    bad[3, 90, 7] = np.inf
    for x, fails in ((bad, True), (a, False), (bad, True), (a, False)):
        if fails:
            with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
                _cholesky_cuda.cholesky(dev(x), True, False, True, np.dtype("f8"), True)
        else:
            got = _cholesky_cuda.cholesky(dev(x), True, False, True, np.dtype("f8"), True)
            assert np.allclose(plain(got), np.linalg.cholesky(x))
    assert _blocked_potrf_cuda.flag_slot(0) is slot


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("clean", [True, False])
def test_emulated_kept_copy_of_a_repeated_layout(emu, blocked, rng, monkeypatch, lower,
                                                 clean):
    """A layout whose working copy is the transposing one keeps that copy's launches: a
    repeat makes no call of _work_copy and gives the same factor, flag and failure."""
    monkeypatch.setattr(_cholesky_cuda, "_PLANS", {})
    a = spd(rng, (5,), 100, np.float64)
    a = a if lower else np.asfortranarray(a.transpose(1, 2, 0)).transpose(2, 0, 1)

    def run(x, finite=True):
        return plain(_cholesky_cuda.cholesky(dev(x), lower, False, clean, np.dtype("f8"),
                                             finite))
    first = run(a)
    (plan,) = _cholesky_cuda._PLANS.values()
    assert plan.way == "blocked" and plan.copies is not None

    def no_work_copy(*args):
        raise AssertionError("the kept copy was not used")
    monkeypatch.setattr(_cholesky_cuda, "_work_copy", no_work_copy)
    CALLS.clear()
    again = run(a)
    assert np.array_equal(again, first) and CALLS["transpose_copy"] == 1
    ref = np.linalg.cholesky(a)
    ref = ref if lower else ref.swapaxes(-1, -2).conj()
    tri = np.tril if lower else np.triu
    assert np.allclose(tri(again), ref)
    bad = a.copy(order="K")  # the same layout
    bad[2, 10, 90] = np.nan
    bad[2, 90, 10] = np.nan
    if clean:  # cholesky's copy flags NaN itself; cho_factor's check is its own pass
        with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
            run(bad)
    bad = a.copy(order="K")  # the same layout
    bad[4, 80, 80] = -100.0
    with pytest.raises(NotPositiveDefiniteError) as info:
        run(bad, finite=False)
    assert info.value.batch_index == (4,) and info.value.minor == 81


def test_emulated_blocked_cholesky_in_place(emu, blocked, rng):
    a = np.asfortranarray(spd(rng, (4,), 80, np.float64).transpose(1, 2, 0)).transpose(2, 0, 1)
    keep = np.array(a)
    src = dev(a)
    got = _cholesky_cuda.cholesky(src, True, True, True, np.dtype("f8"), False)
    assert np.allclose(plain(got), np.linalg.cholesky(keep))


def test_first_failure_takes_the_earliest_column_of_the_first_matrix():
    rows = np.tile(_blocked_potrf_cuda._ROW, 4).reshape(4, 8)
    rows[0, 4] = 1                              # the input held NaN or Inf
    rows[1, 5] = (5 << 32) | 2                  # matrix 5, minor 2 of block column 1
    rows[3, 5] = (5 << 32) | 1                  # its leftovers fail again later
    rows[2, 6] = (9 << 32) | ((1 << 30) + 4)    # matrix 9, a NaN pivot in block column 2
    assert _blocked_potrf_cuda.first_failure(rows.ravel(), 256, 64) == (5, 66, True)
    assert _blocked_potrf_cuda.first_failure(rows.ravel(), 64, 64) == (None, 0, True)
    assert _blocked_potrf_cuda.first_failure(rows.ravel(), 128, 32) == (5, 34, True)
    rows[1, 5] = rows[3, 5] = _blocked_potrf_cuda._NONE
    assert _blocked_potrf_cuda.first_failure(rows.ravel(), 256, 64) == (9, (1 << 30) + 132, True)


# -- the device ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("n", [65, 100, 128, 129, 256, 300, 512])
def test_gpu_blocked_cholesky_equals_numpy(xp_gpu, blocked, width, rng, dtype, n):
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
            b = rng.standard_normal((3, n, 2)).astype(dtype)
            x = cp.asnumpy(cho_solve((cp.asarray(got), lower), cp.asarray(b)))
            assert np.abs(np.linalg.solve(a_h, b) - x).max() <= 1e3 * n * eps * np.abs(x).max()
    c, low = cho_factor(cp.asarray(a_h), lower=True)  # the upper triangle: a's entries
    upper = np.triu(np.ones((n, n), bool), 1)
    assert np.array_equal(cp.asnumpy(c)[:, upper], a_h[:, upper])
    assert np.abs(np.tril(cp.asnumpy(c)) - ref).max() <= 50 * n * eps * np.abs(ref).max()


@pytest.mark.gpu
@pytest.mark.parametrize("at", [10, 150])
def test_gpu_blocked_cholesky_failures(xp_gpu, blocked, width, rng, at):
    cp = xp_gpu
    a = spd(rng, (3, 2), 200, np.float64)
    assert_cholesky_failures(cp, a, at)
    a[2, 1, at, at] = 1.0
    a[0, 0, 3, 190] = np.inf  # the triangle the factorization does not read: SciPy's check
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        cholesky(cp.asarray(a), lower=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_blocked_cholesky_replayed_in_a_loop(xp_gpu, rng, dtype):
    """A loop's calls land where the last ones did (CuPy's pool): from the second call at a
    place on, the chain is a replayed graph; every call still factors its own input, and a
    failure after the capture names its matrix."""
    from gpulinalg._runtime import graphs
    cp = xp_gpu
    n, eps = 256, float(np.finfo(dtype).eps)
    graphs.clear()
    for i in range(6):
        a_h = spd(rng, (16,), n, dtype)
        ref = np.linalg.cholesky(a_h.astype(np.float64))
        for lower in (True, False):
            got = cp.asnumpy(cholesky(cp.asarray(a_h), lower=lower))
            want = ref if lower else ref.swapaxes(-1, -2)
            assert np.abs(got - want).max() <= 50 * n * eps * np.abs(ref).max(), (i, lower)
        del got
    assert any(e.graph for e in graphs._local.entries.values()
               if isinstance(e, graphs.Entry)), "no chain was replayed"
    a_h[11, 100, 100] = -1e3
    for _ in range(3):
        with pytest.raises(NotPositiveDefiniteError) as info:
            cholesky(cp.asarray(a_h), lower=True)
        assert info.value.batch_index == (11,) and info.value.minor == 101


@pytest.mark.gpu
@pytest.mark.parametrize("n, batch, dtype, way", [
    (100, 64, np.float64, "fused"), (128, 400, np.float64, "blocked"),
    (100, 140, np.float64, "blocked"), (128, 400, np.float32, "blocked"),
    (100, 600, np.float64, "blocked"),
    (256, 16, np.float32, "blocked"), (1024, 8, np.complex64, "blocked"),
    (256, 16, np.complex128, "batched")])
def test_gpu_default_routes_of_medium_stacks(xp_gpu, rng, n, batch, dtype, way):
    """The table as shipped (no route forced): each medium route factors its stacks."""
    cp = xp_gpu
    assert _cholesky_cuda.own_route(n, batch, np.dtype(dtype)) == way
    a_h = spd(rng, (batch,), n, dtype)
    got = cp.asnumpy(cholesky(cp.asarray(a_h), lower=True))
    ref = np.linalg.cholesky(a_h.astype(np.complex128 if np.dtype(dtype).kind == "c"
                                        else np.float64))
    eps = float(np.finfo(dtype).eps)
    assert np.abs(got - ref).max() <= 50 * n * eps * np.abs(ref).max()
    k = n // 2 + 5  # a minor past the first block column of 32
    a_h[batch - 3, k, k] = -100.0
    with pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(cp.asarray(a_h), lower=True)
    assert info.value.batch_index == (batch - 3,) and info.value.minor == k + 1
