"""gpulinalg.decomp.lstsq / pinv on both backends against SciPy; the GPU engine on the emulated
cuSOLVER; gpu-marked tests with CuPy and torch inputs."""

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg.decomp import LstsqResult, lstsq, pinv
from gpulinalg.decomp.lstsq import _lstsq_cuda, _lstsq_host

from tests.support.cusolver_emulator import CALLS, dev, plain
from tests.support.decomp_dense_ref import DTYPES, eps, host, random, with_singular_values

DRIVERS = [None, "gelsd", "gelsy", "gelss"]


def _residual(a, x, b):
    a, x, b = (host(t).astype(np.complex128) for t in (a, x, b))
    r = b - (a @ x if x.ndim == a.ndim else (a @ x[..., None])[..., 0])
    return np.linalg.norm(r)


def _tol(dtype):
    return 1e-3 if eps(dtype) > 1e-10 else 1e-9


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,k", [((30, 8), None), ((30, 8), 3), ((8, 30), 2), ((12, 12), 1),
                                     ((1, 1), None)])
@pytest.mark.parametrize("driver", DRIVERS)
def test_lstsq_against_scipy(backend, rng, dtype, shape, k, driver):
    m, n = shape
    a = random(rng, shape, dtype)
    b = random(rng, (m,) if k is None else (m, k), dtype)
    res = lstsq(a, b, lapack_driver=driver)
    ref = scipy.linalg.lstsq(a, b, lapack_driver=driver)
    assert isinstance(res, LstsqResult) and len(res) == 4
    x = host(res.x)
    assert x.shape == ref[0].shape and x.dtype == ref[0].dtype
    assert _residual(a, x, b) <= 10 * max(_residual(a, ref[0], b), eps(dtype) * np.linalg.norm(b))
    assert int(res.rank) == int(ref[2])
    assert np.shape(host(res.residues)) == np.shape(ref[1])
    assert np.allclose(host(res.residues), ref[1], rtol=_tol(dtype) * 10, atol=_tol(dtype))
    if ref[3] is None:
        assert res.s is None
    else:
        assert np.allclose(host(res.s), ref[3], rtol=_tol(dtype), atol=_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(40, 10), (10, 40), (20, 20)])
@pytest.mark.parametrize("driver", DRIVERS)
def test_lstsq_rank_deficient(backend, rng, dtype, shape, driver):
    m, n = shape
    s = np.linspace(2.0, 1.0, min(m, n))
    s[min(m, n) // 2:] = 0
    a = with_singular_values(rng, m, n, s, dtype)
    b = random(rng, (m, 2), dtype)
    cond = 1e-4 if eps(dtype) > 1e-10 else 1e-10
    x, res, rank, sv = lstsq(a, b, cond=cond, lapack_driver=driver)
    ref = scipy.linalg.lstsq(a, b, cond=cond, lapack_driver=driver)
    assert int(rank) == min(m, n) // 2 == int(ref[2])
    assert host(res).size == 0
    assert np.allclose(host(x), ref[0], atol=50 * _tol(dtype))  # the minimum-norm solution


@pytest.mark.parametrize("shape,bshape", [((3, 20, 5), (3, 20, 2)), ((2, 3, 9, 4), (9,)),
                                          ((4, 6, 9), (4, 6, 1)), ((12, 4), (3, 12, 2))])
def test_lstsq_batched(backend, rng, shape, bshape):
    a, b = random(rng, shape, np.float64), random(rng, bshape, np.float64)
    x, res, rank, s = lstsq(a, b)
    vec = len(bshape) == 1
    batch = np.broadcast_shapes(shape[:-2], () if vec else bshape[:-2])
    for idx in np.ndindex(*batch):
        ai = a[idx[len(batch) - len(shape) + 2:]] if len(shape) > 2 else a
        bi = b if vec else b[idx[len(batch) - len(bshape) + 2:]]
        ref = scipy.linalg.lstsq(ai, bi)
        assert np.allclose(host(x)[idx], ref[0], atol=1e-9)
        assert int(host(rank)[idx]) == int(ref[2])
        assert np.allclose(host(s)[idx], ref[3])
        if np.size(ref[1]):
            assert np.allclose(host(res)[idx], ref[1])


@pytest.mark.parametrize("shape,bshape", [((0, 3), (0,)), ((3, 0), (3,)), ((3, 0), (3, 2)),
                                          ((0, 0), (0, 2))])
def test_lstsq_empty(backend, shape, bshape):
    b = np.ones(bshape)
    x, res, rank, s = lstsq(np.zeros(shape), b)
    ref = scipy.linalg.lstsq(np.zeros(shape), b)
    assert host(x).shape == ref[0].shape and rank == 0 and host(s).size == 0
    assert np.allclose(host(res), ref[1])


@pytest.mark.parametrize("layout", ["C", "F", "view"])
def test_lstsq_layouts_and_inputs_unmodified(backend, rng, layout):
    base = random(rng, (60, 20), np.float64)
    a = {"C": base, "F": np.asfortranarray(base), "view": base[::2, ::2]}[layout]
    b = random(rng, (a.shape[0], 3), np.float64)[:, ::-1]
    a0, b0 = a.copy(), b.copy()
    x = host(lstsq(a, b)[0])
    assert np.array_equal(a, a0) and np.array_equal(b, b0)
    assert np.allclose(x, scipy.linalg.lstsq(a0, b0)[0])


def test_lstsq_read_only_with_overwrite(backend, rng):
    a, b = random(rng, (9, 4), np.float64), random(rng, (9, 2), np.float64)
    ra, rb = a.copy(), b.copy()
    ra.flags.writeable = False
    rb.flags.writeable = False
    x = host(lstsq(ra, rb, overwrite_a=True, overwrite_b=True)[0])
    assert np.array_equal(ra, a) and np.array_equal(rb, b)
    assert np.allclose(x, scipy.linalg.lstsq(a, b)[0])


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_lstsq_and_pinv_check_finite(backend, bad):
    a = np.eye(3)
    a[0, 1] = bad
    for call in (lambda: lstsq(a, np.ones(3)), lambda: lstsq(np.eye(3), np.full(3, bad)),
                 lambda: pinv(a)):
        with pytest.raises(ValueError):
            call()


def test_lstsq_errors_as_scipy(backend):
    with pytest.raises(ValueError, match="Shape mismatch"):
        lstsq(np.eye(3), np.ones(4))
    with pytest.raises(ValueError, match="not found"):
        lstsq(np.eye(3), np.ones(3), lapack_driver="gels")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(9, 6), (6, 9), (7, 7), (3, 5, 4), (1, 1)])
def test_pinv_against_scipy(backend, rng, dtype, shape):
    a = random(rng, shape, dtype)
    if shape[-1] > 2:
        a[..., -1] = a[..., 0]  # rank deficient
    p, rank = pinv(a, return_rank=True)
    p = host(p)
    assert p.shape == shape[:-2] + (shape[-1], shape[-2]) and p.dtype == dtype
    for idx in np.ndindex(*shape[:-2]):
        ref, rref = scipy.linalg.pinv(a[idx], return_rank=True)
        assert np.allclose(p[idx], ref, atol=100 * _tol(dtype))
        assert int(np.asarray(host(rank))[idx]) == int(rref)
    with pytest.raises(ValueError, match="positive"):
        pinv(a, atol=-1.0)


def test_pinv_thresholds_and_empty(backend, rng):
    a = np.diag([1.0, 1e-3, 1e-9])
    assert np.allclose(host(pinv(a, atol=1e-6)), np.diag([1.0, 1e3, 0.0]))
    assert np.allclose(host(pinv(a, rtol=1e-2)), np.diag([1.0, 0.0, 0.0]))
    assert host(pinv(np.zeros((0, 3)))).shape == (3, 0)


# -- the GPU engine on the emulated cuSOLVER -------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,bshape", [((9, 4), (9,)), ((9, 4), (9, 2)), ((4, 9), (4, 3)),
                                          ((3, 7, 5), (3, 7, 2)), ((6, 6), (6, 1))])
@pytest.mark.parametrize("driver", ["gelsd", "gelsy", "gelss"])
@pytest.mark.parametrize("rank_deficient", [False, True])
def test_emulated_engine_matches_host(emu, rng, dtype, shape, bshape, driver, rank_deficient):
    a = random(rng, shape, dtype)
    if rank_deficient:
        a[..., -1] = a[..., 0]
    b = random(rng, bshape, dtype)
    cond = 1e-6 if rank_deficient else None
    out = _lstsq_cuda.lstsq(dev(a), dev(b), cond, driver, np.dtype(dtype))
    ref = _lstsq_host.lstsq(a, b, cond, driver, np.dtype(dtype))
    tol = _tol(dtype)
    assert np.allclose(plain(out.x), ref.x, atol=tol)
    assert np.shape(plain(out.residues)) == np.shape(ref.residues)
    assert np.allclose(plain(out.residues), ref.residues, atol=tol)
    assert np.array_equal(np.asarray(plain(out.rank)), np.asarray(ref.rank))
    assert (out.s is None) == (ref.s is None)
    if ref.s is not None:
        assert np.allclose(plain(out.s), ref.s, atol=tol)


def test_emulated_routes(emu, rng):
    a, b = random(rng, (40, 6), np.float64), random(rng, (40,), np.float64)
    CALLS.clear()
    _lstsq_cuda.lstsq(dev(a), dev(b), None, "gelsy", np.dtype(np.float64))
    assert CALLS["geqrf"] == 1 and CALLS["ormqr"] == 1
    assert gpulinalg.last_run() is not None
    a[:, 1] = a[:, 0] * (1 + 1e-17)  # R's diagonal shows the deficiency: the SVD of R
    out = _lstsq_cuda.lstsq(dev(a), dev(b), None, "gelsy", np.dtype(np.float64))
    assert int(out.rank) == 5


def test_small_svd_route_rank_deficient_complex(emu, rng):
    """A stack of rank-deficient complex triangular factors (the R of a QR) through the SVD
    the engine takes: finite results (see _lstsq_cuda.JACOBI_MAX)."""
    a = random(rng, (3, 7, 5), np.complex128)
    a[..., -1] = a[..., 0]
    r = np.linalg.qr(a)[1]
    u, s, vh = (plain(x) for x in _lstsq_cuda._svd(dev(r), np.dtype(np.complex128)))
    assert np.isfinite(s).all() and np.isfinite(u).all() and np.isfinite(vh).all()


@pytest.mark.parametrize("shape", [(9, 4), (4, 9), (2, 5, 5)])
def test_emulated_pinv(emu, rng, shape):
    a = random(rng, shape, np.float64)
    a[..., 0] = a[..., 1]
    out, r = _lstsq_cuda.pinv(dev(a), 0.0, 1e-12, True, np.dtype(np.float64))
    ref, rr = _lstsq_host.pinv(a, 0.0, 1e-12, True, np.dtype(np.float64))
    assert np.allclose(plain(out), ref) and np.array_equal(np.asarray(plain(r)), rr)


# -- the device --------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("shape", [(2000, 50), (50, 300), (4, 100, 20)])
def test_gpu_cupy_in_cupy_out(xp_gpu, rng, dtype, driver, shape):
    a = random(rng, shape, dtype)
    b = random(rng, shape[:-1] + (3,), dtype)
    with gpulinalg.config(backend="gpu"):
        x, res, rank, s = lstsq(xp_gpu.asarray(a), xp_gpu.asarray(b), lapack_driver=driver)
        p = pinv(xp_gpu.asarray(a))
    assert isinstance(x, xp_gpu.ndarray) and isinstance(p, xp_gpu.ndarray)
    for idx in np.ndindex(*shape[:-2]):
        ref = scipy.linalg.lstsq(a[idx], b[idx], lapack_driver=driver)
        assert _residual(a[idx], host(x)[idx], b[idx]) <= 10 * max(
            _residual(a[idx], ref[0], b[idx]), eps(dtype) * np.linalg.norm(b[idx]))
        assert np.allclose(host(p)[idx], scipy.linalg.pinv(a[idx]), atol=100 * _tol(dtype))


@pytest.mark.gpu
def test_gpu_rank_deficient_like_gelsd(xp_gpu, rng):
    s = np.r_[np.linspace(3.0, 1.0, 10), np.zeros(10)]
    a = with_singular_values(rng, 500, 20, s, np.float64)
    b = random(rng, (500, 2), np.float64)
    with gpulinalg.config(backend="gpu"):
        x, res, rank, sv = lstsq(xp_gpu.asarray(a), xp_gpu.asarray(b), cond=1e-10)
    ref = scipy.linalg.lstsq(a, b, cond=1e-10)
    assert int(rank) == 10 and np.allclose(host(x), ref[0], atol=1e-9)


@pytest.mark.gpu
def test_gpu_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    a, b = random(rng, (3, 400, 30), np.float64), random(rng, (3, 400, 2), np.float64)
    x, res, rank, s = lstsq(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda())
    assert x.is_cuda and res.is_cuda
    ref = torch.linalg.lstsq(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).solution
    assert torch.allclose(x, ref, atol=1e-9)
    assert pinv(torch.from_numpy(a).cuda()).is_cuda
