"""Stacks of matrices: every route of the table in ``decomp._gpu._batched_plan`` gives the results
of the per-matrix calls, and a failing slice is named by its batch index.

Three layers: the table itself; the GPU engines on the CPU emulation of cuSOLVER/cuBLAS (each
route forced in turn, compared with the per-matrix CPU engine); and ``gpu``-marked tests on the
device (both sides of every limit, fp32 and fp64)."""

import math

import numpy as np
import pytest

import gpulinalg
from gpulinalg import NotPositiveDefiniteError
from gpulinalg.decomp._gpu import _batched_plan
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.cholesky import _cholesky_host
from gpulinalg.decomp.qr import _qr_host
from gpulinalg.decomp.svd import _svd_host
from gpulinalg.decomp.triangular import _triangular_host
from gpulinalg.decomp.qr import _qr_cuda
from gpulinalg.decomp.svd import _svd_cuda
from gpulinalg.decomp.triangular import _triangular_cuda
from gpulinalg.decomp import cho_factor, cho_solve, cholesky, qr, solve_triangular, svd

from tests.support.cusolver_emulator import CALLS, dev, plain

ROUTES = {"potrf": ("batched", "looped", "fused", "stream"),
          "trsm": ("batched", "looped", "fused", "stream", "wide"),
          "geqrf": ("batched", "looped", "fused"),
          "gesvd": ("batched", "jacobi", "looped", "fused"),
          "getrf": ("batched", "looped")}


def spd_stack(rng, batch, n, dtype):
    x = rng.standard_normal(batch + (n, n))
    a = x @ x.swapaxes(-1, -2) / n + np.eye(n)
    return a.astype(dtype)


def tol(dtype):
    return 2e-4 if np.finfo(np.dtype(dtype)).bits == 32 else 1e-10


@pytest.fixture
def force(monkeypatch):
    """``force(op, route)``: every stack of ``op`` takes ``route`` (for ``geqrf``, tall
    matrices too: CholeskyQR2, ``TALL_QR``, off)."""
    def set_route(op, name):
        monkeypatch.setitem(_batched_plan.TABLE, op, ((math.inf, 2, name),))
        if op == "geqrf":
            monkeypatch.setattr(_batched_plan, "TALL_QR", (math.inf, 0))
    return set_route


# -- the table ------------------------------------------------------------------------------

def test_one_matrix_is_looped_unless_the_wide_solve_takes_it():
    for op in _batched_plan.TABLE:
        for n in (1, 8, 64, 512, 4096):
            assert _batched_plan.route(op, n, 1) == "looped"
            want = "wide" if op == "trsm" else "looped"
            assert _batched_plan.route(op, n, 1, wide=True) == want
    assert _batched_plan.route("trsm", 16385, 1, wide=True) == "looped"  # past its row
    for n, batch in ((4096, 2), (512, 8), (8, 4096)):  # stacks never take it
        assert _batched_plan.route("trsm", n, batch, wide=True) != "wide"


def test_table_rows_name_known_routes():
    for op, rows in _batched_plan.TABLE.items():
        assert rows[-1][0] == math.inf, op  # every order has a route
        assert {r[2] for r in rows} <= set(ROUTES[op]), op


@pytest.mark.parametrize("n, batch, want", [(8, 4096, "fused"), (32, 2, "fused"),
                                            (64, 2, "fused"), (65, 264, "fused"),
                                            (128, 264, "fused"), (65, 265, "batched"),
                                            (128, 512, "batched"), (129, 2, "batched"),
                                            (129, 4096, "batched"), (256, 64, "batched"),
                                            (512, 200, "batched"), (512, 2, "batched"),
                                            (513, 11, "looped"), (768, 2, "looped"),
                                            (768, 12, "batched"),
                                            (1024, 8, "looped"), (1024, 16, "batched"),
                                            (2048, 16, "looped")])
def test_potrf_limits(n, batch, want):
    assert _batched_plan.route("potrf", n, batch, dtype=np.dtype("float64")) == want


def test_potrf_fused_to_128_but_complex128():
    assert _batched_plan.route("potrf", 128, 4096, dtype="complex64") == "fused"
    # float32: the fused kernel up to its fourth wave of matrices, potrfBatched from its fifth
    assert _batched_plan.route("potrf", 128, 528, dtype="float32") == "fused"
    assert _batched_plan.route("potrf", 128, 529, dtype="float32") == "batched"
    assert _batched_plan.route("potrf", 64, 4096, dtype="float32") == "fused"
    # float64: the fused kernel up to its second wave, potrfBatched from its third
    assert _batched_plan.route("potrf", 128, 264, dtype="float64") == "fused"
    assert _batched_plan.route("potrf", 128, 265, dtype="float64") == "batched"
    assert _batched_plan.route("potrf", 64, 4096, dtype="float64") == "fused"
    assert _batched_plan.route("potrf", 128, 512, dtype="complex128") == "batched"
    # without the kernels (or their fit) the same stacks take potrfBatched
    assert _batched_plan.route("potrf", 128, 100, fused=False, dtype="float32") == "batched"


def test_potrf_fused_limit_follows_the_kernel():
    from gpulinalg.decomp._kernels import _fused_cuda
    for dtype in ("float32", "float64", "complex64", "complex128"):
        top = 64 if dtype == "complex128" else 128
        assert _fused_cuda.fits(top, dtype, "potrf") and not _fused_cuda.fits(top + 1, dtype,
                                                                               "potrf")
        fits = _fused_cuda.fits(top + 1, dtype, "potrf")
        assert _batched_plan.route("potrf", top + 1, 4096, fused=fits, dtype=dtype) == "batched"
        fused_top = 64 if dtype == "complex128" else 128  # the table's choice
        assert _batched_plan.route("potrf", fused_top, 264, fused=True, dtype=dtype) == "fused"
    assert _fused_cuda.fits(64, "float32") and not _fused_cuda.fits(65, "float32")
    assert _fused_cuda.fits(32, "complex128") and not _fused_cuda.fits(33, "complex128")


def test_fused_rows_need_the_kernel_and_few_right_hand_sides():
    from gpulinalg.decomp._kernels import _fused_cuda
    assert _batched_plan.route("potrf", 32, 100, fused=False) == "batched"
    assert _batched_plan.route("trsm", 32, 100, rhs=_batched_plan.FUSED_RHS) == "fused"
    assert _batched_plan.route("trsm", 32, 100, rhs=_batched_plan.FUSED_RHS + 1) == "batched"
    assert _fused_cuda.fits(64, np.float64) and not _fused_cuda.fits(65, np.float32)
    assert _fused_cuda.fits(32, np.complex128) and not _fused_cuda.fits(33, np.complex128)
    assert not _fused_cuda.fits(8, np.float16)


def test_small_qr_stacks_need_numbers():
    assert _batched_plan.route("geqrf", 200, 8) == "looped"
    assert _batched_plan.route("geqrf", 120, 64) == "batched"
    assert _batched_plan.route("geqrf", 256, 64) == "looped"  # lanes won 2x on the H200


def test_few_large_triangular_solves_stay_batched_to_2048():
    assert _batched_plan.route("trsm", 2048, 8) == "batched"  # 1.8x the loop on the H200
    assert _batched_plan.route("trsm", 4096, 8) == "looped"
    assert _batched_plan.route("trsm", 4096, 9) == "batched"
    assert _batched_plan.route("geqrf", 16, 2) == "fused"  # unmeasured (._fused_qr_cuda)
    assert _batched_plan.route("geqrf", 16, 2, fused=False) == "batched"


# -- the GPU engines on the emulation ---------------------------------------------------------


@pytest.mark.parametrize("route", ["batched", "looped"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_emulated_cholesky_stack_equals_slices(emu, force, rng, route, lower, dtype):
    force("potrf", route)
    a = spd_stack(rng, (2, 3), 70, dtype)
    CALLS.clear()
    got = plain(_cholesky_cuda.cholesky(dev(a), lower, False, True, np.dtype(dtype)))
    assert (CALLS["potrf_batched"] == 1) == (route == "batched")
    for idx in np.ndindex(2, 3):
        ref = _cholesky_host.cholesky(a[idx], lower, False, True, np.dtype(dtype))
        assert np.allclose(got[idx], ref, rtol=tol(dtype), atol=tol(dtype))


@pytest.mark.parametrize("route", ["batched", "looped"])
def test_emulated_cholesky_names_the_failing_slice(emu, force, rng, route):
    force("potrf", route)
    a = spd_stack(rng, (3, 2), 12, np.float64)
    a[2, 1, 5, 5] = -50.0
    with pytest.raises(NotPositiveDefiniteError) as info:
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"))
    assert info.value.batch_index == (2, 1) and info.value.minor == 6


@pytest.mark.parametrize("route", ["batched", "looped"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_emulated_cho_solve_stack_equals_slices(emu, force, rng, route, lower, dtype):
    force("trsm", route)
    a = spd_stack(rng, (4,), 20, dtype)
    c = np.stack([_cholesky_host.cholesky(x, lower, False, False, np.dtype(dtype)) for x in a])
    b = rng.standard_normal((4, 20, 3)).astype(dtype)
    CALLS.clear()
    got = plain(_cholesky_cuda.cho_solve(dev(c), lower, dev(b), False, np.dtype(dtype)))
    assert (CALLS["trsm_batched"] == 2) == (route == "batched")
    for i in range(4):
        ref = _cholesky_host.cho_solve(c[i], lower, b[i], False, np.dtype(dtype))
        assert np.allclose(got[i], ref, rtol=tol(dtype), atol=tol(dtype))


@pytest.mark.parametrize("route", ["batched", "looped"])
@pytest.mark.parametrize("trans", [0, 1])
def test_emulated_solve_triangular_stack_equals_slices(emu, force, rng, route, trans):
    force("trsm", route)
    a = np.tril(rng.standard_normal((3, 16, 16))) + 4 * np.eye(16)
    b = rng.standard_normal((3, 16, 2))
    got = plain(_triangular_cuda.solve_triangular(dev(a), dev(b), trans, True, False, False,
                                                  np.dtype("f8")))
    for i in range(3):
        ref = _triangular_host.solve_triangular(a[i], b[i], trans, True, False, False,
                                            np.dtype("f8"))
        assert np.allclose(got[i], ref)


@pytest.mark.parametrize("route", ["batched", "looped"])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("mode", ["economic", "r", "full"])
def test_emulated_qr_checks_finiteness_in_its_copy(emu, force, rng, route, order, mode):
    """SciPy's check_finite on the GPU engine: flagged while a is copied column-major, read
    back once with the codes at the end; without the check nothing is read back."""
    force("geqrf", route)
    a = rng.standard_normal((3, 40, 12))
    a = np.asfortranarray(a) if order == "F" else a
    for finite in (False, True):
        CALLS.clear()
        out = _qr_cuda.qr(dev(a), mode, False, None, False, np.dtype("f8"), finite)
        assert CALLS["get"] == int(finite)
        ref = _qr_host.qr(a[1], mode, False, None, False, np.dtype("f8"))
        assert np.allclose(plain(out[0] if mode == "r" else out.R)[1],
                           ref[0] if mode == "r" else ref.R)
    a[2, 30, 5] = np.inf
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        _qr_cuda.qr(dev(a), mode, False, None, False, np.dtype("f8"), True)
    _qr_cuda.qr(dev(a), mode, False, None, False, np.dtype("f8"), False)  # no check: runs


@pytest.mark.parametrize("route", ["batched", "looped"])
@pytest.mark.parametrize("shape", [(5, 9, 4), (5, 4, 9), (5, 6, 6)])
@pytest.mark.parametrize("mode", ["economic", "r", "raw"])
def test_emulated_qr_stack_equals_slices(emu, force, rng, route, shape, mode):
    force("geqrf", route)
    a = rng.standard_normal(shape)
    CALLS.clear()
    out = _qr_cuda.qr(dev(a), mode, False, None, False, np.dtype("f8"))
    assert (CALLS["geqrf_batched"] == 1) == (route == "batched")
    for i in range(shape[0]):
        ref = _qr_host.qr(a[i], mode, False, None, False, np.dtype("f8"))
        if mode == "raw":  # LAPACK's and cuSOLVER's reflectors agree
            assert np.allclose(plain(out[0][0])[i], ref[0][0])
            assert np.allclose(plain(out[0][1])[i], ref[0][1])
        elif mode == "r":
            assert np.allclose(plain(out[0])[i], ref[0])
        else:
            assert np.allclose(plain(out.Q)[i], ref.Q) and np.allclose(plain(out.R)[i], ref.R)


@pytest.mark.parametrize("route", ["batched", "jacobi", "looped"])
def test_emulated_svd_stack_equals_slices(emu, force, rng, route):
    force("gesvd", route)
    a = rng.standard_normal((4, 12, 7))
    CALLS.clear()
    u, s, vh = (plain(x) for x in _svd_cuda.svd(dev(a), False, True, "auto", np.dtype("f8")))
    assert (CALLS["gesvdj_batched"] == 1) == (route == "batched")
    for i in range(4):
        s_ref = np.linalg.svd(a[i], compute_uv=False)
        assert np.allclose(s[i], s_ref)
        assert np.allclose((u[i] * s[i]) @ vh[i], a[i])


def test_emulated_medium_svd_stack_uses_jacobi_without_verify(emu, rng):
    a = rng.standard_normal((2, 70, 40))
    CALLS.clear()
    u, s, vh = (plain(x) for x in _svd_cuda.svd(dev(a), False, True, "auto", np.dtype("f8")))
    assert CALLS["gesvdp"] == 0 and CALLS["gesvd"] == 0
    for i in range(2):
        assert np.allclose((u[i] * s[i]) @ vh[i], a[i])


# -- the public functions on the CPU ----------------------------------------------------------

def test_cpu_batch_names_the_failing_slice(rng):
    a = spd_stack(rng, (4,), 10, np.float64)
    a[1, 3, 3] = -1.0
    with gpulinalg.config(backend="cpu"), pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(a)
    assert info.value.batch_index == (1,) and info.value.minor == 4


# -- the device ---------------------------------------------------------------------------------

GPU_CASES = [("potrf", 8, 64), ("potrf", 64, 32), ("potrf", 512, 6), ("potrf", 1100, 2),
             ("trsm", 8, 64), ("trsm", 512, 6), ("trsm", 1100, 2)]


def _both_routes(op):
    return ROUTES[op][:2] + (("fused",) if op in ("potrf", "trsm") else ()) \
        + (("stream",) if op == "trsm" else ())


@pytest.mark.gpu
@pytest.mark.parametrize("op, n, batch", GPU_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_stack_equals_slices(xp_gpu, force, rng, op, n, batch, dtype):
    cp = xp_gpu
    a = cp.asarray(spd_stack(rng, (batch,), n, dtype))
    b = cp.asarray(rng.standard_normal((batch, n, 3)).astype(dtype))
    scale = 50 * n * np.finfo(dtype).eps
    for route in _both_routes(op):
        force(op, route)
        if op == "potrf":
            got = cholesky(a, lower=True)
            for i in (0, batch - 1):
                one = cholesky(a[i], lower=True)
                assert float(cp.abs(got[i] - one).max()) <= scale * float(cp.abs(one).max())
        else:
            c = cho_factor(a, lower=True)
            got = cho_solve(c, b)
            tri = solve_triangular(c[0], b, lower=True)
            for i in (0, batch - 1):
                one = cho_solve((c[0][i], True), b[i])
                assert float(cp.abs(got[i] - one).max()) <= scale * float(cp.abs(one).max()) * n
                one_t = solve_triangular(c[0][i], b[i], lower=True)
                assert float(cp.abs(tri[i] - one_t).max()) <= \
                    scale * float(cp.abs(one_t).max()) * n


@pytest.mark.gpu
@pytest.mark.parametrize("route", ["batched", "looped", "fused"])
@pytest.mark.parametrize("n", [16, 300])
def test_gpu_failing_slice_index(xp_gpu, force, rng, route, n):
    force("potrf", route)
    a = spd_stack(rng, (3, 4), n, np.float64)
    a[2, 1, 7, 7] = -100.0
    with gpulinalg.config(backend="gpu"), pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(xp_gpu.asarray(a))
    assert info.value.batch_index == (2, 1) and info.value.minor == 8


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(64, 16, 16), (32, 200, 100), (4, 600, 300)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_qr_svd_stack_equals_slices(xp_gpu, rng, shape, dtype):
    cp = xp_gpu
    a = cp.asarray(rng.standard_normal(shape).astype(dtype))
    q, r = qr(a, mode="economic")
    u, s, vh = svd(a, full_matrices=False)
    eps = float(np.finfo(dtype).eps)
    for i in (0, shape[0] - 1):
        q1, r1 = qr(a[i], mode="economic")
        assert float(cp.abs(cp.abs(r[i]) - cp.abs(r1)).max()) <= 100 * shape[1] * eps * \
            float(cp.abs(r1).max())
        assert float(cp.abs(q[i] @ r[i] - a[i]).max()) <= 100 * shape[1] * eps * \
            float(cp.abs(a[i]).max())
        s1 = svd(a[i], compute_uv=False)
        assert float(cp.abs(s[i] - s1).max()) <= 100 * shape[1] * eps * float(s1[0])
        back = float(cp.linalg.norm((u[i] * s[i]) @ vh[i] - a[i]) / cp.linalg.norm(a[i]))
        assert back <= 50 * shape[1] * eps


def test_emulated_nonfinite_diagonal_is_marked_once(emu):
    w = np.stack([np.eye(6)] * 3)
    w[1, 4, 4] = np.nan
    w[1, 5, 5] = np.inf
    w[2, 2, 2] = np.nan
    info = dev(np.array([0, 0, 3], dtype=np.int32))
    _cholesky_cuda.mark_nonfinite(dev(w).transpose(0, 2, 1), info)
    assert list(plain(info)) == [0, _cholesky_cuda.NONFINITE + 4, 3]  # potrf's code stays


@pytest.mark.parametrize("a_shape, b_shape", [((6, 6), (6,)), ((3, 6, 6), (6, 2)),
                                              ((3, 6, 6), (2, 1, 6, 4)), ((2, 1, 6, 6), (3, 6, 1))])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("unit", [False, True])
def test_emulated_fused_conditioning_figures_equal_generic(emu, rng, a_shape, b_shape, dtype,
                                                           unit):
    from gpulinalg.decomp.triangular import _triangular_xp
    a = (rng.standard_normal(a_shape) + 3 * np.eye(6)).astype(dtype)
    a[(0,) * (len(a_shape) - 2) + (2, 2)] = 0  # a zero on a diagonal
    b = rng.standard_normal(b_shape).astype(dtype)
    x = np.asarray(_triangular_host.solve_triangular(np.tril(a) + np.eye(6), b, 0, True, False,
                                                 False, np.dtype(dtype)))
    want = _triangular_xp.figures(a, _triangular_xp.rhs_scale(b, np), x, unit, np)
    CALLS.clear()
    got = _triangular_cuda.figures(dev(a), dev(b), dev(x), unit)
    assert CALLS["tri_figures"] == (2 if unit else 3)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.allclose(g, w)


def test_emulated_zero_diagonal_names_the_slice(emu, rng):
    from gpulinalg import SingularMatrixError
    a = np.tril(rng.standard_normal((3, 8, 8))) + 4 * np.eye(8)
    a[2, 5, 5] = 0
    with pytest.raises(SingularMatrixError, match=r"batch entry \(2,\).*entry 5"):
        _triangular_cuda.solve_triangular(dev(a), dev(np.ones((3, 8, 1))), 0, True, False,
                                          False, np.dtype("f8"), check=True)


def test_lanes_table():
    assert _batched_plan.lanes("orgqr", 256, 64) == 4
    assert _batched_plan.lanes("orgqr", 256, 1) == 1
    assert _batched_plan.lanes("geqrf", 4096, 8) == 4  # large panels leave the GPU idle too
    assert _batched_plan.lanes("potrf", 2048, 2) == 2  # never more lanes than matrices
    assert _batched_plan.lanes("gesvdj", 2048, 8) == 1  # past its row: the caller's stream
    assert _batched_plan.lanes("trsm", 64, 64) == 1  # no row at all


@pytest.mark.parametrize("shape", [(6, 40, 30), (3, 30, 40)])
def test_emulated_stream_parallel_loops_equal_slices(emu, force, monkeypatch, rng, shape):
    monkeypatch.setitem(_batched_plan.LANES, "geqrf", ((math.inf, 4),))
    force("geqrf", "looped")
    force("gesvd", "jacobi")
    force("potrf", "looped")
    a = rng.standard_normal(shape)
    spd = spd_stack(rng, (shape[0],), 30, np.float64)
    CALLS.clear()
    out = _qr_cuda.qr(dev(a), "economic", False, None, False, np.dtype("f8"))
    u, s, vh = (plain(x) for x in _svd_cuda.svd(dev(a), False, True, "auto", np.dtype("f8")))
    assert CALLS["lane_stream"] == 3 * shape[0]  # geqrf, orgqr and gesvdj loops, every item
    c = plain(_cholesky_cuda.cholesky(dev(spd), True, False, True, np.dtype("f8"), True))
    assert CALLS["lane_stream"] == 4 * shape[0]  # and the Xpotrf loop
    for i in range(shape[0]):
        ref = _qr_host.qr(a[i], "economic", False, None, False, np.dtype("f8"))
        assert np.allclose(plain(out.Q)[i], ref.Q) and np.allclose(plain(out.R)[i], ref.R)
        assert np.allclose((u[i] * s[i]) @ vh[i], a[i])
        assert np.allclose(c[i], np.linalg.cholesky(spd[i]))


def test_emulated_qr_copies_c_ordered_input_by_tiles(emu, rng):
    a = rng.standard_normal((2, 100, 70))
    CALLS.clear()
    out = _qr_cuda.qr(dev(a), "economic", False, None, False, np.dtype("f8"))
    assert CALLS["transpose_copy"] == 1
    for i in range(2):
        ref = _qr_host.qr(a[i], "economic", False, None, False, np.dtype("f8"))
        assert np.allclose(plain(out.Q)[i], ref.Q) and np.allclose(plain(out.R)[i], ref.R)


def test_emulated_column_major_factor_stack_is_not_copied(emu):
    c = dev(np.ascontiguousarray(np.tril(np.ones((3, 5, 5)) + 4 * np.eye(5)).swapaxes(-1, -2))
            ).swapaxes(-1, -2)
    w = _triangular_cuda.stack_matrices(c, (3,), np.dtype("f8"))
    assert w.data.ptr == c.data.ptr and w.strides == c.strides


# -- one synchronization per call, check_finite included (issue #16's per-call floor) --------

@pytest.mark.parametrize("route", ["batched", "looped"])
def test_emulated_cholesky_checks_finite_in_its_one_read_back(emu, force, rng, route):
    force("potrf", route)
    a = spd_stack(rng, (4,), 8, np.float64)
    CALLS.clear()
    _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    assert CALLS["get"] == 1 and CALLS["flag_nonfinite"] == 1
    a[2, 0, 7] = np.nan  # the triangle potrf does not read: SciPy's check still refuses it
    CALLS.clear()
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"), True)
    assert CALLS["get"] == 1
    got = plain(_cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8")))
    assert np.isfinite(got[2]).all()  # finite=False: the upper triangle is not read


@pytest.mark.parametrize("route", ["batched", "looped"])
@pytest.mark.parametrize("bad", [None, "c", "b"])
def test_emulated_solves_check_finite_in_their_one_read_back(emu, force, rng, route, bad):
    force("trsm", route)
    c = np.tril(rng.standard_normal((3, 8, 8))) + 4 * np.eye(8)
    b = rng.standard_normal((3, 8, 2))
    if bad == "c":
        c[1, 0, 5] = np.inf
    elif bad == "b":
        b[2, 3, 1] = np.nan
    for solve in (lambda: _cholesky_cuda.cho_solve(dev(c), True, dev(b), False,
                                                   np.dtype("f8"), True, True),
                  lambda: _triangular_cuda.solve_triangular(dev(c), dev(b), 0, True, False,
                                                            False, np.dtype("f8"), True, True)):
        CALLS.clear()
        if bad is None:
            solve()
        else:
            name = bad if solve.__code__.co_names[0] == "_cholesky_cuda" or bad == "b" else "a"
            with pytest.raises(ValueError, match=f"{name} must not contain infs or NaNs"):
                solve()
        assert CALLS["get"] == 1


def test_emulated_pointer_arrays_are_reused(emu):
    from gpulinalg.decomp._gpu import _cusolver_cuda
    w = dev(np.zeros((5, 4, 4)))
    p1, p2 = _cusolver_cuda.pointer_array(w), _cusolver_cuda.pointer_array(w)
    assert p1 is p2
    assert list(plain(p1)) == [w.ctypes.data + i * 128 for i in range(5)]


def test_gpu_input_defers_check_finite_to_the_engine(monkeypatch):
    """The api leaves SciPy's check of GPU arrays to the engine (``finite=True``); host
    arrays are checked up front as before, and the CPU engine checks a deferred one."""
    from gpulinalg.decomp.cholesky import _cholesky_api
    seen = []
    monkeypatch.setattr(_cholesky_api._arrays, "on_gpu", lambda x: True)
    def front_door(op, *plan_args, key=None, lead=()):  # the planner's Op, run on the CPU
        op = op(*plan_args) if callable(op) else op
        seen.append(op.args[-1])
        return op.cpu_fn(*op.args)
    monkeypatch.setattr(_cholesky_api._dispatch, "dispatch", front_door)
    a = np.eye(3)
    a[0, 2] = np.nan
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        cholesky(a, lower=True)
    assert seen == [True]


def test_emulated_small_svd_stack_checks_finite_and_signs_in_one_pass(emu, force, rng):
    force("gesvd", "batched")
    a = rng.standard_normal((6, 9, 5))
    CALLS.clear()
    got = _svd_cuda.svd(dev(a), False, True, "auto", np.dtype("f8"), "gesdd", False, True)
    assert CALLS["get"] == 1 and CALLS["svd_signs"] == 1  # one read-back, one sign kernel
    ref = _svd_host.svd(a, False, True, "auto", np.dtype("f8"))
    for g, r in zip(got, ref):
        assert np.allclose(plain(g), r, atol=1e-10)
    a[4, 2, 3] = -np.inf
    CALLS.clear()
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        _svd_cuda.svd(dev(a), False, True, "auto", np.dtype("f8"), "gesdd", False, True)
    assert CALLS["get"] == 1
