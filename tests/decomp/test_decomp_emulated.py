"""The GPU functions of decomp run against an emulation of cuSOLVER/cuBLAS/CuPy on the CPU.

What this checks without a GPU: the column-major views, leading dimensions, flipped triangles
and transposed operations, batching, info slots and result assembly of the GPU code, by
comparing with the CPU twins. The real libraries are exercised by the ``gpu``-marked tests.
"""

import numpy as np
import pytest

from gpulinalg import NotPositiveDefiniteError
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.cholesky import _cholesky_host
from gpulinalg.decomp.qr import _qr_host
from gpulinalg.decomp.svd import _svd_host
from gpulinalg.decomp.triangular import _triangular_host
from gpulinalg.decomp._gpu import _cusolver_cuda, _finite_cuda, _transpose_cuda
from gpulinalg.decomp.qr import _qr_cuda
from gpulinalg.decomp.svd import _svd_cuda
from gpulinalg.decomp.triangular import _triangular_cuda

from tests.support.cusolver_emulator import (CALLS, GESVDP_NOISE, GESVDP_NOISY, FakeDev, dev,
                                             emulated_gpu, plain, without_fused)
from tests.support.decomp_dense_ref import DTYPES, backward_ratio, orthogonality_ratio, random, spd



@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(9, 4), (4, 9), (6, 6), (2, 7, 3), (2, 3, 3, 8)])
@pytest.mark.parametrize("mode", ["economic", "full", "r", "raw"])
def test_qr(emu, rng, dtype, shape, mode):
    a = random(rng, shape, dtype)
    out = _qr_cuda.qr(dev(a), mode, False, None, False, np.dtype(dtype))
    ref = _qr_host.qr(a, mode, False, None, False, np.dtype(dtype))
    if mode == "r":
        assert len(out) == 1 and out[0].shape == ref[0].shape
        assert np.allclose(np.abs(plain(out[0])), np.abs(ref[0]), atol=1e-4)
        return
    if mode == "raw":  # LAPACK's and cuSOLVER's reflectors agree
        (h, tau), r = out
        (h_ref, tau_ref), r_ref = ref
        assert h.shape == h_ref.shape and tau.shape == tau_ref.shape and r.shape == r_ref.shape
        tol = 1e-3 if np.finfo(dtype).bits <= 32 else 1e-10
        assert np.allclose(plain(h), h_ref, atol=tol) and np.allclose(plain(tau), tau_ref,
                                                                      atol=tol)
        return
    q, r = plain(out.Q), plain(out.R)
    assert q.shape == ref.Q.shape and r.shape == ref.R.shape
    assert backward_ratio(a, q @ r, dtype) <= 30
    assert orthogonality_ratio(q, dtype) <= 30
    assert np.allclose(np.tril(r, -1), 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(20, 5), (5, 20), (8, 7), (7, 8), (3, 12, 4), (2, 4, 12)])
@pytest.mark.parametrize("driver", ["gesvd", "gesvdj", "gesvdp"])
@pytest.mark.parametrize("full", [False, True])
def test_svd(emu, rng, dtype, shape, driver, full):
    a = random(rng, shape, dtype)
    out = _svd_cuda.svd(dev(a), full, True, driver, np.dtype(dtype))
    ref = _svd_host.svd(a, full, True, "gesvd", np.dtype(dtype))
    u, s, vh = (plain(x) for x in out)
    assert u.shape == ref.U.shape and s.shape == ref.S.shape and vh.shape == ref.Vh.shape
    assert u.dtype == dtype and s.dtype == ref.S.dtype
    k = min(shape[-2:])
    tol = 1e-3 if np.dtype(dtype).itemsize <= 8 and dtype != np.complex128 else 1e-9
    assert np.allclose(s, ref.S, atol=tol)
    assert backward_ratio(a, (u[..., :k] * s[..., None, :]) @ vh[..., :k, :], dtype) <= 50
    assert orthogonality_ratio(u, dtype) <= 50
    assert orthogonality_ratio(vh, dtype, rows=True) <= 50
    assert np.allclose(vh[..., :k, :], ref.Vh[..., :k, :], atol=tol * 10)  # same signs


def test_svd_values_only(emu, rng):
    a = random(rng, (30, 6), np.float64)
    for driver in ("gesvd", "gesvdj", "gesvdp"):
        s = _svd_cuda.svd(dev(a), False, False, driver, np.dtype(np.float64))
        assert np.allclose(plain(s), np.linalg.svd(a, compute_uv=False))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["C", "F", "view"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("clean", [True, False])
def test_cholesky(emu, rng, dtype, layout, lower, clean):
    base = spd(rng, 12, dtype)
    base = base + np.triu(np.full_like(base, 7), 1) * (not lower) * 0  # keep Hermitian
    a = {"C": base, "F": np.asfortranarray(base), "view": spd(rng, 24, dtype)[::2, ::2]}[layout]
    src = dev(a)
    if layout == "F":
        src = np.asfortranarray(a).view(FakeDev)
    before = np.array(src)
    got = plain(_cholesky_cuda.cholesky(src, lower, False, clean, np.dtype(dtype)))
    ref = _cholesky_host.cholesky(a, lower, False, clean, np.dtype(dtype))
    assert np.array_equal(np.array(src), before)
    tri = np.tril if lower else np.triu
    assert np.allclose(tri(got), tri(ref), atol=1e-4)
    if clean:
        assert np.allclose(got, ref, atol=1e-4)
    else:  # the other triangle keeps the input's entries, as SciPy's
        other = np.triu if lower else np.tril
        off = 1 if lower else -1
        assert np.allclose(other(got, off), other(np.array(a), off))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("clean", [True, False])
def test_cholesky_tiled_working_copy(emu, rng, monkeypatch, dtype, layout, lower, clean):
    monkeypatch.setattr(_transpose_cuda, "MIN_ORDER", 1)
    without_fused(monkeypatch)  # the library route's working copy (small stacks are fused)
    spd_ = spd(rng, 37, dtype, batch=(2,))
    keep = np.tril if lower else np.triu
    mask = keep(np.ones((37, 37), bool))
    a = np.where(mask, spd_, np.nan) if clean else spd_  # the other triangle is never used
    src = np.ascontiguousarray(a.swapaxes(-1, -2)).swapaxes(-1, -2) if layout == "F" else a.copy()
    src = src.view(FakeDev)
    CALLS.clear()
    got = plain(_cholesky_cuda.cholesky(src, lower, False, clean, np.dtype(dtype)))
    assert CALLS["transpose_copy"] == ((layout == "C") == lower)  # the transposing layouts
    assert np.array_equal(np.array(src), a, equal_nan=True)
    ref = np.linalg.cholesky(spd_)
    assert np.allclose(np.where(mask, got, 0), ref if lower else ref.swapaxes(-1, -2).conj(),
                       atol=1e-4)
    assert np.array_equal(np.where(mask, 0, got), np.where(mask, 0, 0 * spd_ if clean else a))


def test_finiteness_check_reads_memory_in_order(emu):
    """The check runs over a view in memory order: flat for column-major and transposed
    stacks, broadcast axes read once, and the same verdict as NumPy's for every layout."""
    from gpulinalg.decomp._gpu._finite_cuda import memory_order
    base = np.arange(2 * 5 * 7, dtype=np.float64).reshape(2, 5, 7)
    f = np.asfortranarray(base)
    stacked_f = np.ascontiguousarray(base.swapaxes(-1, -2)).swapaxes(-1, -2)
    for x in (base, f, stacked_f, base.transpose(2, 0, 1)):
        got = memory_order(x)
        assert got.ndim == 1 and np.shares_memory(got, x) and got.size == x.size
        assert np.array_equal(np.sort(got), np.sort(x.ravel()))
    wide = np.broadcast_to(base[:, :, :1], (2, 5, 7))  # a stride-0 axis: one column read
    assert memory_order(wide).size == 10
    sliced = base[:, ::2, 1:]  # not contiguous in any order: still a view, every entry
    assert memory_order(sliced).size == sliced.size and np.shares_memory(memory_order(sliced), base)
    for layout in (lambda y: np.ascontiguousarray(y.swapaxes(-1, -2)).swapaxes(-1, -2),
                   lambda y: y[:, ::-1]):
        for value, want in ((1.0, 0), (np.nan, 1), (-np.inf, 1)):
            bad = base.copy()
            bad[1, 3, 4] = value
            flag = dev(np.zeros(1, np.int32))
            _finite_cuda.flag_nonfinite(layout(dev(bad)), flag)
            assert plain(flag)[0] == want


@pytest.mark.parametrize("dtype", DTYPES)
def test_finiteness_check_of_contiguous_arrays_runs_flat(emu, dtype):
    """A contiguous array (C or column-major, complex as pairs of parts) takes the flat
    kernel; a NaN or Inf anywhere, the last entry included, sets the flag; other layouts
    keep the elementwise kernel."""
    base = np.arange(3 * 4 * 5, dtype=dtype).reshape(3, 4, 5)
    for layout, flat in ((lambda y: y, 1), (np.asfortranarray, 1), (lambda y: y[:, ::2], 0)):
        for where in ((0, 0, 0), (1, 0, 3), (2, 2, 4), (2, 3, 4) if flat else (2, 2, 3)):
            for value, want in ((1.0, 0), (np.nan, 1), (np.inf, 1)):
                bad = base.copy()
                bad[where] = value if np.dtype(dtype).kind == "f" else complex(1.0, value)
                flag = dev(np.zeros(1, np.int32))
                CALLS.clear()
                _finite_cuda.flag_nonfinite(layout(dev(bad)), flag)
                assert (plain(flag)[0], CALLS["flag_flat"]) == (want, flat)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_tiled_copy_checks_finite_in_the_same_pass(emu, rng, monkeypatch, dtype):
    """The transposing working copy also flags NaN or Inf anywhere in ``a`` (SciPy's
    ``check_finite``), the triangle it zeroes included: no second pass over ``a``."""
    monkeypatch.setattr(_transpose_cuda, "MIN_ORDER", 1)
    without_fused(monkeypatch)
    a = spd(rng, 37, dtype, batch=(3,))
    CALLS.clear()
    got = plain(_cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype(dtype), True))
    assert CALLS["transpose_copy"] == 1 and CALLS["flag_nonfinite"] == 1 and CALLS["get"] == 1
    assert np.allclose(got, np.linalg.cholesky(a), atol=1e-4)
    a[1, 0, 30] = np.inf  # above the diagonal: zeroed by the copy, never read by potrf
    CALLS.clear()
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype(dtype), True)
    assert CALLS["transpose_copy"] == 1 and CALLS["flag_nonfinite"] == 1


def test_cholesky_batched_overwrite_and_errors(emu, rng, monkeypatch):
    without_fused(monkeypatch)  # the library route (small stacks are fused)
    a = spd(rng, 6, np.float64, batch=(2, 3))
    f64 = np.dtype(np.float64)
    src = dev(a)  # C order: the fast lower kernel wants column-major, so a copy...
    got = _cholesky_cuda.cholesky(src, True, True, True, f64)
    assert np.allclose(plain(got), np.linalg.cholesky(a)) and not np.shares_memory(got, src)
    got = _cholesky_cuda.cholesky_in_place(src, True, True, True, f64)  # ...but the oversize
    # route (input + working copy do not fit) factors in place with the upper kernel
    assert np.allclose(plain(got), np.linalg.cholesky(a)) and np.shares_memory(got, src)
    srcf = np.ascontiguousarray(a.swapaxes(-1, -2)).view(FakeDev).swapaxes(-1, -2)
    got = _cholesky_cuda.cholesky(srcf, True, True, True, f64)  # column-major: in place
    assert np.allclose(plain(got), np.linalg.cholesky(a)) and np.shares_memory(got, srcf)
    srcc = dev(a)
    got = _cholesky_cuda.cholesky(srcc, False, True, True, f64)  # C order, upper: in place
    assert np.allclose(plain(got), np.linalg.cholesky(a).swapaxes(-1, -2))
    assert np.shares_memory(got, srcc)
    bad = a.copy()
    bad[1, 2, 4, 4] = -3
    with pytest.raises(NotPositiveDefiniteError) as info:
        _cholesky_cuda.cholesky(dev(bad), True, False, True, np.dtype(np.float64))
    assert info.value.minor == 5 and info.value.batch_index == (1, 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("bshape", [(10,), (10, 3), (2, 10, 3)])
def test_cho_solve(emu, rng, dtype, layout, lower, bshape):
    a = spd(rng, 10, dtype, cond=10)
    c = _cholesky_host.cholesky(a, lower, False, False, np.dtype(dtype))
    c = np.asfortranarray(c) if layout == "F" else np.ascontiguousarray(c)
    b = random(rng, bshape, dtype)
    src = c.view(FakeDev)
    x = plain(_cholesky_cuda.cho_solve(src, lower, dev(b), False, np.dtype(dtype)))
    ref = _cholesky_host.cho_solve(c, lower, b, False, np.dtype(dtype))
    assert x.shape == ref.shape
    assert np.allclose(x, ref, atol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["C", "F", "view"])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(emu, rng, dtype, layout, trans, lower, unit):
    base = random(rng, (16, 16), dtype) + 16 * np.eye(16, dtype=dtype)
    a = {"C": base[:8, :8].copy(), "F": np.asfortranarray(base[:8, :8]),
         "view": base[::2, ::2]}[layout]
    src = np.asfortranarray(a).view(FakeDev) if layout == "F" else dev(a)
    if layout == "view":
        src = dev(base)[::2, ::2]
    b = random(rng, (8, 3), dtype)
    x = plain(_triangular_cuda.solve_triangular(src, dev(b), trans, lower, unit, False,
                                                np.dtype(dtype)))
    ref = _triangular_host.solve_triangular(a, b, trans, lower, unit, False, np.dtype(dtype))
    assert np.allclose(x, ref, atol=1e-3)


@pytest.mark.parametrize("squared", [False, True])
def test_condition_estimate_through_the_gpu_solves(emu, squared):
    """Where the cheap bound cannot see it, the GPU engine estimates the condition number
    through its own triangular solves (hilbert(12): the bound says 1e-13, the truth 1e-17)."""
    import warnings
    import scipy.linalg
    from gpulinalg import IllConditionedWarning
    from gpulinalg._runtime import dispatch
    if squared:
        h = scipy.linalg.hilbert(12)
        c = np.linalg.cholesky(h)
    else:  # a triangle whose diagonal ratio (1e-9) is under sqrt(eps)
        t = np.random.default_rng(7).standard_normal((40, 40))
        c = np.tril(t) + np.diag(np.logspace(0, -9, 40))
    dispatch._local.details = details = {}
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if squared:
                _cholesky_cuda.cho_solve(dev(c), True, dev(h @ np.ones(12)), False,
                                         np.dtype("f8"), check=True)
            else:
                _triangular_cuda.solve_triangular(dev(c), dev(np.ones(40)), 0, True, False,
                                                  False, np.dtype("f8"), check=True)
    finally:
        dispatch._local.details = None
    est = details["rcond_estimate"]
    true = 1.0 / np.linalg.cond(h if squared else c, 1)
    assert details["rcond_bound"] > est and true / 20 <= est <= true * 20
    assert any(issubclass(w.category, IllConditionedWarning) for w in seen) == (est < 2.3e-16)


def test_solve_triangular_batched_broadcast(emu, rng):
    a = np.tril(random(rng, (3, 5, 5), np.float64)) + 5 * np.eye(5)
    b = random(rng, (2, 1, 5, 2), np.float64)
    x = plain(_triangular_cuda.solve_triangular(dev(a), dev(b), 0, True, False, False,
                                                np.dtype("f8")))
    assert x.shape == (2, 3, 5, 2) and np.allclose(a @ x, b)
    v = plain(_triangular_cuda.solve_triangular(dev(a), dev(b[0, 0, :, 0]), 1, True, False,
                                                False, np.dtype("f8")))
    assert v.shape == (3, 5)
    assert np.allclose(np.einsum("bji,bj->bi", a, v), b[0, 0, :, 0])


def test_batched_routines_are_used(emu, rng, monkeypatch):
    without_fused(monkeypatch)  # the library routes (small stacks are fused)
    CALLS.clear()
    a = spd(rng, 5, np.float64, batch=(4,))
    _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"))
    c = np.linalg.cholesky(a)
    x = _cholesky_cuda.cho_solve(dev(c), True, dev(random(rng, (4, 5, 2), np.float64)),
                                 False, np.dtype("f8"))
    assert x.shape == (4, 5, 2)
    _svd_cuda.svd(dev(random(rng, (6, 9, 4), np.float64)), False, True, "auto",
                  np.dtype("f8"))
    assert CALLS["potrf_batched"] == 1 and CALLS["gesvdj_batched"] == 1
    assert CALLS["trsm_batched"] == 2


@pytest.fixture(scope="module")
def emu_module():
    mp = pytest.MonkeyPatch()
    with emulated_gpu(mp):
        yield
    mp.undo()


def test_shapes_and_dtypes_hypothesis(emu_module):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=60, deadline=None)
    @hypothesis.given(batch=st.lists(st.integers(1, 3), max_size=2),
                      m=st.integers(1, 14), n=st.integers(1, 14),
                      dtype=st.sampled_from(DTYPES), full=st.booleans(),
                      mode=st.sampled_from(["economic", "full", "r"]),
                      seed=st.integers(0, 2 ** 16))
    def check(batch, m, n, dtype, full, mode, seed):
        a = random(np.random.default_rng(seed), tuple(batch) + (m, n), dtype)
        res = _svd_cuda.svd(dev(a), full, True, "auto", np.dtype(dtype))
        ref = _svd_host.svd(a, full, True, "gesvd", np.dtype(dtype))
        assert [x.shape for x in res] == [x.shape for x in ref]
        k = min(m, n)
        u, s, vh = (plain(x) for x in res)
        assert backward_ratio(a, (u[..., :k] * s[..., None, :]) @ vh[..., :k, :], dtype) <= 50
        out = _qr_cuda.qr(dev(a), mode, False, None, False, np.dtype(dtype))
        want = _qr_host.qr(a, mode, False, None, False, np.dtype(dtype))
        if mode == "r":
            assert out[0].shape == want[0].shape
        else:
            assert out.Q.shape == want.Q.shape and out.R.shape == want.R.shape
            assert backward_ratio(a, plain(out.Q) @ plain(out.R), dtype) <= 30
    check()


def test_solve_triangular_singular(emu):
    from gpulinalg import SingularMatrixError
    a = np.tril(np.ones((2, 4, 4)))
    a[1, 2, 2] = 0
    with pytest.raises(SingularMatrixError, match=r"\(1,\).*entry 2"):
        _triangular_cuda.solve_triangular(dev(a), dev(np.ones(4)), 0, True, False, False,
                                          np.dtype("f8"))


def test_workspace_query_path(emu, monkeypatch):
    from gpulinalg._runtime import device
    monkeypatch.setattr(device, "gpu_available", lambda: True)
    monkeypatch.setattr(device, "current_device", lambda: 0)
    _cusolver_cuda._queried.cache_clear()
    try:
        for routine in ("potrf", "geqrf", "gesvd", "gesvdp"):
            assert _cusolver_cuda.workspace_bytes(routine, 50, 40, np.float64) == 64
        assert _cusolver_cuda.workspace_bytes("orgqr", 50, 40, np.float64) > 0  # analytic
    finally:
        _cusolver_cuda._queried.cache_clear()


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_cholesky_always_uses_the_lower_kernel(emu, rng, lower, layout):
    a = spd(rng, 300, np.float64)  # one matrix: Xpotrf
    src = np.asfortranarray(a).view(FakeDev) if layout == "F" else dev(a)
    CALLS.clear()
    got = plain(_cholesky_cuda.cholesky(src, lower, False, True, np.dtype("f8")))
    assert CALLS["potrf_lower"] == 1 and CALLS["potrf_upper"] == 0
    ref = np.linalg.cholesky(a)
    assert np.allclose(got, ref if lower else ref.T)


@pytest.mark.parametrize("shape", [(120, 40), (40, 120), (50, 45), (1, 70, 40)])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_auto_svd_verifies_gesvdp_and_falls_back(emu, rng, shape, dtype):
    a = random(rng, shape, dtype)
    ref = _svd_host.svd(a, False, True, "gesvd", np.dtype(dtype))
    single = np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64))
    # (noise, noisy dtypes, gesvdp runs, gesvd runs) per matrix: a rejected single-precision
    # gesvdp is recomputed by gesvdp in double precision first, then by gesvd
    cases = [(0.0, None, 1, 0), (1e-2, None, 2 if single else 1, 1)]
    if single:
        cases.append((1e-2, (np.dtype(dtype),), 2, 0))
    for noise, noisy, gesvdp_runs, gesvd_runs in cases:
        CALLS.clear()
        GESVDP_NOISE[0], GESVDP_NOISY[0] = noise, noisy
        try:
            u, s, vh = (plain(x) for x in _svd_cuda.svd(dev(a), False, True, "auto",
                                                        np.dtype(dtype)))
        finally:
            GESVDP_NOISE[0], GESVDP_NOISY[0] = 0.0, None
        batch = int(np.prod(shape[:-2]))
        assert CALLS["gesvdp"] == gesvdp_runs * batch
        assert CALLS["gesvd"] == gesvd_runs * batch
        k = min(shape[-2:])
        assert backward_ratio(a, (u[..., :k] * s[..., None, :]) @ vh, dtype) <= 50
        assert orthogonality_ratio(u, dtype) <= 50
        assert np.allclose(vh, ref.Vh, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.float64])
def test_large_single_precision_svd_goes_to_double_at_once(emu, rng, monkeypatch, dtype):
    from gpulinalg._runtime import dispatch
    from gpulinalg.decomp.svd import _svd_drivers
    monkeypatch.setattr(_svd_drivers, "PROMOTE_FROM", 40)
    a = random(rng, (120, 40), dtype)
    single = np.dtype(dtype).char in "fF"
    # (noise, noisy dtypes, gesvdp runs, gesvd runs): a single-precision factor of order 40
    # runs gesvdp once, in double precision; gesvd only when that fails its check too
    cases = [(0.0, None, 1, 0), (1e-2, None, 1, 1)]
    for noise, noisy, gesvdp_runs, gesvd_runs in cases:
        CALLS.clear()
        GESVDP_NOISE[0], GESVDP_NOISY[0] = noise, noisy
        dispatch._local.details = details = {}
        try:
            u, s, vh = (plain(x) for x in _svd_cuda.svd(dev(a), False, True, "auto",
                                                        np.dtype(dtype)))
        finally:
            GESVDP_NOISE[0], GESVDP_NOISY[0] = 0.0, None
            dispatch._local.details = None
        assert CALLS["gesvdp"] == gesvdp_runs and CALLS["gesvd"] == gesvd_runs
        assert ("promoted" in details) == (single and not gesvd_runs)
        assert backward_ratio(a, (u[:, :40] * s) @ vh, dtype) <= 50
        assert orthogonality_ratio(u, dtype) <= 50


@pytest.mark.parametrize("shape", [(120, 40), (40, 120), (300, 40)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_values_alone_of_large_matrices_come_from_the_verified_svd(emu, rng, monkeypatch,
                                                                    shape, dtype):
    from gpulinalg.decomp.svd import _svd_drivers
    monkeypatch.setattr(_svd_drivers, "VALUES_BY_FULL_FROM", 40)
    a = random(rng, shape, dtype)
    ref = np.linalg.svd(a.astype(np.complex128), compute_uv=False)
    # (noise, gesvdp runs, gesvd runs): a clean gesvdp serves the values; one that fails its
    # check is recomputed by gesvd (or, in single precision, first in double precision)
    for noise, gesvdp_runs in ((0.0, 1), (1e-2, None)):
        CALLS.clear()
        GESVDP_NOISE[0] = noise
        try:
            s = plain(_svd_cuda.svd(dev(a), True, False, "auto", np.dtype(dtype)))
        finally:
            GESVDP_NOISE[0] = 0.0
        assert s.shape == (40,) and s.dtype == np.dtype(dtype).type(0).real.dtype
        assert CALLS["gesvdp"] >= 1 and (gesvdp_runs is None or CALLS["gesvdp"] == 1)
        assert CALLS["gesvd"] == (0 if noise == 0 else 1)
        assert np.allclose(s, ref, rtol=0, atol=50 * ref[0] * np.finfo(dtype).eps * 40)
    if max(shape) >= 1.5 * min(shape):  # QR first: R's vectors serve the check, U is not made
        CALLS.clear()
        _svd_cuda.svd(dev(a), True, True, "auto", np.dtype(dtype))
        assert CALLS["ormqr"] == 1
        CALLS.clear()
        _svd_cuda.svd(dev(a), True, False, "auto", np.dtype(dtype))
        assert CALLS["ormqr"] == 0 and CALLS["gesvdp"] >= 1
    monkeypatch.setattr(_svd_drivers, "VALUES_BY_FULL_FROM", 41)  # below it: gesvd alone
    CALLS.clear()
    s = plain(_svd_cuda.svd(dev(a), True, False, "auto", np.dtype(dtype)))
    assert CALLS["gesvdp"] == 0 and CALLS["gesvd"] == 1
    assert np.allclose(s, ref, rtol=0, atol=50 * ref[0] * np.finfo(dtype).eps * 40)


# -- issue 18 on the GPU engines -----------------------------------------------------------

@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_nan_diagnosed(emu, rng, lower):
    a = spd(rng, 6, np.float64, batch=(3,))
    a[2, 4, 4] = np.nan
    with pytest.raises(ValueError, match=r"batch entry \(2,\).*NaN or Inf"):
        _cholesky_cuda.cholesky(dev(a), lower, False, True, np.dtype("f8"))
    one = np.asfortranarray(a[2]) if lower else np.ascontiguousarray(a[2])
    src = one.view(FakeDev)  # the fast kernel's own layout: factored in place
    with pytest.raises(gpulinalg_linalg_error(), match="in place"):
        _cholesky_cuda.cholesky(src, lower, True, True, np.dtype("f8"))


def gpulinalg_linalg_error():
    from gpulinalg import LinAlgError
    return LinAlgError


@pytest.mark.parametrize("squared", [False, True])
def test_conditioning_same_rule_on_both_engines(emu, rng, squared):
    import warnings

    from gpulinalg import IllConditionedWarning
    from gpulinalg._runtime import dispatch
    a = np.triu(random(rng, (2, 12, 12), np.float64)) + 12 * np.eye(12)
    a[1, 7, 7] = 1e-13
    b = random(rng, (12, 3), np.float64)
    bounds = []
    for engine, arr in ((_cholesky_host if squared else _triangular_host, lambda x: x),
                        (_cholesky_cuda if squared else _triangular_cuda, dev)):
        dispatch._local.details = details = {}
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if squared:
                engine.cho_solve(arr(a), False, arr(b), False, np.dtype("f8"), True)
            else:
                engine.solve_triangular(arr(a), arr(b), 0, False, False, False,
                                        np.dtype("f8"), True)
        dispatch._local.details = None
        bounds.append(details["rcond_bound"])
        assert any(w.category is IllConditionedWarning for w in seen) == squared
    assert np.isclose(bounds[0], bounds[1], rtol=1e-6)


def test_conditioning_zero_pivot_after_the_solve(emu):
    from gpulinalg import SingularMatrixError
    a = np.tril(np.ones((2, 4, 4)))
    a[1, 2, 2] = 0
    with pytest.raises(SingularMatrixError, match=r"\(1,\).*entry 2"):
        _triangular_cuda.solve_triangular(dev(a), dev(np.ones(4)), 0, True, False, False,
                                          np.dtype("f8"), True)
    x = _triangular_cuda.solve_triangular(dev(a), dev(np.ones(4)), 0, True, True, False,
                                          np.dtype("f8"), True)  # unit diagonal: not read
    assert np.all(np.isfinite(plain(x)))


def test_cuda_qr_refuses_pivoting(emu, rng):
    a = random(rng, (2, 9, 6), np.float64)
    with pytest.raises(ValueError, match="pivoting"):
        _qr_cuda.qr(dev(a), "full", True, None, False, np.dtype("f8"))