"""gpulinalg.sparse on a real GPU: CuPy/torch in and out, cuDSS details, cuSOLVER-Sp, real OOM."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import gpulinalg
from gpulinalg import FallbackWarning, LinAlgError, NotPositiveDefiniteError
from gpulinalg.sparse import factorize, solve

from tests.support.sparse_ref import poisson2d, spd, sym_indefinite, unsymmetric

pytestmark = pytest.mark.gpu


@pytest.fixture
def cudss(xp_gpu):
    from gpulinalg.sparse import _cudss_cuda as _cudss
    if not _cudss.available():
        pytest.skip("cuDSS not loadable")
    return _cudss


def test_cupy_in_cupy_out(xp_gpu, cudss, rng):
    import cupyx.scipy.sparse as csp
    a = spd(200, rng)
    b = rng.standard_normal((200, 3))
    x = solve(csp.csr_matrix(a), xp_gpu.asarray(b))
    assert isinstance(x, xp_gpu.ndarray)
    np.testing.assert_allclose(x.get(), spla.spsolve(a.tocsc(), b), rtol=1e-9)
    rec = gpulinalg.last_run()
    assert rec.backend == "gpu" and rec.details["library"] == "cudss"
    # COO with duplicates, on the device
    coo = a.tocoo()
    dup = csp.coo_matrix((xp_gpu.asarray(np.r_[coo.data, coo.data]),
                          (xp_gpu.asarray(np.r_[coo.row, coo.row]),
                           xp_gpu.asarray(np.r_[coo.col, coo.col]))), shape=a.shape)
    x2 = solve(dup, xp_gpu.asarray(b))
    np.testing.assert_allclose(x2.get(), x.get() / 2, rtol=1e-9)


def test_numpy_b_comes_back_numpy(xp_gpu, rng):
    a = unsymmetric(300, rng)
    b = rng.standard_normal(300)
    with gpulinalg.config(backend="gpu"):
        x = solve(a, b)
        with factorize(a) as fac:
            y = fac.solve(b)
            assert fac.info["backend"] == "gpu"
    assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
    np.testing.assert_allclose(x, y, rtol=1e-10)


def test_torch_cuda(xp_gpu, rng):
    torch = pytest.importorskip("torch")
    a = spd(100, rng)
    coo = a.tocoo()
    ta = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, a.shape).cuda()
    b = torch.randn(100, dtype=torch.float64, device="cuda")
    x = solve(ta.to_sparse_csr(), b)
    assert x.is_cuda
    np.testing.assert_allclose(x.cpu().numpy(), spla.spsolve(a.tocsc(), b.cpu().numpy()),
                               rtol=1e-9)


def test_cudss_threading_layer_found(cudss):
    path = cudss.mtlayer_path()
    assert path is not None and path.endswith("libcudss_mtlayer_gomp.so.0")
    with gpulinalg.config(backend="gpu"), factorize(poisson2d(30)) as fac:
        assert fac.info["multithreaded_analysis"] is True
        assert fac.info["factor_nnz"] > 0


def test_factorization_stays_on_gpu(xp_gpu, rng):
    a = spd(150, rng)
    with gpulinalg.config(backend="gpu"):
        fac = factorize(a)
    with gpulinalg.config(backend="cpu"):  # the factorization keeps its backend
        x = fac.solve(np.ones(150))
    assert gpulinalg.last_run().backend == "gpu"
    np.testing.assert_allclose(x, spla.spsolve(a.tocsc(), np.ones(150)), rtol=1e-9)
    fac.free()


def test_cusolversp_logdet_not_available(xp_gpu, rng):
    with gpulinalg.config(backend="gpu", sparse_gpu_solver="cusolversp"), \
            factorize(spd(30, rng)) as fac:
        assert fac.info["library"] == "cusolversp"
        with pytest.raises(NotImplementedError, match="cuSOLVER-Sp"):
            fac.logdet()


@pytest.mark.parametrize("kind", ["spd", "unsymmetric", "indefinite"])
def test_cusolversp_backend(xp_gpu, rng, kind):
    a = {"spd": spd, "unsymmetric": unsymmetric, "indefinite": sym_indefinite}[kind](120, rng)
    b = rng.standard_normal((120, 2))
    with gpulinalg.config(backend="gpu", sparse_gpu_solver="cusolversp"):
        x = solve(a, b)
        assert gpulinalg.last_run().details["library"] == "cusolversp"
        with factorize(a) as fac:
            fac.refactorize(a * 3.0)
            y = fac.solve(b)
    ref = spla.spsolve(a.tocsc(), b)
    np.testing.assert_allclose(x, ref, rtol=1e-9)
    np.testing.assert_allclose(y, ref / 3, rtol=1e-9)


def test_cusolversp_errors(xp_gpu, rng):
    with gpulinalg.config(backend="gpu", sparse_gpu_solver="cusolversp"):
        with pytest.raises(NotPositiveDefiniteError):
            solve(sym_indefinite(50, rng), np.ones(50), method="cholesky")
        sing = sp.csr_matrix(np.array([[1.0, 2.0, 0], [2.0, 4.0, 0], [0, 0, 1.0]]))
        with pytest.raises(LinAlgError):
            solve(sing, np.ones(3), method="lu")


def test_forced_cudss_setting(cudss, rng):
    a = spd(60, rng)
    with gpulinalg.config(backend="gpu", sparse_gpu_solver="cudss"):
        x = solve(a, np.ones(60))
        assert gpulinalg.last_run().details["library"] == "cudss"
        solve(a, np.ones(60), method="qr")  # cuDSS has no QR: cuSOLVER-Sp serves it
        assert gpulinalg.last_run().details["library"] == "cusolversp"
    np.testing.assert_allclose(x, spla.spsolve(a.tocsc(), np.ones(60)), rtol=1e-9)


def test_qr_uses_cusolversp(xp_gpu, rng):
    a = unsymmetric(80, rng)
    with gpulinalg.config(backend="gpu"):
        x = solve(a, np.ones(80), method="qr")
    assert gpulinalg.last_run().details["library"] == "cusolversp"
    np.testing.assert_allclose(x, spla.spsolve(a.tocsc(), np.ones(80)), rtol=1e-9)


def test_pool_limit_routes_to_cpu(xp_gpu, rng):
    pool = xp_gpu.get_default_memory_pool()
    a = poisson2d(60)
    b = np.ones(a.shape[0])
    pool.set_limit(size=1024)
    try:
        with gpulinalg.config(backend="gpu"), pytest.warns(FallbackWarning):
            x = solve(a, b)
    finally:
        pool.set_limit(size=0)
    assert gpulinalg.last_run().backend == "cpu"
    np.testing.assert_allclose(x, spla.spsolve(a.tocsc(), b), rtol=1e-9)


def test_refactorize_timing_and_values_on_device(xp_gpu, cudss):
    import cupyx.scipy.sparse as csp
    a = csp.csr_matrix(poisson2d(100))
    b = xp_gpu.ones(a.shape[0])
    with factorize(a) as fac:
        x1 = fac.solve(b)
        fac.refactorize(a.data * 4.0)
        x2 = fac.solve(b)
        info = fac.info
    np.testing.assert_allclose(x2.get(), x1.get() / 4, rtol=1e-10)
    assert info["library"] == "cudss" and info["refactorizations"] == 1
    assert info["factorization_seconds"] < 1.0


def test_gpu_factorization_oom_moves_work_to_host(xp_gpu, rng):
    from gpulinalg import testing
    a = spd(120, rng)
    b = rng.standard_normal(120)
    ref = spla.spsolve(a.tocsc(), b)
    with gpulinalg.config(backend="gpu"):
        fac = factorize(a)
    assert fac.info["backend"] == "gpu"
    with testing.inject_fault("oom", op="sparse.SparseFactorization.solve"):
        with pytest.warns(FallbackWarning):
            x = fac.solve(b)
    np.testing.assert_allclose(x, ref, rtol=1e-9)
    assert gpulinalg.last_run().fell_back
    assert fac.info["backend"] == "gpu"  # a solve's fallback leaves the factors where they are
    with testing.inject_fault("oom", op="sparse.SparseFactorization.refactorize"):
        with pytest.warns(FallbackWarning):
            fac.refactorize(a * 2.0)
    assert fac.info["backend"] == "cpu"  # new values factorized on the host: it moved
    np.testing.assert_allclose(fac.solve(b), ref / 2, rtol=1e-9)
    fac.free()
