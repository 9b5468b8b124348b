"""The fused small-stack route of ``decomp._gpu._batched_plan`` (``decomp._kernels._fused_cuda``:
one launch and one read-back per call) on the CPU emulation, and on the device (``gpu``-marked):
results equal the per-matrix ones, a failing slice is named, NaN/Inf and singular inputs raise, the
conditioning rule warns as on the other routes."""

import warnings

import numpy as np
import pytest

import gpulinalg
from gpulinalg import IllConditionedWarning, NotPositiveDefiniteError, SingularMatrixError
from gpulinalg.decomp._gpu import _batched_plan
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.cholesky import _cholesky_host
from gpulinalg.decomp.triangular import _triangular_host
from gpulinalg.decomp.triangular import _triangular_cuda
from gpulinalg.decomp import cho_factor, cho_solve, cholesky, solve_triangular

from tests.support.cusolver_emulator import CALLS, dev, plain
from tests.support.decomp_dense_ref import layout



def spd(rng, batch, n, dtype):
    x = rng.standard_normal(batch + (n, n))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(batch + (n, n))
    return (x @ np.conj(x.swapaxes(-1, -2)) / n + np.eye(n)).astype(dtype)


def tol(dtype):
    return 2e-4 if np.finfo(np.dtype(dtype)).bits <= 32 or np.dtype(dtype) == np.complex64 \
        else 1e-10


@pytest.mark.parametrize("n", [1, 5, 32])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("order", ["C", "F", "strided"])
def test_emulated_fused_cholesky_equals_slices(emu, rng, n, lower, clean, dtype, order):
    a = spd(rng, (2, 3), n, dtype)
    CALLS.clear()
    x = layout(a, order, dev)
    got = plain(_cholesky_cuda.cholesky(x, lower, False, clean, np.dtype(dtype), True))
    assert CALLS["small_potrf"] == 1 and CALLS["get"] == 1 and CALLS["potrf_batched"] == 0
    tri = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    for idx in np.ndindex(2, 3):
        ref = _cholesky_host.cholesky(a[idx], lower, False, True, np.dtype(dtype))
        assert np.allclose(np.where(tri, got[idx], 0), ref, rtol=tol(dtype), atol=tol(dtype))
        assert np.array_equal(got[idx][~tri], 0 * a[idx][~tri] if clean else a[idx][~tri])


def test_emulated_fused_cholesky_in_place(emu, rng):
    a = dev(spd(rng, (4,), 12, np.float64))
    ref = _cholesky_host.cholesky(np.array(a), True, False, True, np.dtype("f8"))
    got = _cholesky_cuda.cholesky(a, True, True, True, np.dtype("f8"))
    assert got.data.ptr == a.data.ptr and np.allclose(plain(got), ref)


@pytest.mark.parametrize("finite", [True, False])
def test_emulated_fused_cholesky_names_the_failing_slice(emu, rng, finite):
    a = spd(rng, (3, 2), 12, np.float64)
    a[2, 1, 5, 5] = -50.0
    a[2, 0, 7, 7] = -50.0  # a later slice fails too: the first one is named
    with pytest.raises(NotPositiveDefiniteError) as info:
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), finite)
    assert info.value.batch_index == (2, 0) and info.value.minor == 8


def test_emulated_fused_cholesky_nan_is_never_a_silent_answer(emu, rng):
    a = spd(rng, (4,), 8, np.float64)
    a[1, 6, 2] = np.nan  # in the lower triangle: read by the factorization
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    with pytest.raises(ValueError, match=r"a \(batch entry \(1,\)\) holds NaN or Inf"):
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), False)
    a[1, 6, 2] = 0.0
    a[3, 0, 0] = np.inf
    with pytest.raises(ValueError, match=r"batch entry \(3,\)"):
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), False)


TRI_CASES = [((3, 6, 6), (3, 6, 2)), ((6, 6), (6,)), ((3, 6, 6), (6, 2)),
             ((3, 6, 6), (2, 1, 6, 4)), ((2, 1, 6, 6), (3, 6, 1)), ((4, 40, 40), (4, 40, 70))]


@pytest.mark.parametrize("a_shape, b_shape", TRI_CASES)
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_emulated_fused_solve_triangular_equals_host(emu, rng, a_shape, b_shape, trans, lower,
                                                     unit, dtype):
    n = a_shape[-1]
    a = (rng.standard_normal(a_shape) + 4 * np.eye(n)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        a = a + 0.5j * rng.standard_normal(a_shape)
    a = np.tril(a) if lower else np.triu(a)
    b = rng.standard_normal(b_shape).astype(dtype)
    CALLS.clear()
    got = plain(_triangular_cuda.solve_triangular(dev(a), dev(b), trans, lower, unit, False,
                                                  np.dtype(dtype), True, True))
    ref = _triangular_host.solve_triangular(a, b, trans, lower, unit, False, np.dtype(dtype))
    fused = len(a_shape) > 2 and b_shape[-1] <= 64 and not (b_shape == (6,) and len(a_shape) == 2)
    assert CALLS["small_trsm"] == int(fused)
    if fused:
        assert CALLS["get"] == 1 and CALLS["trsm_batched"] == 0
    assert got.shape == np.shape(ref) and np.allclose(got, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("b_shape", [(5, 9, 3), (9,), (2, 5, 9, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_emulated_fused_cho_solve_equals_host(emu, rng, lower, b_shape, dtype):
    a = spd(rng, (5,), 9, dtype)
    c = np.stack([_cholesky_host.cholesky(x, lower, False, False, np.dtype(dtype)) for x in a])
    b = rng.standard_normal(b_shape).astype(dtype)
    CALLS.clear()
    got = plain(_cholesky_cuda.cho_solve(dev(c), lower, dev(b), False, np.dtype(dtype), True,
                                         True))
    assert CALLS["small_trsm"] == 1 and CALLS["get"] == 1
    ref = _cholesky_host.cho_solve(c, lower, b, False, np.dtype(dtype))
    assert got.shape == np.shape(ref) and np.allclose(got, ref, rtol=tol(dtype), atol=tol(dtype))
    CALLS.clear()  # nothing to check: no read-back at all
    _cholesky_cuda.cho_solve(dev(c), lower, dev(b), False, np.dtype(dtype))
    assert CALLS["small_trsm"] == 1 and CALLS["get"] == 0


def test_emulated_fused_solves_check_in_their_one_read_back(emu, rng):
    c = np.tril(rng.standard_normal((3, 8, 8))) + 4 * np.eye(8)
    b = rng.standard_normal((3, 8, 2))
    for bad, name in (("c", "a"), ("b", "b")):
        cc, bb = c.copy(), b.copy()
        if bad == "c":
            cc[1, 0, 5] = np.inf  # the other triangle: SciPy's check still refuses it
        else:
            bb[2, 3, 1] = np.nan
        CALLS.clear()
        with pytest.raises(ValueError, match=f"{name} must not contain infs or NaNs"):
            _triangular_cuda.solve_triangular(dev(cc), dev(bb), 0, True, False, False,
                                              np.dtype("f8"), True, True)
        with pytest.raises(ValueError, match=f"{bad} must not contain infs or NaNs"):
            _cholesky_cuda.cho_solve(dev(cc), True, dev(bb), False, np.dtype("f8"), True, True)
        assert CALLS["get"] == 2 and CALLS["small_trsm"] == 2
    z = c.copy()
    z[2, 5, 5] = 0
    for check in (True, False):
        with pytest.raises(SingularMatrixError, match=r"batch entry \(2,\).*entry 5"):
            _triangular_cuda.solve_triangular(dev(z), dev(b), 0, True, False, False,
                                              np.dtype("f8"), check)
    with pytest.raises(SingularMatrixError, match=r"batch entry \(2,\).*entry 5"):
        _cholesky_cuda.cho_solve(dev(z), True, dev(b), False, np.dtype("f8"), True)


def test_emulated_fused_zero_diagonal_of_a_broadcast_matrix_names_its_own_slice(emu, rng):
    a = np.tril(rng.standard_normal((2, 1, 6, 6))) + 4 * np.eye(6)
    a[1, 0, 3, 3] = 0
    with pytest.raises(SingularMatrixError, match=r"batch entry \(1, 0\).*entry 3"):
        _triangular_cuda.solve_triangular(dev(a), dev(np.ones((2, 3, 6, 2))), 0, True, False,
                                          False, np.dtype("f8"), True)


def test_emulated_fused_ill_conditioning_warns(emu, rng):
    a = np.tril(rng.standard_normal((4, 8, 8))) + 4 * np.eye(8)
    a[3, 6, 6] = 1e-20
    with pytest.warns(IllConditionedWarning):
        _triangular_cuda.solve_triangular(dev(a), dev(np.ones((4, 8, 1))), 0, True, False,
                                          False, np.dtype("f8"), True)
    a[3, 6, 6] = 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _triangular_cuda.solve_triangular(dev(a), dev(np.ones((4, 8, 1))), 0, True, False,
                                          False, np.dtype("f8"), True)


# -- the device ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 8, 17, 64, 100, 128])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("lower", [True, False])
def test_gpu_fused_cholesky_and_solves(xp_gpu, rng, n, dtype, lower):
    cp = xp_gpu
    if np.dtype(dtype) == np.complex128 and n > 64:
        n = 64
    a_h = spd(rng, (3, 5), n, dtype)
    b_h = rng.standard_normal((3, 5, n, 3)).astype(dtype)
    a, b = cp.asarray(a_h), cp.asarray(b_h)
    eps = float(np.finfo(dtype).eps)
    c = cholesky(a, lower=lower)
    assert gpulinalg.last_run().backend == "gpu"
    for idx in np.ndindex(3, 5):
        ref = _cholesky_host.cholesky(a_h[idx], lower, False, True, np.dtype(dtype))
        assert np.abs(cp.asnumpy(c[idx]) - ref).max() <= 100 * n * eps * np.abs(ref).max()
    cf = cho_factor(a, lower=lower)
    x = cho_solve(cf, b)
    t = solve_triangular(c, b, lower=lower, trans="C")
    for idx in ((0, 0), (2, 4)):
        xr = np.linalg.solve(a_h[idx], b_h[idx])
        assert np.abs(cp.asnumpy(x[idx]) - xr).max() <= 1e3 * n * eps * np.abs(xr).max()
        tr = np.linalg.solve(np.conj(cp.asnumpy(c[idx]).T), b_h[idx])
        assert np.abs(cp.asnumpy(t[idx]) - tr).max() <= 1e3 * n * eps * np.abs(tr).max()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [5, 16, 32, 64, 128])
@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.float64])
@pytest.mark.parametrize("order", ["C", "F", "strided"])
def test_gpu_fused_potrf_kernel_layouts(xp_gpu, monkeypatch, rng, n, dtype, order):
    """The register-tiled kernel of every tile size: both triangles, both cleanings, every
    layout (a tile's threads run along the input's fast axis), in place; equal to NumPy. The
    fused route is forced at every order the kernel takes (the table picks it by speed)."""
    rows = tuple(r for r in _batched_plan.TABLE["potrf"] if r[2] != "fused")
    monkeypatch.setitem(_batched_plan.TABLE, "potrf", ((128, 2, "fused"), *rows))
    cp = xp_gpu
    a_h = spd(rng, (6,), n, dtype)
    src = cp.asarray(a_h) if order == "C" else (
        cp.asfortranarray(cp.asarray(a_h).swapaxes(-1, -2)).swapaxes(-1, -2) if order == "F"
        else cp.asarray(np.concatenate([a_h, a_h], -1))[..., :n])
    eps = float(np.finfo(dtype).eps)
    for lower in (True, False):
        tri = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
        for clean in (True, False):
            got = cp.asnumpy(_cholesky_cuda.cholesky(src, lower, False, clean, np.dtype(dtype),
                                                     True))
            for i in range(6):
                ref = np.linalg.cholesky(a_h[i].astype(np.complex128 if np.dtype(dtype).kind
                                                       == "c" else np.float64))
                ref = ref if lower else np.conj(ref.T)
                assert np.abs(np.where(tri, got[i], 0) - ref).max() <= 100 * n * eps * \
                    np.abs(ref).max()
                assert np.array_equal(got[i][~tri], 0 * a_h[i][~tri] if clean else a_h[i][~tri])
    w = cp.asarray(a_h)
    ref = cp.asnumpy(_cholesky_cuda.cholesky(w, True, False, True, np.dtype(dtype)))
    got = _cholesky_cuda.cholesky(w, True, True, True, np.dtype(dtype))
    assert got.data.ptr == w.data.ptr and np.array_equal(cp.asnumpy(got), ref)


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [8, 4, (8, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_fused_potrf_every_tile_at_order_128(xp_gpu, monkeypatch, rng, tile, dtype):
    """Each tile the kernel rows of ``benchmarks.decomp_batched`` time at order 128, the kernel
    called alone: factors equal NumPy's, codes and flags in the summary, the failed matrix left
    as read (in place)."""
    from gpulinalg.decomp._kernels import _fused_cuda as fc
    cp = xp_gpu
    monkeypatch.setitem(fc.TILE, (128, np.dtype(dtype).char), tile)
    summ, totals = fc.summary(cp, "potrf", cp.cuda.Device().id)
    eps = float(np.finfo(dtype).eps)
    for n in (65, 100, 128):
        a_h = spd(rng, (5,), n, dtype)
        for lower, clean in ((True, True), (False, False)):
            w = cp.empty_like(cp.asarray(a_h))
            fc.potrf(cp.asarray(a_h), w, summ, lower, clean, _cholesky_cuda.NONFINITE)
            got, words = cp.asnumpy(w), [int(x) for x in totals.get()]
            assert words == [0, fc.NONE, fc.NONE]
            tri = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
            for i in range(5):
                ref = np.linalg.cholesky(a_h[i].astype(np.float64))
                ref = ref if lower else ref.T
                assert np.abs(np.where(tri, got[i], 0) - ref).max() <= 100 * n * eps * \
                    np.abs(ref).max()
                assert np.array_equal(got[i][~tri], 0 * a_h[i][~tri] if clean else a_h[i][~tri])
        bad = a_h.copy()
        bad[3, n - 9, n - 9] = -1e3  # minor n - 8; a later slice fails too
        bad[4, 2, 2] = -1e3
        bad[1, 0, n - 1] = np.nan  # the other triangle: flagged, not factored
        w = cp.asarray(bad)
        fc.potrf(w, w, summ, True, True, _cholesky_cuda.NONFINITE)
        got, words = cp.asnumpy(w), [int(x) for x in totals.get()]
        assert words == [1, 3 << 32 | (n - 8), fc.NONE]
        assert np.array_equal(got[3], bad[3]) and np.array_equal(got[4], bad[4])
        assert np.isfinite(got[1]).all() and np.array_equal(got[1], np.tril(got[1]))
        bad[2, 7, 7] = np.inf  # a NaN/Inf pivot: nonfinite + k
        fc.potrf(cp.asarray(bad), cp.empty_like(w), summ, True, True, _cholesky_cuda.NONFINITE)
        words = [int(x) for x in totals.get()]
        assert words == [1, 3 << 32 | (n - 8), 2 << 32 | (_cholesky_cuda.NONFINITE + 7)]


@pytest.mark.gpu
@pytest.mark.parametrize("n", [16, 64, 128])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_fused_potrf_names_the_non_spd_slice(xp_gpu, rng, n, dtype):
    cp = xp_gpu
    a = spd(rng, (2, 5), n, dtype)
    keep = a[1, 4, 2, 2]
    a[1, 3, n - 9, n - 9] = -1e3  # minor n - 8 fails; a later slice fails too: not named
    a[1, 4, 2, 2] = -1e3
    before = a.copy()
    for lower in (True, False):
        with pytest.raises(NotPositiveDefiniteError) as info:
            cholesky(cp.asarray(a), lower=lower)
        assert info.value.batch_index == (1, 3) and info.value.minor == n - 8
    w = cp.asarray(a)
    with pytest.raises(NotPositiveDefiniteError):
        _cholesky_cuda.cholesky(w, True, True, True, np.dtype(dtype))
    got = cp.asnumpy(w)  # in place: the matrices that failed are left as they were read
    assert np.array_equal(got[1, 3], before[1, 3]) and np.array_equal(got[1, 4], before[1, 4])
    a[1, 4, 2, 2] = keep
    a[1, 3, n - 9, n - 9] = np.inf
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        cholesky(cp.asarray(a))
    with pytest.raises(ValueError, match=r"batch entry \(1, 3\)"):
        cholesky(cp.asarray(a), check_finite=False)
    a = spd(rng, (4,), n, dtype)
    a[2, 0, n - 1] = np.nan  # the other triangle: only check_finite sees it
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        cholesky(cp.asarray(a), lower=True)
    c = cholesky(cp.asarray(a), lower=True, check_finite=False)
    assert np.isfinite(cp.asnumpy(c)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_gpu_fused_trsm_kernel_equals_numpy(xp_gpu, rng, dtype):
    """The warp-per-column solves: every order class (segments of a warp below 32), vector
    and matrix right-hand sides (one to many columns per warp), broadcasts, op and triangle,
    unit diagonal, cho_solve; equal to per-matrix NumPy solves."""
    from gpulinalg.decomp._kernels import _fused_cuda
    cp = xp_gpu
    eps = float(np.finfo(dtype).eps)
    for n in (3, 8, 13, 16, 32, 40, 64):
        if not _fused_cuda.fits(n, dtype):
            continue
        a_h = (rng.standard_normal((4, n, n)) / np.sqrt(n) + 2 * np.eye(n)).astype(dtype)
        if np.dtype(dtype).kind == "c":
            a_h = a_h + (0.3j * rng.standard_normal((4, n, n)) / np.sqrt(n)).astype(dtype)
        for b_shape in ((4, n, 1), (4, n, 5), (n, 3), (n,), (4, n, 37)):
            b_h = rng.standard_normal(b_shape).astype(dtype)
            for trans, lower, unit in ((0, True, False), (1, True, False), (2, False, False),
                                       (0, False, True), (2, True, True)):
                tri = np.tril(a_h) if lower else np.triu(a_h)
                m = tri.copy()
                if unit:
                    m[:, np.arange(n), np.arange(n)] = 1
                op = m if trans == 0 else (m.swapaxes(-1, -2) if trans == 1
                                           else np.conj(m.swapaxes(-1, -2)))
                x = cp.asnumpy(solve_triangular(cp.asarray(tri), cp.asarray(b_h), trans=trans,
                                                lower=lower, unit_diagonal=unit))
                bb = np.broadcast_to(b_h if b_h.ndim > 1 else b_h[:, None],
                                     (4,) + (b_h.shape[-2:] if b_h.ndim > 1 else (n, 1)))
                ref = np.linalg.solve(op, bb)
                ref = ref[..., 0] if b_h.ndim == 1 else ref
                assert x.shape == ref.shape
                assert np.abs(x - ref).max() <= 1e3 * n * eps * np.abs(ref).max(), (n, b_shape)
        spd_h = spd(rng, (4,), n, dtype)
        b_h = rng.standard_normal((4, n, 5)).astype(dtype)
        for lower in (True, False):
            cf = cho_factor(cp.asarray(spd_h), lower=lower)
            x = cp.asnumpy(cho_solve(cf, cp.asarray(b_h)))
            ref = np.linalg.solve(spd_h, b_h)
            assert np.abs(x - ref).max() <= 1e3 * n * eps * np.abs(ref).max()


@pytest.mark.gpu
def test_gpu_fused_trsm_finite_checks_read_the_whole_matrix(xp_gpu, rng):
    cp = xp_gpu
    t = np.tril(rng.standard_normal((4, 64, 64))) + 4 * np.eye(64)
    t[2, 3, 50] = np.nan  # above the diagonal: not read by the solve
    b = cp.ones((4, 64, 2))
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        solve_triangular(cp.asarray(t), b, lower=True)
    x = cp.asnumpy(solve_triangular(cp.asarray(t), b, lower=True, check_finite=False))
    assert np.isfinite(x).all()
    bb = cp.ones((4, 64, 2))
    bb[1, 5, 1] = cp.inf
    t[2, 3, 50] = 0
    with pytest.raises(ValueError, match="b must not contain infs or NaNs"):
        solve_triangular(cp.asarray(t), bb, lower=True)


def assert_cholesky_failures(cp, a, i):
    """The device ``cholesky`` of the SPD stack ``a`` (3, 2 or more, n, n) with entry ``(i, i)``
    of matrix ``(2, 1)`` spoilt: -100 names that matrix and minor ``i + 1``; NaN fails SciPy's
    check, and without it names the matrix. ``a`` is left with the NaN."""
    a[2, 1, i, i] = -100.0
    with pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(cp.asarray(a))
    assert info.value.batch_index == (2, 1) and info.value.minor == i + 1
    a[2, 1, i, i] = np.nan
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        cholesky(cp.asarray(a))
    with pytest.raises(ValueError, match=r"batch entry \(2, 1\)"):
        cholesky(cp.asarray(a), check_finite=False)


@pytest.mark.gpu
def test_gpu_fused_failures_name_the_slice(xp_gpu, rng):
    cp = xp_gpu
    assert_cholesky_failures(cp, spd(rng, (3, 4), 16, np.float64), 7)
    t = np.tril(rng.standard_normal((4, 32, 32))) + 4 * np.eye(32)
    t[3, 9, 9] = 0
    with pytest.raises(SingularMatrixError, match=r"batch entry \(3,\).*entry 9"):
        solve_triangular(cp.asarray(t), cp.ones((4, 32, 2)), lower=True)


# -- the rule on the device: the summary against the host's judge --------------------------------

def _bounds(monkeypatch):
    """Record every bound the rule judges (the fused route's and the host's ``judge``)."""
    from gpulinalg.decomp.triangular import _triangular_xp
    seen = []
    real = _triangular_xp.judge_bound

    def record(cond, dtype, squared=False, estimate=None):
        seen.append(cond)
        return real(cond, dtype, squared, estimate)
    monkeypatch.setattr(_triangular_xp, "judge_bound", record)
    monkeypatch.setattr(_triangular_cuda, "judge_bound", record)
    return seen


@pytest.mark.parametrize("case", ["plain", "tiny", "nan", "inf_b", "zero_b", "unit"])
@pytest.mark.parametrize("op", ["solve_triangular", "cho_solve"])
def test_emulated_fused_bound_is_the_host_judges(emu, monkeypatch, rng, case, op):
    from tests.support.cusolver_emulator import without_fused
    a = np.tril(rng.standard_normal((2, 3, 7, 7))) + 3 * np.eye(7)
    b = rng.standard_normal((3, 7, 2))
    if case == "tiny":
        a[1, 2, 4, 4] = 1e-9
    elif case == "nan":
        a[0, 1, 5, 2] = np.nan
    elif case == "inf_b":
        b[1, 3, 1] = np.inf
    elif case == "zero_b":
        b[2] = 0.0
    seen = _bounds(monkeypatch)

    def call():
        if op == "cho_solve":
            return _cholesky_cuda.cho_solve(dev(a), True, dev(b), False, np.dtype("f8"), True)
        return _triangular_cuda.solve_triangular(dev(a), dev(b), 0, True, case == "unit", False,
                                                 np.dtype("f8"), True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        CALLS.clear()
        fused = plain(call())
        # one launch; where the bound falls between eps and sqrt(eps) (a triangle's tiny
        # diagonal entry) the condition estimate adds its three solves
        estimated = case == "tiny" and op == "solve_triangular"
        assert CALLS["small_trsm"] == (4 if estimated else 1) and CALLS["tri_figures"] == 0
        with monkeypatch.context() as m:
            without_fused(m)
            CALLS.clear()
            ref = plain(call())
            assert CALLS["small_trsm"] == 0 and CALLS["tri_figures"] >= 2
    assert len(seen) == 2
    # the same rule: equal up to the rounding of the two solutions (x enters the bound)
    assert (np.isnan(seen[0]) and np.isnan(seen[1])) or np.isclose(seen[0], seen[1],
                                                                   rtol=1e-12), seen
    assert np.allclose(fused, ref, equal_nan=True)


def test_emulated_fused_plans_follow_the_route_table(emu, rng):
    from tests.support.cusolver_emulator import without_fused
    a = np.tril(rng.standard_normal((4, 8, 8))) + 3 * np.eye(8)
    b = rng.standard_normal((4, 8, 2))
    s = spd(rng, (4,), 8, np.float64)
    for _ in range(2):  # the second call: the kept plan
        CALLS.clear()
        _triangular_cuda.solve_triangular(dev(a), dev(b), 0, True, False, False,
                                          np.dtype("f8"), True)
        _cholesky_cuda.cholesky(dev(s), True, False, True, np.dtype("f8"), True)
        assert CALLS["small_trsm"] == 1 and CALLS["small_potrf"] == 1 and CALLS["get"] == 2
    mp = pytest.MonkeyPatch()
    try:
        without_fused(mp)  # the same layouts now take the library routes
        CALLS.clear()
        _triangular_cuda.solve_triangular(dev(a), dev(b), 0, True, False, False,
                                          np.dtype("f8"), True)
        _cholesky_cuda.cholesky(dev(s), True, False, True, np.dtype("f8"), True)
        assert CALLS["small_trsm"] == 0 and CALLS["small_potrf"] == 0
        assert CALLS["trsm_batched"] == 1 and CALLS["potrf_batched"] == 1
    finally:
        mp.undo()


def test_emulated_fused_repeat_after_a_failure_is_clean(emu, rng):
    a = spd(rng, (3,), 8, np.float64)
    bad = a.copy()
    bad[1, 4, 4] = -9.0
    with pytest.raises(NotPositiveDefiniteError):
        _cholesky_cuda.cholesky(dev(bad), True, False, True, np.dtype("f8"), True)
    got = plain(_cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True))
    assert np.allclose(got[1] @ got[1].T, a[1])


@pytest.mark.gpu
def test_gpu_fused_summary_starts_clean_after_failures(xp_gpu, rng):
    # the summary buffer is reset by the last block of every launch: a failed call must leave
    # nothing for the next one (flags, failed minors, the bound)
    cp = xp_gpu
    a = spd(rng, (64,), 16, np.float64)
    bad = a.copy()
    bad[40, 3, 3] = -100.0
    bad[9, 11, 11] = np.inf  # a NaN/Inf pivot in an earlier slice, the minor failure first
    for _ in range(3):
        with pytest.raises(NotPositiveDefiniteError) as info:
            cholesky(cp.asarray(bad), lower=True, check_finite=False)
        assert info.value.batch_index == (40,) and info.value.minor == 4
        c = cholesky(cp.asarray(a), lower=True)
        assert np.allclose(cp.asnumpy(c[40] @ c[40].T), a[40])
    t = np.tril(rng.standard_normal((64, 16, 16))) + 4 * np.eye(16)
    tz, tt = t.copy(), t.copy()
    tz[50, 2, 2] = 0.0
    tt[7, 5, 5] = 1e-30
    b = cp.ones((64, 16, 3))
    for _ in range(3):
        with pytest.raises(SingularMatrixError, match=r"batch entry \(50,\).*entry 2"):
            solve_triangular(cp.asarray(tz), b, lower=True)
        with pytest.warns(IllConditionedWarning):
            solve_triangular(cp.asarray(tt), b, lower=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            x = solve_triangular(cp.asarray(t), b, lower=True)
        assert gpulinalg.last_run().details["rcond_bound"] > 1e-6
        assert np.allclose(t @ cp.asnumpy(x), 1.0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("op", ["solve_triangular", "cho_solve"])
def test_gpu_fused_bound_is_the_host_judges(xp_gpu, monkeypatch, rng, dtype, op):
    from tests.support.cusolver_emulator import without_fused
    cp = xp_gpu
    t = (np.tril(rng.standard_normal((3, 5, 24, 24))) + 3 * np.eye(24)).astype(dtype)
    t[1, 2, 9, 9] = 0.05  # the bound comes from this pivot; fp32 keeps some digits
    b = cp.asarray(rng.standard_normal((3, 5, 24, 4)).astype(dtype))
    t = cp.asarray(t)

    def call():
        if op == "cho_solve":
            return cho_solve((t, True), b)
        return solve_triangular(t, b, lower=True)
    got = []
    for fused in (True, False):
        with monkeypatch.context() as m:
            if not fused:
                without_fused(m)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                x = call()
            got.append((gpulinalg.last_run().details["rcond_bound"], cp.asnumpy(x)))
    # the same rule: equal up to the rounding of the two solutions (x enters the bound)
    assert np.isclose(got[0][0], got[1][0], rtol=1e-6 if dtype == np.float64 else 1e-2)
    assert np.allclose(got[0][1], got[1][1], rtol=1e-2 if dtype != np.float64 else 1e-9,
                       atol=1e-3 if dtype != np.float64 else 1e-9)
