"""The LU family (solve, lu_factor, lu_solve, lu, det, slogdet, inv) on both backends, compared
with SciPy/NumPy in float64, with DESIGN §4's tolerances; the GPU engine on the emulated
cuSOLVER/cuBLAS; CuPy and torch input on a real GPU (``gpu``)."""

import warnings

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg import SingularMatrixError
from gpulinalg.decomp import det, inv, lu, lu_factor, lu_solve, slogdet, solve
from gpulinalg.decomp.lu import _lu_cuda, _lu_xp

from tests.support.cusolver_emulator import CALLS, dev, plain
from tests.support.decomp_dense_ref import DTYPES, backward_ratio, eps, host, random, solve_ratio


def _well(rng, shape, dtype):
    """Random matrices made diagonally heavy (condition near 10)."""
    a = random(rng, shape, dtype)
    return (a + 2 * shape[-1] ** 0.5 * np.eye(shape[-1])).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["C", "F", "view"])
@pytest.mark.parametrize("k", [None, 1, 3])
def test_solve_backward_error(backend, rng, dtype, order, k):
    n = 33
    a = _well(rng, (2 * n, 2 * n), dtype)[::2, ::2] if order == "view" else _well(rng, (n, n),
                                                                                  dtype)
    a = np.asfortranarray(a) if order == "F" else a
    b = random(rng, (n,) if k is None else (n, k), dtype)
    before = a.copy(), b.copy()
    x = host(solve(a, b))
    assert x.dtype == dtype and x.shape == b.shape
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])
    assert solve_ratio(a, x, b, dtype) <= 30 * n
    ref = scipy.linalg.solve(a.astype(np.complex128), b)
    assert np.allclose(x, ref, atol=1e3 * n * eps(dtype))


@pytest.mark.parametrize("assume_a", [None, "gen", "sym", "her", "pos", "diagonal",
                                      "tridiagonal", "banded", "upper triangular",
                                      "lower triangular"])
@pytest.mark.parametrize("lower", [False, True])
def test_solve_structures(backend, rng, assume_a, lower):
    n = 12
    q = random(rng, (n, n), np.complex128)
    spd = q @ q.conj().T + n * np.eye(n)
    a = {"diagonal": np.diag(np.diag(spd)), "tridiagonal": np.triu(np.tril(spd, 1), -1),
         "upper triangular": np.triu(spd), "lower triangular": np.tril(spd)}.get(assume_a, spd)
    if assume_a in ("sym", "her", "pos"):  # only the named triangle is read
        junk = np.triu(np.full((n, n), 1e3), 1) if lower else np.tril(np.full((n, n), 1e3), -1)
        given = a + junk
    else:
        given = a
    b = random(rng, (n, 2), np.complex128)
    x = host(solve(given, b, assume_a=assume_a, lower=lower))
    ref = scipy.linalg.solve(given, b, assume_a=assume_a, lower=lower)
    assert np.allclose(x, ref, atol=1e-10)


@pytest.mark.parametrize("transposed", [False, True])
def test_solve_transposed(backend, rng, transposed):
    a, b = _well(rng, (20, 20), np.float64), random(rng, (20, 3), np.float64)
    x = host(solve(a, b, transposed=transposed))
    assert np.allclose((a.T if transposed else a) @ x, b)
    with pytest.raises(NotImplementedError):
        solve(a.astype(np.complex128), b, transposed=True)


def test_solve_batched_broadcast(backend, rng):
    a = _well(rng, (3, 1, 8, 8), np.float64)
    b = random(rng, (4, 8, 2), np.float64)
    x = host(solve(a, b))
    assert x.shape == (3, 4, 8, 2)
    assert np.allclose(x, np.linalg.solve(a, b))
    one = _well(rng, (8, 8), np.float64)  # one matrix, many right-hand sides
    assert np.allclose(host(solve(one, b)), np.linalg.solve(one, b))
    xv = host(solve(a[:, 0], np.ones(8)))  # a 1-D b for every matrix
    assert xv.shape == (3, 8) and np.allclose(xv, np.linalg.solve(a[:, 0], np.ones(8)))


def test_solve_empty_and_1x1(backend):
    assert host(solve(np.empty((0, 0)), np.empty(0))).shape == (0,)
    assert host(solve(np.empty((2, 0, 0)), np.empty((2, 0, 3)))).shape == (2, 0, 3)
    assert np.allclose(host(solve(np.array([[4.0]]), np.array([2.0]))), [0.5])
    assert np.allclose(host(solve(2.0, np.arange(3.0))), np.arange(3.0) / 2)  # SciPy's b / a
    with pytest.raises(SingularMatrixError):
        solve(np.array([[0.0]]), np.ones(1))


@pytest.mark.parametrize("fn", ["solve", "inv"])
def test_singular_raises_linalgerror(backend, fn):
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(np.linalg.LinAlgError) as err:
        solve(a, np.ones(2)) if fn == "solve" else inv(a)
    assert isinstance(err.value, SingularMatrixError)
    stack = np.stack([np.eye(2), a])
    with pytest.raises(SingularMatrixError, match="singular"):
        solve(stack, np.ones(2)) if fn == "solve" else inv(stack)


@pytest.mark.parametrize("fn", ["solve", "inv"])
def test_ill_conditioned_warns_linalgwarning(backend, fn):
    a = scipy.linalg.hilbert(14)
    with pytest.warns(scipy.linalg.LinAlgWarning, match="ill-conditioned"):
        solve(a, np.ones(14)) if fn == "solve" else inv(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        solve(np.eye(3), np.ones(3)) if fn == "solve" else inv(np.eye(3))


@pytest.mark.parametrize("name", ["solve", "lu_factor", "lu", "det", "inv", "lu_solve"])
def test_check_finite(backend, name):
    a = np.eye(3)
    a[1, 1] = np.nan
    calls = {"solve": lambda: solve(a, np.ones(3)), "lu_factor": lambda: lu_factor(a),
             "lu": lambda: lu(a), "det": lambda: det(a), "inv": lambda: inv(a),
             "lu_solve": lambda: lu_solve((a, np.arange(3, dtype=np.int32)), np.ones(3))}
    with pytest.raises(ValueError, match="infs or NaNs"):
        calls[name]()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 7), (9, 5), (5, 9), (3, 6, 6), (2, 2, 4, 4)])
def test_lu_factor_and_lu(backend, rng, dtype, shape):
    a = random(rng, shape, dtype)
    before = a.copy()
    lu_, piv = (host(x) for x in lu_factor(a))
    assert lu_.dtype == dtype and piv.dtype == np.int32 and piv.shape == shape[:-2] + (
        min(shape[-2:]),)
    ref = np.stack([scipy.linalg.lu_factor(a[i])[1] for i in np.ndindex(*shape[:-2])]) \
        if len(shape) > 2 else scipy.linalg.lu_factor(a)[1]
    assert np.array_equal(piv.reshape(ref.shape), ref)
    p, l, u = (host(x) for x in lu(a))
    assert backward_ratio(a, p @ l @ u, dtype) <= 30
    pi, l2, u2 = (host(x) for x in lu(a, p_indices=True))
    assert pi.dtype == np.int32
    pl, u3 = (host(x) for x in lu(a, permute_l=True))
    assert backward_ratio(a, pl @ u3, dtype) <= 30
    assert np.array_equal(a, before)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_lu_solve(backend, rng, dtype, trans):
    a = _well(rng, (16, 16), dtype)
    b = random(rng, (3, 16, 2), dtype)
    x = host(lu_solve(lu_factor(a), b, trans=trans))
    op = {0: a, 1: a.T, 2: a.conj().T}[trans]
    assert x.shape == b.shape and solve_ratio(np.broadcast_to(op, (3, 16, 16)), x, b,
                                              dtype) <= 30 * 16


@pytest.mark.parametrize("dtype", DTYPES)
def test_det_slogdet_inv(backend, rng, dtype):
    a = _well(rng, (4, 10, 10), dtype)
    d = host(det(a))
    assert d.dtype == (np.complex128 if np.dtype(dtype).kind == "c" else np.float64)
    assert np.allclose(d, np.linalg.det(a.astype(np.complex128)), rtol=1e3 * eps(dtype))
    sign, logabs = (host(x) for x in slogdet(a))
    ref_s, ref_l = np.linalg.slogdet(a)
    assert sign.dtype == dtype and logabs.dtype == ref_l.dtype
    assert np.allclose(sign, ref_s, atol=1e2 * eps(dtype))
    assert np.allclose(logabs, ref_l, atol=1e2 * eps(dtype))
    ainv = host(inv(a))
    assert ainv.dtype == dtype
    assert backward_ratio(np.broadcast_to(np.eye(10), a.shape), a @ ainv, dtype) <= 30 * 10


def test_det_slogdet_edges(backend):
    assert isinstance(det(np.eye(3)), np.float64) and det(np.eye(3)) == 1.0
    assert det(np.zeros((2, 2))) == 0.0
    assert det(np.empty((0, 0))) == 1.0
    assert host(det(np.empty((3, 0, 0)))).shape == (3,)
    s, l = slogdet(np.array([[1.0, 2.0], [2.0, 4.0]]))
    assert s == 0 and l == -np.inf
    s, l = slogdet(np.empty((0, 0)))
    assert s == 1 and l == 0
    with pytest.raises(np.linalg.LinAlgError):
        slogdet(np.ones((2, 3)))


def test_overwrite_never_writes_read_only(backend, rng):
    a = _well(rng, (6, 6), np.float64)
    b = random(rng, (6, 2), np.float64)
    a = np.asfortranarray(a)
    a.flags.writeable = False
    b.flags.writeable = False
    before = a.copy(), b.copy()
    x = host(solve(a, b, overwrite_a=True, overwrite_b=True))
    lu_factor(a, overwrite_a=True)
    inv(a, overwrite_a=True)
    det(a, overwrite_a=True)
    lu(a, overwrite_a=True)
    lu_solve(lu_factor(a), b, overwrite_b=True)
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])
    assert np.allclose(a @ x, b)


def test_lu_factor_singular_warns(backend):
    with pytest.warns(scipy.linalg.LinAlgWarning, match="exactly zero"):
        lu_factor(np.zeros((3, 3)))


# -- the GPU engine on the emulated libraries: each route against SciPy ---------------------------

@pytest.mark.parametrize("batch", [(), (3,), (40,)])
def test_emulated_routes(emu, rng, batch):
    a = _well(rng, batch + (9, 9), np.float64)
    b = random(rng, batch + (9, 2), np.float64)
    CALLS.clear()
    x = plain(_lu_cuda.solve(dev(a), dev(b), None, False, False, False, False,
                             np.dtype(np.float64), True))
    assert np.allclose(x, np.linalg.solve(a, b))
    batched = len(batch) and batch[0] > 1  # the route table's getrf rows
    assert CALLS["getrf_batched" if batched else "getrf"] >= 1
    if batched:
        assert CALLS["getrs_batched"] >= 1
    else:  # decomp's triangular kernels take few right-hand sides; off, getrs does
        kernels = _lu_cuda._triangles_route(9, 2, np.dtype(np.float64))
        assert (CALLS["getrs"] == 0) if kernels else (CALLS["getrs"] >= 1)


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_emulated_lu_solve_by_triangles_or_getrs(emu, rng, dtype, trans, kernels):
    """``lu_solve`` through the permutation and the two triangles of the packed factor (decomp's
    triangular kernels) equals SciPy's, as ``getrs`` does with the kernels off; a zero on
    ``U``'s diagonal goes to ``getrs`` (SciPy's inf / NaN, no error)."""
    a = _well(rng, (9, 9), dtype)
    a[[0, 5]] = a[[5, 0]]  # pivots that move rows
    b = random(rng, (9, 3), dtype)
    lu_, piv = scipy.linalg.lu_factor(a)
    want = scipy.linalg.lu_solve((lu_, piv), b, trans=trans)
    with gpulinalg.config_context(custom_kernels=kernels):
        CALLS.clear()
        got = plain(_lu_cuda.lu_solve(dev(lu_), dev(piv.astype(np.int32)), dev(b), trans,
                                      False, np.dtype(dtype), False))
        by_triangles = _lu_cuda._triangles_route(9, 3, np.dtype(dtype))
        assert by_triangles is kernels
        assert CALLS["getrs"] == (0 if by_triangles else 1)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        singular = lu_.copy()
        singular[4, 4] = 0.0
        with np.errstate(all="ignore"):
            want = scipy.linalg.lu_solve((singular, piv), b, trans=trans)
        got = plain(_lu_cuda.lu_solve(dev(singular), dev(piv.astype(np.int32)), dev(b), trans,
                                      False, np.dtype(dtype), False))
        assert not np.isfinite(got).all() and not np.isfinite(want).all()


def test_emulated_in_place_and_pivot_check(emu, rng):
    a = np.asfortranarray(_well(rng, (6, 6), np.float64))
    d = np.asfortranarray(a).view(type(dev(a)))
    lu_, piv = _lu_cuda.lu_factor(d, True, np.dtype(np.float64), False)
    assert np.shares_memory(plain(lu_), plain(d))  # overwrite_a on a column-major GPU input
    with pytest.raises(ValueError, match="piv"):
        _lu_cuda.lu_solve(dev(a), dev(np.full(6, 7, np.int32)), dev(np.ones(6)), 0, False,
                          np.dtype(np.float64), False)


def test_norm1_estimate_is_a_lower_bound():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 12, 12))
    exact = np.abs(np.linalg.inv(a)).sum(axis=-2).max(axis=-1)

    def solve_(x, adjoint):
        return np.linalg.solve(np.swapaxes(a, -1, -2) if adjoint else a, x)
    est = _lu_xp.inv_norm1_estimate(solve_, 5, 12, np.float64, np)
    assert np.all(est <= exact * (1 + 1e-12)) and np.all(est >= exact / 3)


def test_fallback_on_memory_error(fake_gpu, rng):
    a, b = _well(rng, (5, 5), np.float64), np.ones(5)
    with gpulinalg.config_context(backend="gpu"), \
            gpulinalg.testing.inject_fault("oom", op="decomp.solve"), \
            pytest.warns(gpulinalg.FallbackWarning):
        x = solve(a, b)
    assert np.allclose(a @ x, b) and gpulinalg.last_run().fell_back


# -- a real GPU: CuPy and torch in, same package out -----------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [(), (300,)])
def test_gpu_cupy_in_cupy_out(xp_gpu, rng, dtype, batch):
    n = 48
    a, b = _well(rng, batch + (n, n), dtype), random(rng, batch + (n, 3), dtype)
    ca, cb = xp_gpu.asarray(a), xp_gpu.asarray(b)
    x = solve(ca, cb)
    assert isinstance(x, xp_gpu.ndarray) and gpulinalg.last_run().backend == "gpu"
    assert solve_ratio(a, x, b, dtype) <= 30 * n
    lu_, piv = lu_factor(ca)
    assert isinstance(piv, xp_gpu.ndarray) and piv.dtype == np.int32
    assert solve_ratio(a, lu_solve((lu_, piv), cb), b, dtype) <= 30 * n
    assert np.allclose(host(det(ca)), np.linalg.det(a.astype(np.complex128)),
                       rtol=1e3 * eps(dtype))
    assert backward_ratio(np.broadcast_to(np.eye(n), a.shape), a @ host(inv(ca)),
                          dtype) <= 30 * n
    p, l, u = lu(ca)
    assert backward_ratio(a, host(p) @ host(l) @ host(u), dtype) <= 30


@pytest.mark.gpu
def test_gpu_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    a, b = _well(rng, (64, 64), np.float64), random(rng, (64,), np.float64)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    x = solve(ta, tb)
    assert isinstance(x, torch.Tensor) and x.device.type == "cuda"
    assert np.allclose(x.cpu().numpy(), np.linalg.solve(a, b))
    sign, logabs = slogdet(ta)
    ref = torch.linalg.slogdet(ta)
    assert torch.allclose(sign, ref.sign) and torch.allclose(logabs, ref.logabsdet)
