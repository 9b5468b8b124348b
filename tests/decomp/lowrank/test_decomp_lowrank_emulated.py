"""The GPU branches of the low-rank family, run against a CPU stand-in for CuPy.

They compare with the CPU twins: same sketch (the counter-based generator is shared), same
algorithm, so results agree to rounding. The real CuPy, kernels and streams are exercised by
the ``gpu``-marked tests."""

import numpy as np
import pytest
import scipy.sparse as sp

from gpulinalg.decomp.lowrank import (_ooc_cuda, _ooc_xp, _randomized_xp, _truncated_cuda,
                                      _truncated_host)
from gpulinalg.decomp.pca import _pca_cuda, _pca_host, _pca_solvers
from gpulinalg.decomp._kernels import _ritz_cuda
from gpulinalg._runtime import staging
from gpulinalg.decomp.lowrank._ooc_source import HostMatrix
from gpulinalg.decomp.lowrank._truncated_plan import resolve_plan

from tests.support.lowrank_emulator import Dev, dev, emulated_cupy


@pytest.fixture
def fake(monkeypatch):
    with emulated_cupy(monkeypatch) as cupy:
        yield cupy


def known(rng, m, n, s, dtype=np.float64):
    cplx = np.dtype(dtype).kind == "c"

    def basis(rows):
        z = rng.standard_normal((rows, len(s))) + (1j * rng.standard_normal((rows, len(s)))
                                                   if cplx else 0)
        return np.linalg.qr(z)[0]
    return ((basis(m) * s) @ basis(n).conj().T).astype(dtype)


def plan_for(a, k, **kw):
    return resolve_plan(a.shape, k, dtype=a.dtype, random_state=0, **kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("shape", [(200, 70), (60, 150)])
@pytest.mark.parametrize("normalizer", ["auto", "QR", "LU"])
def test_randomized_gpu_branch_matches_cpu(fake, rng, dtype, shape, normalizer):
    a = known(rng, *shape, 0.85 ** np.arange(min(shape)), dtype)
    plan = plan_for(a, 6, method="randomized", power_iteration_normalizer=normalizer,
                    error_estimate=True)
    got = _truncated_cuda.truncated_svd(dev(a), plan)
    ref = _truncated_host.truncated_svd(a, plan)
    tol = 1e-4 if np.dtype(dtype).char in "fF" else 1e-10
    assert isinstance(got.S, Dev) and got.U.dtype == dtype
    assert np.allclose(np.asarray(got.S), ref.S, rtol=tol)
    assert np.allclose(np.asarray(got.U) * np.asarray(got.S) @ np.asarray(got.Vh),
                       ref.U * ref.S @ ref.Vh, atol=tol * 10)
    assert abs(got.error - ref.error) <= 1e-3 * ref.error


@pytest.mark.parametrize("shape", [(200, 70), (70, 200)])
def test_lift_kernel_and_generic_lift_agree(fake, rng, monkeypatch, shape):
    dtype = np.float32  # the Gram route (double precision takes the QR route)
    a = known(rng, *shape, 0.85 ** np.arange(70), dtype)
    plan = plan_for(a, 6, method="randomized")
    calls = []
    lift = _ritz_cuda.lift
    monkeypatch.setattr(_ritz_cuda, "lift", lambda *args: calls.append(1) or lift(*args))
    fused = _truncated_cuda.truncated_svd(dev(a), plan)
    monkeypatch.setattr(_ritz_cuda, "MAX_W_BYTES", 0)  # [W; W/sigma; sigma] too large: CuPy calls
    generic = _truncated_cuda.truncated_svd(dev(a), plan)
    assert calls == [1]
    tol = 1e-6
    for x, y in zip(fused, generic):
        assert x.dtype == y.dtype and np.allclose(np.asarray(x), np.asarray(y), rtol=tol,
                                                  atol=tol)


def test_exact_and_gesvdr_routes(fake, rng):
    a = known(rng, 80, 40, np.linspace(3, 1, 40))
    ref = np.linalg.svd(a, compute_uv=False)[:4]
    got = _truncated_cuda.truncated_svd(dev(a), plan_for(a, 4, method="exact"))
    assert np.allclose(np.asarray(got.S), ref)
    tiny = np.array([[3.0]])
    got = _truncated_cuda.truncated_svd(dev(tiny), plan_for(tiny, 1, method="gesvdr"))
    assert np.allclose(np.asarray(got.S), [3.0])


def test_sparse_gpu_branch(fake, rng):
    a = sp.csr_matrix(known(rng, 150, 60, 0.7 ** np.arange(60)))
    plan = plan_for(a, 3, method="randomized")
    ref = _truncated_host.truncated_svd(a, plan)
    import cupyx.scipy.sparse as cps  # the stand-in
    for x in (a, cps.csr_matrix(a)):  # SciPy CSR is moved over; CuPy CSR is used as is
        got = _truncated_cuda.truncated_svd(x, plan)
        assert np.allclose(np.asarray(got.S), ref.S, rtol=1e-10)


def test_nan_sketch_reruns_with_householder(fake, rng, monkeypatch):
    a = known(rng, 120, 50, 0.8 ** np.arange(50)).astype(np.float32)
    calls = []
    real = _randomized_xp.orthonormalize

    def poisoned(engine, y, method="QR", *, passes=1):
        calls.append(method)
        if method == "CholQR":
            return y * np.nan
        return real(engine, y, method, passes=passes)

    monkeypatch.setattr(_randomized_xp, "orthonormalize", poisoned)
    got = _truncated_cuda.truncated_svd(dev(a), plan_for(a, 4, method="randomized"))
    assert "CholQR" in calls and np.isfinite(np.asarray(got.S)).all()
    assert np.allclose(np.asarray(got.S), 0.8 ** np.arange(4), rtol=1e-5)


class Dataset:
    def __init__(self, x):
        self._x, self.shape, self.dtype = x, x.shape, x.dtype

    def __getitem__(self, index):
        return np.array(self._x[index])


@pytest.mark.parametrize("source", ["array", "dataset"])
def test_streamer_gpu_branch_matches_cpu(fake, rng, source, monkeypatch):
    monkeypatch.setattr(staging, "_MIN_THREAD_BYTES", 1024)  # exercise the threaded fill
    a = known(rng, 3000, 40, 0.8 ** np.arange(40)).astype(np.float32)
    src = a if source == "array" else Dataset(a)
    plan = plan_for(a, 4, method="randomized", out_of_core=True, error_estimate=True)
    matrix = HostMatrix(src, np.float32)
    got = _truncated_cuda.truncated_svd_streamed(matrix, plan)
    ref = _truncated_host.truncated_svd(HostMatrix(a, np.float32), plan)
    assert np.allclose(got.S, ref.S, rtol=1e-5)
    assert abs(got.error - ref.error) < 1e-3 * ref.error


def test_streamer_nan_raises(fake):
    a = np.ones((2000, 10), np.float32)
    a[1500, 2] = np.inf
    plan = plan_for(a, 2, method="randomized", out_of_core=True)
    with pytest.raises(ValueError, match="infs or NaNs"):
        _truncated_cuda.truncated_svd_streamed(HostMatrix(a, np.float32), plan)


@pytest.mark.parametrize("solver", ["full", "covariance_eigh", "randomized"])
def test_pca_gpu_branches_match_cpu(fake, rng, solver):
    X = (rng.standard_normal((400, 30)) * np.linspace(5, 0.1, 30) + 3).astype(np.float32)
    cfg = _pca_solvers.FitConfig(solver, 5, 10, "auto", 123, np.dtype(np.float32), True, False)
    ref = _pca_host.fit(HostMatrix(X, np.float32), cfg)
    got = _pca_cuda.fit(HostMatrix(X, np.float32), cfg)
    for key in ("explained_variance", "mean", "singular_values"):
        assert np.allclose(np.asarray(got[key]), ref[key], rtol=1e-4, atol=1e-5)
    streamed = _pca_cuda.fit_streamed(HostMatrix(Dataset(X), np.float32), cfg)
    assert np.allclose(np.asarray(streamed["explained_variance"]), ref["explained_variance"],
                       rtol=1e-4)


def test_streamed_projection_gpu_branch(fake, rng):
    X = rng.standard_normal((2500, 12)).astype(np.float32)
    comp = np.linalg.qr(rng.standard_normal((12, 3)))[0].T.astype(np.float32)
    mean, scale = X.mean(axis=0), np.array([1.0, 2.0, 0.5], np.float32)
    got = _ooc_xp.streamed_project(_ooc_cuda.CupyStreamer(HostMatrix(Dataset(X), np.float32)),
                                   dev(comp), dev(mean), dev(scale))
    assert got.dtype == np.float32
    assert np.allclose(got, ((X - mean) @ comp.T) * scale, atol=1e-5)


@pytest.mark.parametrize("whiten", [False, True])
def test_pca_projection_gpu_twins_match_cpu(fake, rng, whiten):
    X = rng.standard_normal((300, 12)).astype(np.float32)
    comp = np.linalg.qr(rng.standard_normal((12, 3)))[0].T.astype(np.float32)
    mean, ev = X.mean(axis=0), np.array([4.0, 2.0, 0.0], np.float32)
    ev = ev if whiten else None
    ref = _pca_host.transform(X, comp, mean, ev)
    for got in (_pca_cuda.transform(dev(X), dev(comp), dev(mean), dev(ev)),
                _pca_cuda.transform(HostMatrix(X, np.float32), dev(comp), dev(mean), dev(ev)),
                _pca_cuda.transform_streamed(HostMatrix(Dataset(X), np.float32), dev(comp),
                                             dev(mean), dev(ev))):
        # relative too: whitening by a zero variance scales a column to ~1e19 in float32, and
        # the host's X C^T - mean C^T (scikit-learn's) cancels apart from (X - mean) C^T there
        assert got.dtype == np.float32 and np.allclose(np.asarray(got), ref, rtol=1e-4,
                                                       atol=1e-5)
    back = _pca_cuda.inverse_transform(dev(ref), dev(comp), dev(mean), dev(ev))
    assert np.allclose(np.asarray(back), _pca_host.inverse_transform(ref, comp, mean, ev),
                       atol=1e-5)


def test_large_sketch_uses_library_cholesky(fake, rng):
    a = known(rng, 400, 200, 0.97 ** np.arange(200))
    plan = plan_for(a, 80, method="randomized")  # l = 90 > what the fused kernel takes
    got = _truncated_cuda.truncated_svd(dev(a), plan)
    ref = _truncated_host.truncated_svd(a, plan)
    assert np.allclose(np.asarray(got.S), ref.S, rtol=1e-8)
