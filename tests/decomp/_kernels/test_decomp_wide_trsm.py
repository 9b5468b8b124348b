"""The wide triangular solve (``decomp._kernels._wide_trsm_cuda``: one matrix, a thread block per
panel of 64 rows, one launch and one read-back per call) on the CPU emulation and on the device
(``gpu``-marked): results equal SciPy's for every layout, operation and triangle, partial
panels and groups of right-hand sides, ``cho_solve``'s two passes in one launch, failures name
the entry, the conditioning rule's bound is the host's, and the workspace is left at rest."""

import math
import threading
import warnings

import numpy as np
import pytest

import gpulinalg
from gpulinalg import IllConditionedWarning, SingularMatrixError
from gpulinalg.decomp._gpu import _batched_plan
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.cholesky import _cholesky_host
from gpulinalg.decomp.triangular import _triangular_host
from gpulinalg.decomp.triangular import _triangular_cuda
from gpulinalg.decomp._kernels import _wide_trsm_cuda
from gpulinalg.decomp import cho_solve, solve_triangular

from tests.support.cusolver_emulator import CALLS, dev, plain
from tests.decomp._kernels.test_decomp_stream_trsm import assert_cho_solve, assert_solves, spd, tri



# -- the table and the plan ---------------------------------------------------------------------

def test_fits_and_blocks():
    assert _wide_trsm_cuda.fits(4096, 4, "float64")
    assert _wide_trsm_cuda.fits(1, 1, "complex128")
    assert not _wide_trsm_cuda.fits(4096, _wide_trsm_cuda.MAX_RHS + 1, "float64")
    assert not _wide_trsm_cuda.fits(_wide_trsm_cuda.MAX_ORDER + 1, 1, "float32")
    assert not _wide_trsm_cuda.fits(100, 1, "float16")
    assert not _wide_trsm_cuda.fits(100, 1, "complex128", limit=48 * 1024)  # 66.5 KiB + static
    assert _wide_trsm_cuda.fits(100, 1, "float64", limit=48 * 1024)
    # one block per panel, group of four columns and pass
    assert _wide_trsm_cuda.blocks(65, 1, 0) == 2 and _wide_trsm_cuda.blocks(64, 16, 2) == 8


def test_identities_are_what_the_kernel_puts_back():
    h = _wide_trsm_cuda.HEADER
    w = _wide_trsm_cuda.identities(h + 6)
    assert w[0] == w[1] == w[2] == w[5] == 0 and w[3] == 0x7FF0000000000000
    assert w[4] == np.uint64((1 << 64) - 1) and not w[6:h].any()
    # no tag used yet, the buffer's own length, no tagged word
    assert w[h] == 0 and w[h + 1] == h + 6 and not w[h + 2:].any()


def test_workspace_words_hold_a_panel_a_block():
    """32 bits of a value a word, a panel's 64 rows and four columns a block."""
    h = _wide_trsm_cuda.HEADER + 2
    assert _wide_trsm_cuda.words(64, 1, 0, "float32") == h + 64 * 4
    assert _wide_trsm_cuda.words(65, 5, 2, "float64") == h + 8 * 64 * 4 * 2
    assert _wide_trsm_cuda.words(64, 1, 1, "complex128") == h + 64 * 4 * 4


# -- the CPU emulation: the engine's use of the kernel -------------------------------------------

@pytest.mark.parametrize("n", [64, 130, 200])
@pytest.mark.parametrize("b_cols", [None, 1, 5])
@pytest.mark.parametrize("trans, lower, unit", [(0, True, False), (1, True, False),
                                                (2, False, False), (0, False, True),
                                                (1, False, False), (2, True, True)])
@pytest.mark.parametrize("dtype, order", [(np.float64, "C"), (np.float64, "F"),
                                          (np.complex128, "C"), (np.complex128, "F")])
def test_emulated_wide_solve_triangular_equals_host(emu, rng, n, b_cols, trans, lower, unit,
                                                    dtype, order):
    a = tri(rng, (n, n), dtype, lower)
    a = a + tri(rng, (n, n), dtype, not lower) / 7  # the other triangle is never read
    a = np.asfortranarray(a) if order == "F" else a
    b = rng.standard_normal((n,) if b_cols is None else (n, b_cols)).astype(dtype)
    CALLS.clear()
    got = plain(_triangular_cuda.solve_triangular(dev(a), dev(b), trans, lower, unit, False,
                                                  np.dtype(dtype), True, True))
    # the summary comes back through mapped host memory: no copy, no synchronization
    assert CALLS["wide_trsm"] == 1 and CALLS["wide_trsm_mapped"] == 1 and CALLS["get"] == 0
    assert CALLS["wide_trsm_finite"] == 1 and CALLS["flag_flat"] == 0  # one launch checks
    ref = _triangular_host.solve_triangular(a, b, trans, lower, unit, False, np.dtype(dtype))
    assert got.shape == np.shape(ref) and np.allclose(got, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("k", [1, 6])
def test_emulated_wide_cho_solve_is_one_launch(emu, rng, lower, order, k):
    a = spd(rng, (), 150, np.float64)
    c = _cholesky_host.cholesky(a, lower, False, False, np.dtype("f8"))
    c = np.asfortranarray(c) if order == "F" else c
    b = rng.standard_normal((150, k))
    CALLS.clear()
    got = plain(_cholesky_cuda.cho_solve(dev(c), lower, dev(b), False, np.dtype("f8"), True,
                                         True))
    assert CALLS["wide_trsm"] == 1 and CALLS["wide_trsm_mapped"] == 1 and CALLS["get"] == 0
    assert CALLS["wide_trsm_finite"] == 1 and CALLS["flag_flat"] == 0
    assert np.allclose(got, np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)
    CALLS.clear()  # nothing to check: no read-back at all
    _cholesky_cuda.cho_solve(dev(c), lower, dev(b), False, np.dtype("f8"))
    assert CALLS["wide_trsm"] == 1 and CALLS["wide_trsm_mapped"] == 0 and CALLS["get"] == 0
    assert CALLS["flag_nonfinite"] == 0


def test_emulated_many_right_hand_sides_keep_the_library_route(emu, rng):
    a = tri(rng, (100, 100), np.float64)
    b = rng.standard_normal((100, _wide_trsm_cuda.MAX_RHS + 1))
    CALLS.clear()
    got = plain(_triangular_cuda.solve_triangular(dev(a), dev(b), 0, True, False, False,
                                                  np.dtype("f8"), True))
    assert CALLS["wide_trsm"] == 0
    assert np.allclose(got, np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)


def test_emulated_wide_failures_name_the_entry(emu, rng):
    t = tri(rng, (300, 300), np.float64)
    b = rng.standard_normal((300, 2))
    t[129, 129] = 0
    for check in (True, False):
        with pytest.raises(SingularMatrixError, match=r"entry 129"):
            _triangular_cuda.solve_triangular(dev(t), dev(b), 0, True, False, False,
                                              np.dtype("f8"), check)
    t[129, 129] = 1.0
    t[3, 250] = np.nan  # the other triangle: SciPy's check still refuses it
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        _triangular_cuda.solve_triangular(dev(t), dev(b), 0, True, False, False,
                                          np.dtype("f8"), True, True)
    t[3, 250] = 0.0
    bb = b.copy()
    bb[280, 1] = np.inf
    with pytest.raises(ValueError, match="b must not contain infs or NaNs"):
        _triangular_cuda.solve_triangular(dev(t), dev(bb), 0, True, False, False,
                                          np.dtype("f8"), True, True)
    t[200, 200] = 1e-30
    with pytest.warns(IllConditionedWarning):
        _triangular_cuda.solve_triangular(dev(t), dev(b), 0, True, False, False,
                                          np.dtype("f8"), True)


def _tags_wrap(xp, ws, solve, a, b):
    """Solves of two shapes, one with the tags spent: right results throughout; each launch
    tags with one more than the last, and the one with the last tag clears every tagged word
    (the next starts again at 1)."""
    h = _wide_trsm_cuda.HEADER
    want = np.linalg.solve(a, b)
    tol = dict(rtol=1e-10, atol=1e-10)
    assert np.allclose(solve(a, b), want, **tol)
    before = int(ws[h])
    assert np.allclose(solve(a[:130, :130], b[:130, :1]), np.linalg.solve(a[:130, :130],
                                                                        b[:130, :1]), **tol)
    assert int(ws[h]) == before + 1 and int(ws[h + 1]) == ws.size
    ws[h] = 0xFFFFFFFE
    assert np.allclose(solve(a, b), want, **tol)
    assert int(ws[h]) == 0 and not bool(xp.asarray(ws[h + 2:]).any())
    assert np.allclose(solve(a, b), want, **tol)
    assert int(ws[h]) == 1 and int(ws[0]) == 0 and int(ws[1]) == 0


def test_emulated_tags_advance_and_wrap(emu, rng):
    import cupy  # the emulation's
    a, b = tri(rng, (300, 300), np.float64), rng.standard_normal((300, 5))

    def solve(a, b):
        return plain(_triangular_cuda.solve_triangular(dev(a), dev(b), 0, True, False, False,
                                                       np.dtype("f8"), True))
    solve(a, b)
    ws = _wide_trsm_cuda.workspace(cupy, 0, 1)
    _tags_wrap(np, ws, solve, a, b)


# -- the device ---------------------------------------------------------------------------------

@pytest.fixture
def library(monkeypatch):
    """``library()``: single matrices take cuBLAS again (the wide row removed)."""
    def drop():
        rows = tuple(r for r in _batched_plan.TABLE["trsm"] if r[2] != "wide")
        monkeypatch.setitem(_batched_plan.TABLE, "trsm", rows)
    return drop


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_gpu_wide_kernel_equals_numpy(xp_gpu, rng, dtype):
    """Orders around the panel size and far above it, C and column-major matrices (the two
    ways of reading a tile), vector and matrix right-hand sides (one to four groups of
    columns), op and triangle, unit diagonal."""
    cp = xp_gpu
    eps = float(np.finfo(dtype).eps)
    for n in (1, 63, 64, 100, 1000, 2049):
        a_h = tri(rng, (n, n), dtype, lower=True) + tri(rng, (n, n), dtype, lower=False)
        for order in ("C", "F"):
            a_d = cp.asarray(a_h, order=order)
            for b_shape in ((n,), (n, 4), (n, 7), (n, 16)):
                assert_solves(cp, a_d, a_h, rng.standard_normal(b_shape).astype(dtype),
                              1e3 * max(n, 8) * eps, (n, order, b_shape))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("n", [65, 1100, 4096])
def test_gpu_wide_cho_solve_equals_numpy(xp_gpu, rng, dtype, n):
    assert_cho_solve(xp_gpu, spd(rng, (), n, dtype), rng.standard_normal((n, 5)).astype(dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_wide_more_blocks_than_the_device_holds(xp_gpu, rng, dtype):
    """cho_solve of order 16384 with 16 right-hand sides: 2 passes x 4 groups x 256 panels =
    2048 blocks, far more than run at once; the tickets keep every wait on a running block."""
    cp = xp_gpu
    n = 16384
    x = cp.asarray(rng.standard_normal((n, n)).astype(dtype)) / np.sqrt(n)
    c = cp.tril(x) / 4 + cp.eye(n, dtype=dtype)
    b = cp.asarray(rng.standard_normal((n, 16)).astype(dtype))
    got = cho_solve((c, True), b)
    assert gpulinalg.last_run().backend == "gpu"
    res = c @ (c.T @ got) - b
    eps = float(np.finfo(dtype).eps)
    assert float(cp.abs(res).max()) <= 1e3 * eps * float(cp.abs(b).max()) * math.sqrt(n)


@pytest.mark.gpu
def test_gpu_wide_failures_name_the_entry(xp_gpu, rng):
    cp = xp_gpu
    t = tri(rng, (1000, 1000), np.float64)
    b = cp.ones((1000, 2))
    t[777, 777] = 0
    with pytest.raises(SingularMatrixError, match=r"entry 777"):
        solve_triangular(cp.asarray(t), b, lower=True)
    t[777, 777] = 2.0
    t[3, 950] = np.nan  # above the diagonal: not read by the solve
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        solve_triangular(cp.asarray(t), b, lower=True)
    assert np.isfinite(cp.asnumpy(solve_triangular(cp.asarray(t), b, lower=True,
                                                   check_finite=False))).all()
    t[3, 950] = 0.0
    bb = cp.ones((1000, 2))
    bb[999, 1] = cp.inf
    with pytest.raises(ValueError, match="b must not contain infs or NaNs"):
        solve_triangular(cp.asarray(t), bb, lower=True)
    t[500, 500] = 1e-30
    with pytest.warns(IllConditionedWarning):
        solve_triangular(cp.asarray(t), b, lower=True)
    t[500, 500] = 2.0  # and the workspace is at rest again: a clean solve is clean
    x = solve_triangular(cp.asarray(t), b, lower=True)
    assert np.allclose(cp.asnumpy(x), np.linalg.solve(np.tril(t), np.ones((1000, 2))))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("op", ["solve_triangular", "cho_solve"])
def test_gpu_wide_bound_is_the_host_judges(xp_gpu, library, rng, dtype, op):
    cp = xp_gpu
    t = (np.tril(rng.standard_normal((700, 700))) / 30 + 3 * np.eye(700)).astype(dtype)
    t[390, 390] = 0.05  # the bound comes from this pivot; fp32 keeps some digits
    b = cp.asarray(rng.standard_normal((700, 6)).astype(dtype))
    t = cp.asarray(t)
    got = []
    for own in (True, False):
        if not own:
            library()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = cho_solve((t, True), b) if op == "cho_solve" else \
                solve_triangular(t, b, lower=True)
        got.append((gpulinalg.last_run().details["rcond_bound"], cp.asnumpy(x)))
    (b_own, x_own), (b_lib, x_lib) = got
    assert b_own == pytest.approx(b_lib, rel=1e-6)
    tol = 1e-3 if np.dtype(dtype).itemsize <= 8 and np.dtype(dtype) != np.float64 else 1e-10
    assert np.allclose(x_own, x_lib, rtol=tol, atol=tol * np.abs(x_lib).max())


@pytest.mark.gpu
def test_gpu_wide_threads_keep_their_workspaces(xp_gpu, rng):
    """Eight threads, each on its own stream, solve at once: a workspace per thread."""
    cp = xp_gpu
    n = 3000
    t = cp.asarray(tri(rng, (n, n), np.float64))
    bs = [cp.asarray(rng.standard_normal((n, 3))) for _ in range(8)]
    refs = [cp.asnumpy(solve_triangular(t, b, lower=True)) for b in bs]
    out, errors = [None] * 8, []

    def work(i):
        try:
            with cp.cuda.Stream(non_blocking=True):
                for _ in range(5):
                    out[i] = cp.asnumpy(solve_triangular(t, bs[i], lower=True))
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for got, ref in zip(out, refs):
        assert np.allclose(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
def test_gpu_solves_run_on_the_callers_stream(xp_gpu, rng):
    """The fused solves launch on the caller's current stream (no hand-off to the thread's own):
    work queued on a user's stream before the call is seen by it, its result is ready on that
    stream, and one thread's solves queued on two streams at once, with no read-back between
    them (cho_solve without checks), keep a workspace and a summary per stream."""
    cp = xp_gpu
    n = 4096
    t = cp.asarray(tri(rng, (n, n), np.float64))
    c = t / 4 + 4 * cp.eye(n)
    b = cp.asarray(rng.standard_normal((n, 2)))
    ref_t = cp.asnumpy(solve_triangular(t, b, lower=True))
    ref_c = cp.asnumpy(cho_solve((c, True), b))
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with s1:
        b1 = cp.empty_like(b)
        b1[...] = b  # queued on s1 before the solve: the solve must see it
        got = solve_triangular(t, b1, lower=True)
        back = cp.asnumpy(got, stream=s1)
    assert np.allclose(back, ref_t, rtol=1e-12, atol=1e-12)
    outs = []
    for _ in range(4):  # no read-back: launches on s1 and s2 overlap
        for s in (s1, s2):
            with s:
                outs.append(_triangular_cuda.fused_solve(
                    c, b, np.dtype(np.float64), (False, False, 2), False, False, False,
                    ("c", "b"), squared=True))
    s1.synchronize()
    s2.synchronize()
    for x in outs:
        assert np.allclose(cp.asnumpy(x), ref_c, rtol=1e-10, atol=1e-10)


@pytest.mark.gpu
def test_gpu_wide_tags_advance_and_wrap(xp_gpu, rng):
    """The tagged words on the device: a launch never takes a word that an earlier one left
    (of another shape too), and the launch with the last tag leaves none behind."""
    cp = xp_gpu
    a, b = tri(rng, (1000, 1000), np.float64), rng.standard_normal((1000, 5))

    def solve(a, b):
        return cp.asnumpy(solve_triangular(cp.asarray(a), cp.asarray(b), lower=True))
    solve(a, b)
    assert gpulinalg.last_run().backend == "gpu"
    ws = _wide_trsm_cuda.workspace(cp, cp.cuda.Device().id, 1)
    _tags_wrap(cp, ws, solve, a, b)
