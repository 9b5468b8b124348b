"""Issues 14 and 18 on the device, per GPU library (cuDSS and cuSOLVER-Sp).

Singular and numerically singular systems as CuPy arrays must raise SingularMatrixError (or,
with check="warn" and no zero pivot, warn IllConditionedWarning); transposed solves, LU
log-determinants and the condition estimate must match SciPy/NumPy.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse.linalg as spla

import gpulinalg
from gpulinalg import IllConditionedWarning, SingularMatrixError
from gpulinalg.sparse import factorize, solve

from tests.support.sparse_ref import (graded, neumann1d, numerically_singular, spd, sym_indefinite,
                                      unsymmetric)

pytestmark = pytest.mark.gpu


@pytest.fixture(params=["cudss", "cusolversp"])
def library(request, xp_gpu):
    if request.param == "cudss":
        from gpulinalg.sparse import _cudss_cuda
        if not _cudss_cuda.available():
            pytest.skip("cuDSS not loadable")
    with gpulinalg.config(backend="gpu", sparse_gpu_solver=request.param):
        yield request.param


def cupy_csr(a):
    import cupyx.scipy.sparse as csp
    return csp.csr_matrix(a)


@pytest.mark.parametrize("n", [50, 1000, 20000])
@pytest.mark.parametrize("method", ["auto", "ldlt", "lu", "qr"])
def test_neumann_laplacian_raises(library, xp_gpu, method, n):
    """Issue 18: before, cuSOLVER-Sp (and method="qr" with cuDSS) returned a finite x with
    residual 2.6-7.3 and a backward error of 2e-16."""
    a = cupy_csr(neumann1d(n))
    b = xp_gpu.ones(n)
    with pytest.raises(SingularMatrixError):
        solve(a, b, method=method, check="raise")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            solve(a, b, method=method, check="warn")
        except SingularMatrixError:
            pass
        else:  # no zero pivot seen: then the condition rule must have warned
            assert any(issubclass(w.category, IllConditionedWarning) for w in caught)


@pytest.mark.parametrize("seed", range(4))
def test_numerically_singular(library, xp_gpu, seed):
    a = cupy_csr(numerically_singular(20, seed))
    b = xp_gpu.asarray(np.random.default_rng(seed).standard_normal(20))
    with pytest.raises(SingularMatrixError):
        solve(a, b)
    with pytest.raises(SingularMatrixError):
        solve(a, xp_gpu.ones(20))  # consistent right-hand side: x modest, still flagged


@pytest.mark.parametrize("cond", [1e18, 1e22])
def test_graded_beyond_eps_is_flagged(library, xp_gpu, cond):
    a = cupy_csr(graded(40, cond, seed=3))
    b = xp_gpu.asarray(np.random.default_rng(4).standard_normal(40))
    with pytest.raises(SingularMatrixError):
        solve(a, b)


@pytest.mark.parametrize("cond", [1e3, 1e9])
def test_well_conditioned_is_silent(library, xp_gpu, cond):
    a = graded(40, cond, seed=1)
    b = np.random.default_rng(2).standard_normal(40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = solve(cupy_csr(a), xp_gpu.asarray(b), check="warn")
    np.testing.assert_allclose(x.get(), spla.spsolve(a.tocsc(), b), rtol=1e-9 * cond)


@pytest.mark.parametrize("trans", ["N", "T", "H"])
@pytest.mark.parametrize("kind", ["spd", "indefinite", "unsymmetric"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_trans(library, xp_gpu, rng, kind, trans, dtype):
    make = {"spd": spd, "indefinite": sym_indefinite, "unsymmetric": unsymmetric}[kind]
    a = make(60, rng, dtype) if kind != "indefinite" else make(60, rng).astype(dtype)
    b = rng.standard_normal((60, 2)).astype(dtype)
    ref = spla.splu(a.tocsc()).solve(b, trans=trans)
    with factorize(cupy_csr(a)) as fac:
        assert fac.info["library"] == library
        x = fac.solve(xp_gpu.asarray(b), trans=trans)
        np.testing.assert_allclose(x.get(), ref, rtol=1e-9, atol=1e-12)
        fac.refactorize(cupy_csr(a * 2.0))
        x = fac.solve(xp_gpu.asarray(b), trans=trans)
        np.testing.assert_allclose(x.get(), ref / 2.0, rtol=1e-9, atol=1e-12)


def test_preconditioner(library, rng):
    a = unsymmetric(100, rng)
    b = rng.standard_normal(100)
    with factorize(a) as fac:
        x, info = spla.gmres(a, b, M=spla.aslinearoperator(fac), rtol=1e-12)
    assert info == 0
    np.testing.assert_allclose(a @ x, b, atol=1e-9)


def test_rcond(library, rng):
    a = unsymmetric(50, rng)
    dense = a.toarray()
    exact = 1.0 / (np.linalg.norm(dense, 1) * np.linalg.norm(np.linalg.inv(dense), 1))
    with factorize(a, method="lu") as fac:
        est = fac.rcond()
    assert exact * (1 - 1e-9) <= est <= 10 * exact


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_lu_logdet_cudss(xp_gpu, rng, dtype):
    from gpulinalg.sparse import _cudss_cuda
    if not _cudss_cuda.available():
        pytest.skip("cuDSS not loadable")
    a = unsymmetric(60, rng, dtype).tolil()
    a[0, 0] = a[5, 5] = 0.0
    a = a.tocsr()
    a.eliminate_zeros()
    for m in (a, -a, a[::-1].tocsr()):
        with gpulinalg.config(backend="gpu", sparse_gpu_solver="cudss"), \
                factorize(m, method="lu") as fac:
            assert fac.info["library"] == "cudss"
            sign, logabs = fac.logdet()
        ref = np.linalg.slogdet(m.toarray())
        np.testing.assert_allclose(sign, ref.sign, atol=1e-8)
        np.testing.assert_allclose(logabs, ref.logabsdet, rtol=1e-9)
