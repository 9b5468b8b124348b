"""gpulinalg.decomp.eigh / eigvalsh on both backends against SciPy; the GPU engine on the
emulated cuSOLVER; gpu-marked tests with CuPy and torch inputs."""

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg import LinAlgError
from gpulinalg.decomp import EighResult, eigh, eigvalsh
from gpulinalg.decomp.eigh import _eigh_cuda, _eigh_host

from tests.support.cusolver_emulator import CALLS, dev, plain
from tests.support.decomp_dense_ref import DTYPES, eps, host, random, spd


def hermitian(rng, shape, dtype):
    x = random(rng, shape, dtype)
    return ((x + x.conj().swapaxes(-1, -2)) / 2).astype(dtype)


def _check(a, w, v, dtype, b=None):
    """DESIGN's ratios: ||A V - B V diag(w)|| / (n ||A|| eps) <= 50,
    ||I - V^H B V|| / (n eps) <= 30."""
    a, w, v = (host(x).astype(np.complex128) for x in (a, w, v))
    n = a.shape[-1]
    bb = np.eye(n) if b is None else host(b).astype(np.complex128)
    na = max(np.linalg.norm(a, 1, axis=(-2, -1)).max(), 1e-300)
    nb = np.linalg.norm(bb, 1, axis=(-2, -1)).max()
    res = np.linalg.norm(a @ v - (bb @ v) * w[..., None, :], 1, axis=(-2, -1)).max()
    assert res / (n * na * nb * eps(dtype)) <= 50
    gram = v.conj().swapaxes(-1, -2) @ bb @ v
    k = v.shape[-1]
    assert np.linalg.norm(gram - np.eye(k), 1, axis=(-2, -1)).max() / (max(n, 1) * eps(dtype)
                                                                        * nb) <= 30


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 40])
def test_eigh_ratios_and_scipy(backend, rng, dtype, n):
    a = hermitian(rng, (n, n), dtype)
    res = eigh(a)
    assert isinstance(res, EighResult)
    w, v = (host(x) for x in res)
    assert w.dtype == np.finfo(dtype).dtype and v.dtype == dtype
    assert w.shape == (n,) and v.shape == (n, n)
    ref = scipy.linalg.eigh(a.astype(np.complex128), eigvals_only=True)
    assert np.allclose(w, ref, atol=50 * n * eps(dtype) * max(np.abs(ref).max(), 1))
    assert np.all(np.diff(w) >= 0)
    _check(a, w, v, dtype)
    assert np.allclose(host(eigvalsh(a)), w, atol=50 * n * eps(dtype) * max(abs(w).max(), 1))


def test_eigh_deterministic_phases(backend, rng):
    a = hermitian(rng, (12, 12), np.complex128)
    v = host(eigh(a).eigenvectors)
    peak = np.take_along_axis(v, np.argmax(np.abs(v), axis=0)[None], axis=0)
    assert np.allclose(peak.imag, 0) and np.all(peak.real > 0)


@pytest.mark.parametrize("lower", [True, False])
def test_eigh_reads_one_triangle(backend, rng, lower):
    a = hermitian(rng, (9, 9), np.float64)
    junk = a + (np.triu(np.ones((9, 9)), 1) if lower else np.tril(np.ones((9, 9)), -1)) * 7
    assert np.allclose(host(eigvalsh(junk, lower=lower)), np.linalg.eigvalsh(a))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("itype", [1, 2, 3])
def test_eigh_generalized(backend, rng, dtype, itype):
    a = hermitian(rng, (10, 10), dtype)
    b = spd(rng, 10, dtype, cond=10.0)
    w, v = (host(x) for x in eigh(a, b, type=itype))
    ref = scipy.linalg.eigh(a, b, type=itype, eigvals_only=True)
    assert np.allclose(w, ref, rtol=1e-3 if eps(dtype) > 1e-10 else 1e-9, atol=1e-4)
    if itype == 1:
        _check(a, w, v, dtype, b)


def test_eigh_generalized_not_positive_definite(backend, rng):
    a = hermitian(rng, (6, 6), np.float64)
    with pytest.raises(LinAlgError, match="not positive definite"):
        eigh(a, -np.eye(6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_subsets(backend, rng, dtype):
    a = hermitian(rng, (30, 30), dtype)
    ref = np.linalg.eigvalsh(a.astype(np.complex128))
    tol = 1e-3 if eps(dtype) > 1e-10 else 1e-10
    w, v = (host(x) for x in eigh(a, subset_by_index=[25, 29]))
    assert w.shape == (5,) and v.shape == (30, 5) and np.allclose(w, ref[25:], atol=tol)
    _check(a, w, v, dtype)
    lo, hi = (ref[9] + ref[10]) / 2, (ref[19] + ref[20]) / 2
    w = host(eigvalsh(a, subset_by_value=(lo, hi)))
    assert np.allclose(w, ref[10:20], atol=tol)
    w = host(eigvalsh(a, subset_by_value=(-np.inf, lo)))
    assert np.allclose(w, ref[:10], atol=tol)
    b = spd(rng, 30, dtype, cond=10.0)
    wb = host(eigvalsh(a, b, subset_by_index=(0, 2)))
    assert np.allclose(wb, scipy.linalg.eigvalsh(a, b)[:3], atol=tol)


@pytest.mark.parametrize("shape", [(5, 4, 4), (2, 3, 20, 20), (40, 8, 8)])
def test_eigh_batched(backend, rng, shape):
    a = hermitian(rng, shape, np.float64)
    w, v = (host(x) for x in eigh(a))
    assert w.shape == shape[:-1] and v.shape == shape
    _check(a, w, v, np.float64)
    for idx in np.ndindex(*shape[:-2]):
        assert np.allclose(w[idx], scipy.linalg.eigvalsh(a[idx]))


def test_eigh_batched_broadcasts_b(backend, rng):
    a = hermitian(rng, (3, 6, 6), np.float64)
    b = spd(rng, 6, np.float64)
    w = host(eigvalsh(a, b))
    for i in range(3):
        assert np.allclose(w[i], scipy.linalg.eigvalsh(a[i], b))


def test_eigh_batched_ragged_value_subset(backend):
    a = np.stack([np.diag([1.0, 2.0, 3.0]), np.diag([1.0, 5.0, 6.0])])
    with pytest.raises(ValueError, match="different numbers"):
        eigvalsh(a, subset_by_value=(0.5, 2.5))


@pytest.mark.parametrize("shape", [(0, 0), (3, 0, 0), (0, 4, 4)])
def test_eigh_empty(backend, shape):
    w, v = eigh(np.zeros(shape))
    assert w.shape == shape[:-1] and v.shape == shape
    assert eigvalsh(np.zeros(shape, np.float32)).dtype == np.float32


@pytest.mark.parametrize("layout", ["C", "F", "view"])
def test_eigh_layouts_and_input_unmodified(backend, rng, layout):
    base = hermitian(rng, (40, 40), np.float64)
    a = {"C": base, "F": np.asfortranarray(base), "view": base[::2, ::2]}[layout]
    before = a.copy()
    w, v = eigh(a)
    assert np.array_equal(a, before)
    _check(a, w, v, np.float64)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_eigh_check_finite(backend, bad):
    a = np.eye(3)
    a[1, 1] = bad
    with pytest.raises(ValueError):
        eigh(a)
    with pytest.raises(ValueError):
        eigh(np.eye(3), a)


def test_eigh_read_only_with_overwrite(backend, rng):
    a = hermitian(rng, (8, 8), np.float64)
    b = spd(rng, 8, np.float64)
    ra, rb = a.copy(), b.copy()
    ra.flags.writeable = False
    rb.flags.writeable = False
    w, _ = eigh(ra, rb, overwrite_a=True, overwrite_b=True)
    assert np.array_equal(ra, a) and np.array_equal(rb, b)
    assert np.allclose(host(w), scipy.linalg.eigvalsh(a, b))


def test_eigh_errors_as_scipy(backend):
    a = np.eye(3)
    for kwargs in ({"driver": "foo"}, {"subset_by_index": (2, 1)}, {"subset_by_value": (1, 1)},
                   {"subset_by_index": (0, 1), "subset_by_value": (0, 1)},
                   {"driver": "gvd"}, {"driver": "evd", "subset_by_index": (0, 1)}):
        with pytest.raises(ValueError):
            eigh(a, **kwargs)
    with pytest.raises(ValueError):
        eigh(a, np.eye(3), type=4)
    with pytest.raises(ValueError):
        eigh(a, np.eye(2))
    with pytest.raises(ValueError):
        eigh(np.ones((2, 3)))


# -- the GPU engine on the emulated cuSOLVER -------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 6), (3, 5, 5), (2, 40, 40)])
@pytest.mark.parametrize("problem", ["standard", "generalized"])
@pytest.mark.parametrize("subset", [None, "index", "value"])
def test_emulated_engine_matches_host(emu, rng, dtype, shape, problem, subset):
    a = hermitian(rng, shape, dtype)
    b = spd(rng, shape[-1], dtype, cond=5.0) if problem == "generalized" else None
    index = (1, 3) if subset == "index" else None
    value = (-0.5, np.inf) if subset == "value" and len(shape) == 2 else None
    args = (True, False, 1, index, value, None, np.dtype(dtype))
    out = _eigh_cuda.eigh(dev(a), None if b is None else dev(b), *args)
    ref = _eigh_host.eigh(a, b, *args)
    tol = 1e-3 if eps(dtype) > 1e-10 else 1e-9
    assert np.allclose(plain(out.eigenvalues), ref.eigenvalues, atol=tol)
    assert np.allclose(plain(out.eigenvectors), ref.eigenvectors, atol=tol)  # same phases


def test_emulated_routes(emu, rng):
    CALLS.clear()
    a = hermitian(rng, (4, 8, 8), np.float64)
    _eigh_cuda.eigh(dev(a), None, True, False, 1, None, None, None, np.dtype(np.float64))
    assert CALLS["syevj_batched"] == 1 and CALLS["syevd"] == 0
    _eigh_cuda.eigh(dev(a[0]), None, True, True, 1, None, None, None, np.dtype(np.float64))
    assert CALLS["syevd"] == 1
    assert _eigh_cuda.route(40, 4, False, False) == "syevd"
    assert _eigh_cuda.route(8, 4, False, True) == "syevdx"
    assert _eigh_cuda.route(8, 1, True, False) == "sygvd"
    assert _eigh_cuda.route(8, 1, True, True) == "sygvdx"


def test_emulated_not_positive_definite(emu, rng):
    a = hermitian(rng, (5, 5), np.float64)
    with pytest.raises(LinAlgError, match="leading minor of order 1"):
        _eigh_cuda.eigh(dev(a), dev(-np.eye(5)), True, False, 1, None, None, None,
                        np.dtype(np.float64))


def test_emulated_values_only(emu, rng):
    a = hermitian(rng, (3, 6, 6), np.complex64)
    w = _eigh_cuda.eigh(dev(a), None, False, True, 1, None, None, None, np.dtype(np.complex64))
    assert np.allclose(plain(w), np.linalg.eigvalsh(a, UPLO="U"), atol=1e-4)


# -- the device --------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(300, 300), (64, 16, 16), (3, 100, 100)])
def test_gpu_cupy_in_cupy_out(xp_gpu, rng, dtype, shape):
    a = hermitian(rng, shape, dtype)
    with gpulinalg.config(backend="gpu"):
        w, v = eigh(xp_gpu.asarray(a))
    assert isinstance(w, xp_gpu.ndarray) and isinstance(v, xp_gpu.ndarray)
    assert gpulinalg.last_run().backend == "gpu"
    _check(a, w, v, dtype)
    with gpulinalg.config(backend="gpu"):
        ws, vs = eigh(xp_gpu.asarray(a), subset_by_index=(0, 4))
        wg = eigvalsh(xp_gpu.asarray(a), xp_gpu.asarray(spd(rng, shape[-1], dtype)))
    _check(a, ws, vs, dtype)
    assert wg.shape == shape[:-1]


@pytest.mark.gpu
def test_gpu_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    a = hermitian(rng, (4, 50, 50), np.float64)
    w, v = eigh(torch.from_numpy(a).cuda())
    assert w.is_cuda and v.is_cuda
    assert torch.allclose(torch.from_numpy(a).cuda() @ v, v * w[..., None, :], atol=1e-10)
