"""truncated_svd: accuracy against known spectra (Halko-Martinsson-Tropp bound), methods,
dtypes, layouts, sparse input, edge cases, errors and the dispatcher's fallback."""

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

import gpulinalg
from gpulinalg import FallbackWarning
from gpulinalg import testing
from tests.support import fake_gpu as fakes
from gpulinalg.decomp.lowrank import _truncated_cuda, _truncated_host
from gpulinalg.decomp.lowrank._truncated_api import LowRankSVDResult, resolve_plan, truncated_svd

from tests.support.lowrank_emulator import chol_inverse_mirror

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def known(rng, m, n, s, dtype=np.float64):
    """A matrix with singular values ``s`` (descending), built in float64/complex128."""
    r = len(s)
    cplx = np.dtype(dtype).kind == "c"

    def basis(rows):
        z = rng.standard_normal((rows, r)) + (1j * rng.standard_normal((rows, r)) if cplx else 0)
        return np.linalg.qr(z)[0]

    u, v = basis(m), basis(n)
    return ((u * s) @ v.conj().T).astype(dtype)


def eps(dtype):
    return np.finfo(np.dtype(dtype).char.lower()).eps


def hmt_bound(s, k, p, q):
    """Halko-Martinsson-Tropp (2011) Cor. 10.10: expected spectral error of the range."""
    tail = s[k:]
    t1 = (1 + np.sqrt(k / (p - 1))) * tail[0] ** (2 * q + 1)
    t2 = np.e * np.sqrt(k + p) / p * np.sqrt(np.sum(tail ** (2 * (2 * q + 1))))
    return (t1 + t2) ** (1 / (2 * q + 1))


def orth_err(x):
    k = x.shape[1]
    return np.abs(x.conj().T @ x - np.eye(k)).max()


def check_svd(r, k, dtype, m, n):
    U, S, Vh = (gpulinalg._runtime.arrays.to_host(x) for x in r[:3])
    assert U.shape == (m, k) and S.shape == (k,) and Vh.shape == (k, n)
    assert U.dtype == np.dtype(dtype) and Vh.dtype == np.dtype(dtype)
    assert S.dtype == np.dtype(dtype).char.lower()
    assert np.all(np.diff(S) <= 0)
    tol = 50 * max(m, n, 10) ** 0.5 * eps(dtype) * 10
    assert orth_err(U) < tol and orth_err(Vh.conj().T) < tol
    return U, S, Vh


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(300, 120), (90, 260)])
def test_randomized_within_hmt_bound(backend, rng, dtype, shape):
    m, n = shape
    s = 0.9 ** np.arange(min(m, n))
    a = known(rng, m, n, s, dtype)
    k, p, q = 10, 10, 2
    r = truncated_svd(a, k, method="randomized", n_oversamples=p, n_iter=q, random_state=1)
    U, S, Vh = check_svd(r, k, dtype, m, n)
    resid = np.linalg.norm(a.astype(np.complex128) - (U * S) @ Vh, 2)
    bound = hmt_bound(s, k, p, q)
    assert resid <= 10 * bound + 100 * eps(dtype)
    # Rayleigh-Ritz values never exceed the true ones and approach them
    assert np.all(S <= s[:k] * (1 + 100 * eps(dtype)))
    assert np.allclose(S, s[:k], rtol=0.05)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("normalizer", ["auto", "CholQR", "QR", "LU"])
def test_normalizers_converge_to_known_spectrum(backend, rng, dtype, normalizer):
    s = np.concatenate([[10, 8, 6, 5, 4], 1e-2 * 0.5 ** np.arange(95)])
    a = known(rng, 400, 100, s, dtype)
    r = truncated_svd(a, 5, method="randomized", power_iteration_normalizer=normalizer,
                      random_state=0)
    _, S, _ = check_svd(r, 5, dtype, 400, 100)
    assert np.allclose(S, s[:5], rtol=100 * eps(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_matches_numpy(backend, rng, dtype):
    a = known(rng, 70, 50, np.linspace(5, 1, 50), dtype)
    r = truncated_svd(a, 7, method="exact")
    U, S, Vh = check_svd(r, 7, dtype, 70, 50)
    s = np.linalg.svd(a.astype(np.complex128), compute_uv=False)
    assert np.allclose(S, s[:7], rtol=50 * eps(dtype))
    assert np.allclose((U * S) @ Vh, _rank_k(a, 7), atol=200 * eps(dtype) * s[0])


def _rank_k(a, k):
    u, s, vh = np.linalg.svd(a.astype(np.complex128), full_matrices=False)
    return (u[:, :k] * s[:k]) @ vh[:k]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_gesvdr_method(backend, rng, dtype):
    s = 0.7 ** np.arange(60)
    a = known(rng, 500, 60, s, dtype)
    r = truncated_svd(a, 6, method="gesvdr", n_iter=4, random_state=0)
    _, S, _ = check_svd(r, 6, dtype, 500, 60)
    assert np.allclose(S, s[:6], rtol=1e-3)


def test_deterministic_signs_and_seed(backend, rng):
    a = known(rng, 200, 80, 0.8 ** np.arange(80))
    r1 = truncated_svd(a, 5, random_state=3, method="randomized")
    r2 = truncated_svd(a, 5, random_state=3, method="randomized")
    for x, y in zip(r1, r2):
        assert np.array_equal(gpulinalg._runtime.arrays.to_host(x),
                              gpulinalg._runtime.arrays.to_host(y))
    Vh = gpulinalg._runtime.arrays.to_host(r1.Vh)
    assert np.all(Vh[np.arange(5), np.abs(Vh).argmax(axis=1)] > 0)


@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_layouts_give_the_same_answer(backend, rng, layout):
    base = known(rng, 301, 161, 0.85 ** np.arange(161))
    a = np.ascontiguousarray(base[::2, ::2])
    ref = truncated_svd(a, 4, random_state=5, method="randomized")
    b = {"C": a, "F": np.asfortranarray(a), "strided": base[::2, ::2]}[layout]
    got = truncated_svd(b, 4, random_state=5, method="randomized")
    assert np.allclose(got.S, ref.S, rtol=1e-10)
    assert np.allclose(got.U @ np.diag(got.S) @ got.Vh, ref.U @ np.diag(ref.S) @ ref.Vh,
                       atol=1e-10)


def test_input_not_modified(backend, rng):
    a = known(rng, 120, 60, 0.8 ** np.arange(60))
    keep = a.copy()
    for method in ("randomized", "exact", "gesvdr"):
        truncated_svd(a, 3, method=method, random_state=0, error_estimate=True)
        assert np.array_equal(a, keep)


def test_sparse_scipy_matches_dense(backend, rng):
    dense = 0.01 * sp.random(400, 150, density=0.05, random_state=1, format="csr")
    dense = dense + sp.csr_matrix(known(rng, 400, 150, 3 * 0.6 ** np.arange(150)))
    a = sp.csr_matrix(dense)
    keep = a.copy()
    r = truncated_svd(a, 5, random_state=0)
    ref = np.linalg.svd(a.toarray(), compute_uv=False)
    assert isinstance(r.S, np.ndarray)
    assert np.allclose(r.S, ref[:5], rtol=1e-6)
    assert (a != keep).nnz == 0
    r2 = truncated_svd(a.tocsc().astype(np.float32), 5, random_state=0)
    assert r2.S.dtype == np.float32 and np.allclose(r2.S, ref[:5], rtol=1e-4)


@pytest.mark.gpu
def test_sparse_cupy(xp_gpu, rng):
    import cupyx.scipy.sparse as cps
    a = 0.01 * sp.random(500, 200, density=0.1, random_state=2, format="csr")
    a = a + sp.csr_matrix(known(rng, 500, 200, 4 * 0.5 ** np.arange(200)))
    r = truncated_svd(cps.csr_matrix(sp.csr_matrix(a)), 4, random_state=0)
    assert isinstance(r.S, xp_gpu.ndarray)
    assert np.allclose(r.S.get(), np.linalg.svd(a.toarray(), compute_uv=False)[:4], rtol=1e-6)


def test_error_estimate_tracks_the_next_singular_value(backend, rng):
    s = np.concatenate([np.linspace(10, 5, 6), 0.5 * 0.9 ** np.arange(94)])
    a = known(rng, 300, 100, s)
    for method in ("randomized", "exact"):
        r = truncated_svd(a, 6, method=method, random_state=0, error_estimate=True)
        assert isinstance(r, LowRankSVDResult)
        true = np.linalg.norm(a - (r.U * r.S) @ r.Vh, 2)
        assert abs(r.error - true) <= 0.05 * true
        assert abs(true - s[6]) <= 1e-6 * s[0]


def test_rank_deficient_and_zero(backend, rng):
    a = known(rng, 80, 40, np.array([3.0, 2.0, 1.0]))
    r = truncated_svd(a, 6, method="randomized", random_state=0)
    U, S, Vh = check_svd(r, 6, np.float64, 80, 40)
    assert np.allclose(S[:3], [3, 2, 1], rtol=1e-12) and np.all(S[3:] < 1e-12)
    z = np.zeros((30, 20))
    for method in ("randomized", "exact"):
        U, S, Vh = check_svd(truncated_svd(z, 4, method=method, random_state=0),
                             4, np.float64, 30, 20)
        assert np.all(S == 0)


def test_empty_and_1x1(backend):
    r = truncated_svd(np.zeros((0, 5)), 0)
    assert r.U.shape == (0, 0) and r.S.shape == (0,) and r.Vh.shape == (0, 5)
    r = truncated_svd(np.ones((4, 3), np.float32), 0)
    assert r.U.shape == (4, 0) and r.S.dtype == np.float32
    with pytest.raises(ValueError, match=r"k must be in \[0, min\(m, n\)\] = \[0, 0\]"):
        truncated_svd(np.zeros((0, 5)), 1)
    for method in ("randomized", "exact", "gesvdr"):
        U, S, Vh = truncated_svd(np.array([[-2.5]]), 1, method=method, random_state=0)
        assert np.allclose(S, [2.5]) and np.allclose(U * S * Vh, -2.5)
        assert Vh[0, 0] > 0


def test_bad_arguments():
    a = np.ones((5, 4))
    with pytest.raises(ValueError, match="k must be in"):
        truncated_svd(a, 5)
    with pytest.raises(ValueError, match="k must be in"):
        truncated_svd(a, -1)
    with pytest.raises(TypeError, match="k must be an int"):
        truncated_svd(a, 1.5)
    with pytest.raises(ValueError, match="method must be one of"):
        truncated_svd(a, 1, method="arpack")
    with pytest.raises(ValueError, match="power_iteration_normalizer"):
        truncated_svd(a, 1, power_iteration_normalizer="gram")
    with pytest.raises(ValueError, match="n_iter"):
        truncated_svd(a, 1, n_iter=-1)
    with pytest.raises(ValueError, match="ndim"):
        truncated_svd(np.ones(4), 1)
    with pytest.raises(TypeError, match="random_state"):
        truncated_svd(a, 1, random_state="seed")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_raises(backend, bad):
    a = np.ones((20, 10))
    a[3, 4] = bad
    with pytest.raises(ValueError, match="infs or NaNs"):
        truncated_svd(a, 2)
    with pytest.raises(ValueError, match="infs or NaNs"):
        truncated_svd(sp.csr_matrix(a), 2)


def test_resolve_plan_auto_thresholds():
    assert resolve_plan((20000, 2000), 32).method == "randomized"
    assert resolve_plan((20000, 2000), 600).method == "exact"
    assert resolve_plan((400, 300), 3).method == "exact"
    assert resolve_plan((400, 300), 3, sparse=True).method == "randomized"
    assert resolve_plan((20000, 2000), 300).n_iter == 4
    assert resolve_plan((100, 50), 60 // 2, n_oversamples=100).sketch == 50


def test_forced_oom_falls_back_to_cpu(rng, fake_gpu):
    a = known(rng, 100, 50, 0.8 ** np.arange(50))
    ref = truncated_svd(a, 3, random_state=0, method="randomized")
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(FallbackWarning):
            got = truncated_svd(a, 3, random_state=0, method="randomized")
    rec = gpulinalg.last_run()
    assert rec.fell_back and rec.backend == "cpu"
    assert np.array_equal(got.S, ref.S)


def test_oversize_routes_to_out_of_core(rng, monkeypatch):
    a = known(rng, 300, 40, 0.7 ** np.arange(40)).astype(np.float32)
    calls = []

    def streamed(x, plan):
        calls.append(x.shape)
        return _truncated_host.truncated_svd(
            x, plan.__class__(**{**plan.__dict__, "out_of_core": True}))

    monkeypatch.setattr(_truncated_cuda, "truncated_svd_streamed", streamed)
    with fakes.fake_gpu(free=10_000, total=1 << 30), gpulinalg.config(backend="gpu"):
        r = truncated_svd(a, 3, random_state=0, method="randomized")
    testing.reset_gpu_state()
    assert calls == [(300, 40)] and gpulinalg.last_run().backend == "gpu-out-of-core"
    assert np.allclose(r.S, 0.7 ** np.arange(3), rtol=1e-5)


def test_torch_in_torch_out(backend, rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(known(rng, 60, 30, 0.8 ** np.arange(30)))
    if backend == "gpu":
        a = a.cuda()
    r = truncated_svd(a, 3, random_state=0)
    assert isinstance(r.S, torch.Tensor) and r.S.device == a.device
    assert np.allclose(r.S.cpu().numpy(), 0.8 ** np.arange(3))


@pytest.mark.gpu
def test_gpu_agrees_with_cpu_for_the_same_seed(xp_gpu, rng):
    a = known(rng, 2000, 300, 0.95 ** np.arange(300)).astype(np.float32)
    with gpulinalg.config(backend="cpu"):
        ref = truncated_svd(a, 8, random_state=7, method="randomized")
    with gpulinalg.config(backend="gpu"):
        got = truncated_svd(xp_gpu.asarray(a), 8, random_state=7, method="randomized")
        assert gpulinalg.last_run().backend == "gpu"
    assert np.allclose(got.S.get(), ref.S, rtol=1e-5)
    assert np.allclose(np.abs(got.Vh.get() @ ref.Vh.T), np.eye(8), atol=1e-3)


@pytest.mark.gpu
def test_gpu_fp32_target_accuracy(xp_gpu):
    rng = np.random.default_rng(1)
    m, n, k = 4000, 500, 16
    s = np.concatenate([np.linspace(1, 0.5, k), 0.2 * 0.97 ** np.arange(n - k)])
    a = known(rng, m, n, s).astype(np.float32)
    r = truncated_svd(xp_gpu.asarray(a), k, random_state=0)
    assert np.abs(r.S.get() / s[:k] - 1).max() <= 1e-6 * 10


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("transpose", [False, True])
def test_contiguous_products_match_the_written_ones(rng, dtype, order, transpose):
    from gpulinalg.decomp.lowrank._randomized_xp import LinearOperator
    from gpulinalg.decomp.lowrank._sketch_host import ENGINE
    a = rng.standard_normal((60, 25)) + (1j * rng.standard_normal((60, 25))
                                         if dtype == np.complex128 else 0)
    a = np.asarray(a.astype(dtype), order=order)
    plain = dataclasses.replace(ENGINE, contiguous_products=False)
    fast, ref = (LinearOperator(e, a, transpose=transpose) for e in (ENGINE, plain))
    assert fast.shape == ref.shape
    z = rng.standard_normal((ref.shape[1], 4)).astype(dtype)
    q = rng.standard_normal((ref.shape[0], 4)).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert np.allclose(fast.matmat(z), ref.matmat(z), rtol=tol, atol=tol)
    assert np.allclose(fast.rmatmat(q), ref.rmatmat(q), rtol=tol, atol=tol)
    op_a = a.T if transpose else a
    assert np.allclose(fast.rmatmat(q), op_a.conj().T @ q, rtol=tol, atol=tol)


def test_host_gaussian_in_blocks(monkeypatch):
    from gpulinalg.decomp.lowrank import _sketch_host
    whole = _sketch_host.gaussian_real((7, 301), np.float32, 12345)
    monkeypatch.setattr(_sketch_host, "BLOCK_PAIRS", 16)  # many blocks, a partial last one
    assert np.array_equal(_sketch_host.gaussian_real((7, 301), np.float32, 12345), whole)
    assert _sketch_host.gaussian_real((0, 3), np.float64, 1).shape == (0, 3)


def test_host_sum_squares_in_panels(rng, monkeypatch):
    from gpulinalg.decomp.lowrank import _sketch_host
    x = rng.standard_normal((1001, 7)).astype(np.float32)
    want = float((x.astype(np.float64) ** 2).sum())
    monkeypatch.setattr(_sketch_host, "SQUARES_PANEL_ENTRIES", 50)  # many panels, a partial one
    assert np.isclose(_sketch_host.sum_squares(x), want, rtol=1e-13)
    assert _sketch_host.sum_squares(np.empty((0, 4))) == 0.0


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_fused_cholesky_inverse_algorithm(rng, dtype):
    y = rng.standard_normal((50, 7)) + (1j * rng.standard_normal((50, 7)) if dtype != np.float64
                                        else 0)
    y[:, 6] = y[:, 5]  # exactly rank-deficient: the shift keeps R invertible
    g = y.conj().T @ y
    rinv = chol_inverse_mirror(g, 1e-12)
    r = np.linalg.cholesky(g + (np.trace(g).real * 1e-12 + np.finfo(float).tiny)
                           * np.eye(7)).conj().T
    assert np.allclose(rinv @ r, np.eye(7), atol=1e-4)  # cond(G + shift) ~ 1e11
    assert np.allclose(np.triu(rinv), rinv)
    q = y[:, :6] @ chol_inverse_mirror(g[:6, :6], 1e-14)  # full rank: an orthonormal basis
    assert np.allclose(q.conj().T @ q, np.eye(6), atol=1e-10)
    assert np.isnan(chol_inverse_mirror(-np.eye(2), 0.0)).all()  # every shift fails: NaNs


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("order", [7, 40, "max"])
def test_fused_cholesky_inverse_kernel(xp_gpu, rng, dtype, order):
    from gpulinalg.decomp._kernels._cholinv_cuda import SHARED_BYTES, chol_inverse, max_order
    cplx = np.dtype(dtype).kind == "c"
    l = max_order(dtype) if order == "max" else order
    assert 2 * l * l * (16 if cplx else 8) <= SHARED_BYTES
    y = rng.standard_normal((300, l)) + (1j * rng.standard_normal((300, l)) if cplx else 0)
    g = y.conj().T @ y
    got = chol_inverse(xp_gpu.asarray(g), 1e-12, dtype).get()
    assert got.dtype == dtype
    assert np.allclose(got, chol_inverse_mirror(g, 1e-12).astype(dtype),
                       rtol=1e-5 if dtype in (np.float32, np.complex64) else 1e-10)
    q = y @ got.astype(np.complex128)
    assert np.abs(q.conj().T @ q - np.eye(l)).max() < 1e-3
    bad = chol_inverse(xp_gpu.asarray(-np.eye(3)), 0.0, dtype).get()  # cast to its type
    assert np.isnan(bad).all()
    with pytest.raises(ValueError, match="order <="):
        chol_inverse(xp_gpu.eye(max_order(dtype) + 1), 0.0, dtype)


@pytest.mark.gpu
@pytest.mark.kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("u_based", [False, True])
def test_svd_flip_sign_kernel_matches_the_generic_route(xp_gpu, rng, dtype, u_based):
    from gpulinalg.decomp._kernels import _ritz_cuda
    from gpulinalg.decomp.lowrank import _sketch_cuda, _sketch_host
    from gpulinalg.decomp.lowrank._sketch_xp import svd_flip
    gpu, host = _sketch_cuda.engine(), _sketch_host.ENGINE
    U = rng.standard_normal((700, 9)).astype(dtype)
    Vh = rng.standard_normal((9, 1000)).astype(dtype)
    rows = U.T if u_based else Vh
    rows[0] = 0.0  # a zero vector keeps its sign
    rows[1, 5], rows[1, 600] = -7.0, 7.0  # a tie: the first one decides (flip)
    rows[2, 3] = rows[2].__abs__().max() + 1.0  # positive maximum: no flip
    for step in (1, 2):  # contiguous, then strided views
        du = xp_gpu.asarray(np.repeat(U, step, axis=0))[::step]
        dvh = xp_gpu.asarray(np.repeat(Vh, step, axis=1))[:, ::step]
        gu, gvh = svd_flip(gpu, du, dvh, u_based)
        ru, rvh = svd_flip(host, U, Vh, u_based)
        assert np.array_equal(gu.get(), ru) and np.array_equal(gvh.get(), rvh)
        iu, ivh = svd_flip(gpu, du, dvh, u_based, overwrite=True)
        assert iu is du and ivh is dvh  # scaled in place
        assert np.array_equal(du.get(), ru) and np.array_equal(dvh.get(), rvh)
    flipped = _ritz_cuda.flip_signs(xp_gpu.asarray(rows)).get()
    assert flipped[0] == 1 and flipped[1] == -1 and flipped[2] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lift_kernel(xp_gpu, rng, dtype):
    from gpulinalg.decomp._kernels import _ritz_cuda
    q = rng.standard_normal((300, 42)).astype(dtype)
    btd, w = rng.standard_normal((500, 42)), rng.standard_normal((85, 32))
    u, s, vh = _ritz_cuda.lift(xp_gpu.asarray(q), xp_gpu.asarray(btd), xp_gpu.asarray(w), 32)
    assert u.dtype == s.dtype == vh.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert np.allclose(u.get(), q.astype(np.float64) @ w[:42], rtol=tol, atol=tol)
    assert np.allclose(vh.get(), (btd @ w[42:84]).T, rtol=tol, atol=tol)
    assert np.array_equal(s.get(), w[84].astype(dtype))


@pytest.mark.gpu
def test_pool_limit_routes_device_input_to_cpu(xp_gpu, rng):
    a = xp_gpu.asarray(known(rng, 3000, 400, 0.9 ** np.arange(400)))
    pool = xp_gpu.get_default_memory_pool()
    old = pool.get_limit()
    pool.set_limit(size=pool.used_bytes() + (512 << 10))  # room for the results only
    try:
        with gpulinalg.config(backend="gpu"), pytest.warns(FallbackWarning):
            r = truncated_svd(a, 4, random_state=0, check_finite=False, method="randomized")
        rec = gpulinalg.last_run()
    finally:
        pool.set_limit(size=old)
    assert rec.backend == "cpu" and rec.fell_back
    assert isinstance(r.S, xp_gpu.ndarray)
    assert np.allclose(r.S.get(), 0.9 ** np.arange(4), rtol=1e-8)
