"""Issue 44: SciPy's names ``spsolve``, ``splu``, ``factorized``, ``spsolve_triangular`` with
SciPy's semantics, on both backends, compared with SciPy on the same inputs."""

import inspect

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import gpulinalg
from gpulinalg import sparse
from gpulinalg.sparse import factorized, splu, spsolve, spsolve_triangular

from tests.support.sparse_ref import spd, unsymmetric


def poisson3d(m):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    i = sp.identity(m)
    return (sp.kron(sp.kron(t, i), i) + sp.kron(sp.kron(i, t), i)
            + sp.kron(sp.kron(i, i), t)).tocsr()


def convection_diffusion(m, peclet=50.0):
    """2-D -Δu + c·∇u, upwind differences: unsymmetric, nonsingular."""
    h = 1.0 / (m + 1)
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m)) / h**2
    d = sp.diags([-1.0, 1.0], [-1, 0], shape=(m, m)) * (peclet / h)
    i = sp.identity(m)
    return (sp.kron(i, t + d) + sp.kron(t + 0.5 * d, i)).tocsr()


MATRICES = {
    "poisson3d": lambda rng: poisson3d(8),
    "convection_diffusion": lambda rng: convection_diffusion(20),
    "random_spd": lambda rng: spd(300, rng),
    "complex": lambda rng: unsymmetric(200, rng, np.complex128),
}


def rhs(rng, shape, dtype=np.float64):
    b = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(shape)
    return b.astype(dtype)


def close(x, ref, a):
    scale = np.abs(ref).max() if ref.size else 1.0
    np.testing.assert_allclose(x, ref, atol=1e-9 * scale, rtol=0)


@pytest.mark.parametrize("shape", ["n", "n1", "nk"])
@pytest.mark.parametrize("name", sorted(MATRICES))
def test_spsolve_matches_scipy(backend, rng, name, shape):
    a = MATRICES[name](rng)
    n = a.shape[0]
    b = rhs(rng, {"n": (n,), "n1": (n, 1), "nk": (n, 3)}[shape], a.dtype)
    a0, b0 = a.copy(), b.copy()
    x = spsolve(a, b)
    ref = spla.spsolve(a.tocsc(), b)
    assert type(x) is np.ndarray and x.shape == ref.shape and x.dtype == ref.dtype
    close(x, ref, a)
    assert (a != a0).nnz == 0 and np.array_equal(b, b0)  # inputs not modified


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_spsolve_sparse_b(backend, rng, fmt):
    a = convection_diffusion(12).asformat(fmt)
    b = sp.random(a.shape[0], 4, density=0.05, random_state=rng, format="lil")
    b[0, 1] = 1.0
    b = b.tocsc()
    x = spsolve(a, b)
    ref = spla.spsolve(a, b)
    assert sp.issparse(x) and type(x) is type(ref) and x.shape == ref.shape
    close(x.toarray(), ref.toarray(), a)
    xv = spsolve(a, b[:, [1]])  # a sparse (n, 1) is a vector: dense (n,)
    assert type(xv) is np.ndarray and xv.shape == (a.shape[0],)


def test_spsolve_dtypes_as_scipy(backend):
    a = sp.csr_array(np.array([[4, 1, 0], [1, 5, 2], [0, 2, 6]]))
    for ad, bd in [(np.int64, np.int64), (np.float32, np.float32), (np.float32, np.float64),
                   (np.float64, np.complex128), (np.complex64, np.float32)]:
        x = spsolve(a.astype(ad), np.ones(3, dtype=bd))
        assert x.dtype == spla.spsolve(a.astype(ad).tocsc(), np.ones(3, dtype=bd)).dtype


def test_spsolve_singular_warns_and_gives_nan(backend):
    a = sp.eye(10, format="csr")
    a[9, 9] = 0.0
    with pytest.warns(spla.MatrixRankWarning, match="exactly singular"):
        x = spsolve(a, np.ones(10))
    assert np.isnan(x).all() and x.shape == (10,)
    with pytest.warns(spla.MatrixRankWarning):
        assert np.isnan(spsolve(sp.csc_array((5, 5)), np.ones((5, 2)))).all()
    with pytest.raises(RuntimeError, match="Factor is exactly singular"):  # as SciPy
        spsolve(sp.csc_array((5, 5)), sp.csc_array(np.ones((5, 2))))
    with pytest.raises(gpulinalg.SingularMatrixError):  # solve keeps its strict contract
        sparse.solve(a, np.ones(10))


def test_spsolve_errors_and_dense_a(backend):
    with pytest.warns(sp.SparseEfficiencyWarning), pytest.raises(ValueError, match="square"):
        spsolve(np.ones((3, 4)), np.ones(3))
    with pytest.raises(ValueError, match="dimension mismatch"):
        spsolve(sp.eye(3, format="csr"), np.ones(2))
    with pytest.raises(ValueError, match="permc_spec"):
        spsolve(sp.eye(3, format="csr"), np.ones(3), permc_spec="METIS")
    a = np.array([[1.0, 2.0], [2.0, 0.0]])
    with pytest.warns(sp.SparseEfficiencyWarning):
        x = spsolve(a, np.array([[2.0, 0.0], [2.0, 2.0]]))
    np.testing.assert_allclose(x, [[1.0, 1.0], [0.5, -0.5]])


@pytest.mark.parametrize("permc_spec", [None, "NATURAL", "MMD_ATA", "MMD_AT_PLUS_A", "COLAMD"])
def test_permc_spec(backend, rng, permc_spec):
    a = convection_diffusion(10)
    b = rhs(rng, a.shape[0])
    close(spsolve(a, b, permc_spec=permc_spec), spla.spsolve(a.tocsc(), b), a)
    lu = splu(a, permc_spec=permc_spec)
    ref = spla.splu(a.tocsc(), permc_spec=permc_spec)
    np.testing.assert_array_equal(lu.perm_c, ref.perm_c)


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_splu_matches_scipy(backend, rng, name):
    a = MATRICES[name](rng)
    n = a.shape[0]
    lu, ref = splu(a), spla.splu(a.tocsc())
    assert lu.shape == (n, n) and lu.nnz > 0
    for shape in ((n,), (n, 2)):
        b = rhs(rng, shape, a.dtype)
        for trans in "NTH":
            close(lu.solve(b, trans), ref.solve(b, trans), a)
    pr = sp.csc_array((np.ones(n), (lu.perm_r, np.arange(n))))
    pc = sp.csc_array((np.ones(n), (np.arange(n), lu.perm_c)))
    err = abs(pr @ a @ pc - lu.L @ lu.U).max()
    assert err <= 100 * np.finfo(float).eps * abs(a).max()
    np.testing.assert_array_equal(lu.perm_r, ref.perm_r)
    np.testing.assert_array_equal(lu.perm_c, ref.perm_c)


def test_splu_and_factorized_errors(backend, rng):
    a = convection_diffusion(5)
    with pytest.raises(ValueError, match="can only factor square matrices"):
        splu(a[:, :10])
    with pytest.raises(ValueError, match="can only factor square matrices"):
        factorized(a[:, :10])
    for fn in (splu, factorized):
        with pytest.raises(RuntimeError, match="Factor is exactly singular"):
            fn(sp.csc_array((5, 5)))
    lu = splu(a)
    with pytest.raises(ValueError, match="incompatible size"):
        lu.solve(np.ones(3))
    with pytest.raises(ValueError, match="too deep"):
        lu.solve(np.ones((25, 2, 2)))
    with pytest.raises(TypeError, match="Cannot cast array data"):
        lu.solve(np.ones(25, dtype=complex))
    with pytest.raises(ValueError, match="trans"):
        lu.solve(np.ones(25), trans="X")
    with pytest.warns(sp.SparseEfficiencyWarning):
        splu(a.toarray())


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_factorized_matches_scipy(backend, rng, name):
    a = MATRICES[name](rng)
    solve = factorized(a)
    b = rhs(rng, (a.shape[0], 2), a.dtype)
    close(solve(b), spla.splu(a.tocsc()).solve(b), a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit_diagonal", [False, True])
def test_spsolve_triangular_matches_scipy(backend, rng, lower, unit_diagonal, dtype):
    n = 200
    a = sp.random(n, n, density=0.05, random_state=rng) + sp.diags(rng.random(n) + 1.0)
    a = (sp.tril(a) if lower else sp.triu(a)).astype(dtype).tocsr()
    for shape in ((n,), (n, 3)):
        b = rhs(rng, shape, dtype)
        a0, b0 = a.copy(), b.copy()
        x = spsolve_triangular(a, b, lower=lower, unit_diagonal=unit_diagonal)
        ref = spla.spsolve_triangular(a, b, lower=lower, unit_diagonal=unit_diagonal)
        assert x.dtype == ref.dtype and x.shape == ref.shape
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(x, ref, rtol=tol, atol=tol * abs(ref).max())
        assert (a != a0).nnz == 0 and np.array_equal(b, b0)


def test_spsolve_triangular_errors(backend):
    with pytest.raises(np.linalg.LinAlgError, match="zero entry on diagonal"):
        spsolve_triangular(sp.csr_array((4, 4)), np.ones(4))
    with pytest.warns(sp.SparseEfficiencyWarning), pytest.raises(ValueError, match="square"):
        spsolve_triangular(np.zeros((3, 4)), np.ones(3))
    with pytest.raises(ValueError, match="first dimension of b"):
        spsolve_triangular(sp.eye(3, format="csr"), np.ones(2))
    x = spsolve_triangular(sp.csr_array(np.tril(np.ones((3, 3)))) * 0 + sp.eye(3), np.ones(3),
                           unit_diagonal=True)
    np.testing.assert_allclose(x, np.ones(3))


def test_empty(backend):
    assert spsolve(sp.csr_array((0, 0)), np.ones(0)).shape == (0,)
    assert splu(sp.csc_array((0, 0))).shape == (0, 0)
    assert spsolve_triangular(sp.eye(3, format="csr"), np.ones((3, 0))).shape == (3, 0)


@pytest.mark.parametrize("ours, theirs", [(spsolve, spla.spsolve), (splu, spla.splu),
                                          (factorized, spla.factorized),
                                          (spsolve_triangular, spla.spsolve_triangular)])
def test_signatures_are_scipys(ours, theirs):
    mine = [(p.name, p.default) for p in inspect.signature(ours).parameters.values()]
    assert mine == [(p.name, p.default) for p in inspect.signature(theirs).parameters.values()]


def test_last_run_names_the_call(rng):
    a = convection_diffusion(6)
    spsolve(a, np.ones(a.shape[0]))
    assert gpulinalg.last_run().op == "sparse.spsolve"
    splu(a)
    assert gpulinalg.last_run().op == "sparse.splu"


@pytest.mark.gpu
def test_cupy_in_cupy_out(xp_gpu, rng):
    import cupyx.scipy.sparse as csp
    a = convection_diffusion(15)
    n = a.shape[0]
    b = rhs(rng, (n, 2))
    ca, cb = csp.csr_matrix(a), xp_gpu.asarray(b)
    x = spsolve(ca, cb)
    assert isinstance(x, xp_gpu.ndarray) and gpulinalg.last_run().backend == "gpu"
    close(x.get(), spla.spsolve(a.tocsc(), b), a)
    lu = splu(ca)
    x = lu.solve(cb, "T")
    assert isinstance(x, xp_gpu.ndarray)
    close(x.get(), spla.splu(a.tocsc()).solve(b, "T"), a)
    err = abs(lu.L @ lu.U - sp.csc_array((np.ones(n), (lu.perm_r, np.arange(n)))) @ a
              @ sp.csc_array((np.ones(n), (np.arange(n), lu.perm_c)))).max()
    assert err <= 1e-12 * abs(a).max()
    xs = spsolve(ca, csp.csc_matrix(cb))
    assert csp.issparse(xs)
    close(xs.toarray().get(), spla.spsolve(a.tocsc(), b), a)
    t = sp.tril(a).tocsr()
    xt = spsolve_triangular(csp.csr_matrix(t), cb)
    assert isinstance(xt, xp_gpu.ndarray) and gpulinalg.last_run().backend == "gpu"
    np.testing.assert_allclose(xt.get(), spla.spsolve_triangular(t, b), rtol=1e-10)
