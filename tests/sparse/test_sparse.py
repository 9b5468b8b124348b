"""gpulinalg.sparse: solve and factorize against SciPy's spsolve, on both backends."""

import threading
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import gpulinalg
from gpulinalg import (FallbackWarning, GPUUnavailableError, LinAlgError, NotPositiveDefiniteError,
                       ResidualWarning)
from gpulinalg import testing
from gpulinalg._runtime.config import config_context
from gpulinalg.sparse import (NotPositiveDefiniteWarning, ResidualError, default_tol,
                              factorize, solve)

from tests.support.sparse_ref import (KINDS, berr, pendant, poisson2d, spd, sym_indefinite,
                                      unsymmetric)
from tests.support.threads import run_in_threads



def host(x):
    if hasattr(x, "get"):
        return x.get()
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def needs_cudss(backend):
    """Skip GPU runs without cuDSS (cuSOLVER-Sp keeps no factor: no logdet, QR-stable LDLᵀ)."""
    if backend == "gpu":
        from gpulinalg.sparse import _cudss_cuda as _cudss
        if not _cudss.available():
            pytest.skip("needs cuDSS on the GPU")


def assert_solves(a, x, b, dtype=np.float64):
    eps = np.finfo(dtype).eps
    n = a.shape[0]
    assert berr(a, host(x), host(b)) <= max(100, 10 * np.sqrt(n)) * eps * 10


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_matches_spsolve(backend, rng, kind):
    a = KINDS[kind](120, rng)
    b = rng.standard_normal(120)
    x = solve(a, b)
    ref = spla.spsolve(a.tocsc(), b)
    np.testing.assert_allclose(host(x), ref, rtol=1e-9, atol=1e-12)
    rec = gpulinalg.last_run()
    assert rec.op == "sparse.solve"
    want = {"spd": "cholesky", "symmetric_indefinite": "ldlt", "unsymmetric": "lu"}[kind]
    assert rec.details["method"] == want
    assert rec.details["backward_error"] <= rec.details["tol"]


@pytest.mark.parametrize("method", ["cholesky", "ldlt", "lu", "qr"])
def test_methods(backend, rng, method):
    a = spd(80, rng)
    b = rng.standard_normal((80, 3))
    x = solve(a, b, method=method)
    np.testing.assert_allclose(host(x), spla.spsolve(a.tocsc(), b), rtol=1e-9, atol=1e-12)
    assert gpulinalg.last_run().details["method"] == method or method == "qr"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("kind", ["spd", "unsymmetric"])
def test_dtypes(backend, rng, dtype, kind):
    a = KINDS[kind](60, rng, dtype=dtype) if kind == "spd" else unsymmetric(60, rng, dtype)
    b = (rng.standard_normal(60) + (1j * rng.standard_normal(60)
                                    if np.dtype(dtype).kind == "c" else 0)).astype(dtype)
    x = solve(a, b)
    assert x.dtype == dtype
    assert_solves(a.astype(np.complex128), x.astype(np.complex128), b, dtype)


def test_csr_coo_unsorted_duplicates_int64(backend, rng):
    a = unsymmetric(70, rng)
    b = rng.standard_normal(70)
    ref = host(solve(a, b))
    coo = a.tocoo()
    perm = rng.permutation(coo.nnz)
    row, col, val = coo.row[perm], coo.col[perm], coo.data[perm]
    # split every value into two duplicates, then shuffle: SciPy sums them
    dup = sp.coo_matrix((np.r_[val * 0.25, val * 0.75], (np.r_[row, row], np.r_[col, col])),
                        shape=a.shape)
    unsorted_csr = sp.csr_matrix((val, col, a.indptr), shape=a.shape)  # columns shuffled per row
    order = np.argsort(row, kind="stable")
    unsorted_csr = sp.csr_matrix((val[order], col[order], a.indptr), shape=a.shape)
    unsorted_csr.has_sorted_indices = False
    wide = sp.csr_matrix((a.data, a.indices.astype(np.int64), a.indptr.astype(np.int64)),
                         shape=a.shape)
    for variant in (coo, sp.coo_matrix((val, (row, col)), shape=a.shape), dup, unsorted_csr,
                    wide, a.tocsc()):
        np.testing.assert_allclose(host(solve(variant, b)), ref, rtol=1e-12, atol=1e-13)


def test_torch_inputs(backend, rng):
    torch = pytest.importorskip("torch")
    a = spd(50, rng)
    b = rng.standard_normal(50)
    ref = spla.spsolve(a.tocsc(), b)
    coo = a.tocoo()
    t_coo = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, a.shape)
    t_csr = t_coo.to_sparse_csr()
    for ta in (t_coo, t_csr):
        x = solve(ta, torch.from_numpy(b))
        assert isinstance(x, torch.Tensor)
        np.testing.assert_allclose(x.numpy(), ref, rtol=1e-10)


def test_rhs_layouts(backend, rng):
    a = sym_indefinite(64, rng)
    b = rng.standard_normal((64, 6))
    ref = spla.spsolve(a.tocsc(), b)
    for bb, want in ((b, ref), (np.asfortranarray(b), ref), (b[:, ::2], ref[:, ::2]),
                     (b[:, 0], ref[:, 0]), (b[:, :1], ref[:, :1])):
        x = solve(a, bb)
        assert x.shape == bb.shape
        np.testing.assert_allclose(host(x), want, rtol=1e-9, atol=1e-12)


def test_factorize_solve_many_refactorize(backend, rng):
    a = spd(90, rng)
    with factorize(a) as fac:
        assert fac.method == "cholesky"
        for k in (1, 4):
            b = rng.standard_normal((90, k))
            np.testing.assert_allclose(host(fac.solve(b)), spla.spsolve(a.tocsc(), b)
                                       .reshape(90, k), rtol=1e-9, atol=1e-12)
        a2 = a.copy()
        a2.data = a2.data * rng.uniform(0.5, 1.5, a2.nnz)
        a2 = (a2 + a2.T) * 0.5 + sp.diags(np.full(90, 50.0))
        a2 = sp.csr_matrix(a2)
        assert np.array_equal(a2.indptr, a.indptr) and np.array_equal(a2.indices, a.indices)
        fac.refactorize(a2)
        b = rng.standard_normal(90)
        with factorize(a2) as fresh:
            np.testing.assert_allclose(host(fac.solve(b)), host(fresh.solve(b)), rtol=1e-11)
        info = fac.info
        assert info["refactorizations"] == 1 and info["solves"] == 3
        for key in ("backend", "library", "reordering", "factor_nnz", "analysis_seconds",
                    "factorization_seconds", "solve_seconds", "backward_error"):
            assert key in info
        assert info["backend"] == backend


def test_refactorize_values_in_input_order(backend, rng):
    a = unsymmetric(40, rng).tocoo()
    row, col, val = a.row, a.col, a.data
    dup = sp.coo_matrix((np.r_[val, val], (np.r_[row, row], np.r_[col, col])), shape=a.shape)
    b = rng.standard_normal(40)
    with factorize(dup) as fac:
        new = np.r_[val * 3.0, val * 1.0]
        fac.refactorize(new)
        np.testing.assert_allclose(host(fac.solve(b)), spla.spsolve((4.0 * a).tocsc(), b),
                                   rtol=1e-10)
        with pytest.raises(ValueError, match="stored values"):
            fac.refactorize(np.ones(3))
        with pytest.raises(ValueError, match="pattern"):
            fac.refactorize(sp.identity(40, format="csr"))


@pytest.mark.parametrize("kind", ["spd", "symmetric_indefinite"])
def test_logdet_matches_slogdet(backend, rng, kind):
    needs_cudss(backend)
    a = KINDS[kind](30, rng)
    with factorize(a, method="cholesky" if kind == "spd" else "ldlt") as fac:
        sign, logabs = fac.logdet()
    ref_sign, ref_logabs = np.linalg.slogdet(a.toarray())
    assert sign == ref_sign
    np.testing.assert_allclose(logabs, ref_logabs, rtol=1e-10)


def test_logdet_one_by_one(backend):
    needs_cudss(backend)
    with factorize(sp.csr_matrix(np.array([[4.0]]))) as fac:
        np.testing.assert_allclose(fac.logdet().logabsdet, np.log(4.0))


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_logdet_lu_matches_slogdet(backend, rng, dtype):
    """LU log-determinants (issue 14): U's diagonal and both permutations' parities, also for
    a negative determinant and a matrix that needs row pivoting (zero diagonal)."""
    needs_cudss(backend)
    a = unsymmetric(40, rng, dtype).tolil()
    a[0, 0], a[3, 3] = 0.0, 0.0  # pivoting must move rows
    a = a.tocsr()
    a.eliminate_zeros()
    for m in (a, sp.csr_matrix(-a.toarray()[::-1])):  # a different sign and row order
        with factorize(m, method="lu") as fac:
            sign, logabs = fac.logdet()
        ref = np.linalg.slogdet(m.toarray())
        np.testing.assert_allclose(sign, ref.sign, atol=1e-10)
        np.testing.assert_allclose(logabs, ref.logabsdet, rtol=1e-10)


def test_refinement_lowers_backward_error(backend, rng):
    needs_cudss(backend)
    a = pendant(200)
    b = rng.standard_normal(a.shape[0])
    tol = default_tol(a.shape[0], np.float64)
    solve(a, b, method="ldlt", refine=0, check="ignore")
    first = gpulinalg.last_run().details["backward_error"]
    assert first > tol, "the unrefined LDLᵀ solve should lose accuracy on this matrix"
    x = solve(a, b, method="ldlt")
    d = gpulinalg.last_run().details
    assert d["refinement_steps"] >= 1
    assert d["backward_error"] <= tol < first
    assert d["backward_error"] < first / 100
    assert berr(a, host(x), b) <= tol
    with pytest.warns(ResidualWarning):
        solve(a, b, method="ldlt", refine=0, check="warn")
    with pytest.raises(ResidualError):
        solve(a, b, method="ldlt", refine=0, check="raise")


def test_auto_falls_back_from_cholesky(backend, rng):
    a = pendant(30, d=0.1, spread=0)  # symmetric, positive diagonal, indefinite
    b = rng.standard_normal(a.shape[0])
    with pytest.warns(NotPositiveDefiniteWarning):
        x = solve(a, b)
    np.testing.assert_allclose(host(x), spla.spsolve(a.tocsc(), b), rtol=1e-9)
    assert gpulinalg.last_run().details["method"] == "ldlt"
    with pytest.warns(NotPositiveDefiniteWarning):
        fac = factorize(a)
    assert fac.method == "ldlt" and fac.info["method_fallback"]
    fac.free()


def test_non_spd_under_cholesky_raises(backend, rng):
    a = sym_indefinite(40, rng)
    with pytest.raises(NotPositiveDefiniteError, match="not positive definite"):
        solve(a, np.ones(40), method="cholesky")
    a = pendant(20, d=0.1, spread=0)
    with pytest.raises(NotPositiveDefiniteError, match="not positive definite"):
        factorize(a, method="cholesky")
    with pytest.raises(ValueError, match="symmetric"):
        solve(unsymmetric(20, rng), np.ones(20), method="cholesky")


@pytest.mark.parametrize("method", ["auto", "lu"])
def test_singular_raises(backend, method):
    a = sp.csr_matrix(np.array([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 1.0]]))
    with pytest.raises(LinAlgError, match="singular|positive definite"):
        solve(a, np.array([1.0, 0.0, 1.0]), method=method)
    z = sp.csr_matrix((4, 4))
    with pytest.raises(LinAlgError):
        solve(z + sp.diags([1.0, 1.0, 0.0, 1.0]), np.ones(4), method=method)


def test_bad_arguments(rng):
    a = spd(5, rng)
    with pytest.raises(ValueError, match="square"):
        solve(sp.random(4, 5, density=0.5, format="csr"), np.ones(4))
    with pytest.raises(ValueError, match="rows"):
        solve(a, np.ones(6))
    with pytest.raises(ValueError, match="ndim"):
        solve(a, np.ones((5, 1, 1)))
    with pytest.raises(ValueError, match="method"):
        solve(a, np.ones(5), method="cg")
    with pytest.raises(ValueError, match="check"):
        solve(a, np.ones(5), check="maybe")
    with pytest.raises(ValueError, match="refine"):
        solve(a, np.ones(5), refine=-1)
    with pytest.raises(ValueError, match="tol"):
        solve(a, np.ones(5), tol=-1.0)
    with pytest.raises(TypeError, match="sparse"):
        solve(a.toarray(), np.ones(5))
    with pytest.raises(TypeError):
        solve(a, ["x"] * 5)
    with pytest.raises(ValueError, match="out of range|exceeds"):
        solve(sp.coo_matrix((np.ones(2), (np.array([0, 9]), np.array([0, 1]))), shape=(3, 3)),
              np.ones(3))
    fac = factorize(a)
    with pytest.raises(ValueError, match="rows"):
        fac.solve(np.ones(4))
    fac.free()
    with pytest.raises(ValueError, match="freed"):
        fac.solve(np.ones(5))


def test_nan_inf(backend, rng):
    a = spd(6, rng)
    bad = a.copy()
    bad.data[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        solve(bad, np.ones(6))
    with pytest.raises(ValueError, match="NaN"):
        solve(a, np.r_[np.inf, np.ones(5)])
    with factorize(a) as fac:
        vals = a.data.copy()
        vals[1] = np.inf
        with pytest.raises(ValueError, match="NaN"):
            fac.refactorize(vals)


def test_empty_and_one_by_one(backend):
    x = solve(sp.csr_matrix((0, 0)), np.ones(0))
    assert x.shape == (0,)
    x = solve(sp.csr_matrix((0, 0)), np.ones((0, 3)))
    assert x.shape == (0, 3)
    a = sp.csr_matrix(np.array([[4.0]]))
    np.testing.assert_allclose(solve(a, np.array([2.0])), [0.5])
    np.testing.assert_allclose(solve(a, np.ones((1, 0))).shape, (1, 0))
    with factorize(sp.csr_matrix((0, 0))) as fac:
        assert fac.solve(np.ones(0)).shape == (0,)


def test_inputs_not_modified(backend, rng):
    a = unsymmetric(50, rng).tocoo()
    a_copy = (a.row.copy(), a.col.copy(), a.data.copy())
    csr = spd(50, rng)
    csr_copy = (csr.indptr.copy(), csr.indices.copy(), csr.data.copy())
    b = rng.standard_normal((50, 2))
    b_copy = b.copy()
    solve(a, b)
    with factorize(csr) as fac:
        fac.solve(b)
        new = csr.data * 2
        new_copy = new.copy()
        fac.refactorize(new)
        fac.solve(b)
    assert all(np.array_equal(u, v) for u, v in zip((a.row, a.col, a.data), a_copy))
    assert all(np.array_equal(u, v)
               for u, v in zip((csr.indptr, csr.indices, csr.data), csr_copy))
    assert np.array_equal(b, b_copy) and np.array_equal(new, new_copy)


def test_forced_oom_falls_back(fake_gpu, rng):
    a = spd(40, rng)
    b = rng.standard_normal(40)
    ref = spla.spsolve(a.tocsc(), b)
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(FallbackWarning):
            x = solve(a, b)
    np.testing.assert_allclose(x, ref, rtol=1e-10)
    rec = gpulinalg.last_run()
    assert rec.fell_back and rec.backend == "cpu"
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(FallbackWarning):
            fac = factorize(a)
    assert fac.info["backend"] == "cpu"
    np.testing.assert_allclose(fac.solve(b), ref, rtol=1e-10)
    fac.free()


def test_sixteen_threads(backend, rng):
    systems = [(spd(60 + i, np.random.default_rng(i)), np.random.default_rng(100 + i)
                .standard_normal(60 + i)) for i in range(16)]
    results, errors = [None] * 16, []
    barrier = threading.Barrier(16)

    def work(i):
        try:
            with config_context(backend=backend):  # this thread only
                a, b = systems[i]
                barrier.wait()
                x1 = solve(a, b)
                with factorize(a) as fac:
                    x2 = fac.solve(b)
                    fac.refactorize(a * 2.0)
                    x3 = fac.solve(b)
                results[i] = (host(x1), host(x2), host(x3))
        except Exception as exc:  # collected and re-raised in the main thread
            errors.append(exc)
    run_in_threads(work, 16)
    assert not errors, errors
    for (a, b), (x1, x2, x3) in zip(systems, results):
        ref = spla.spsolve(a.tocsc(), b)
        np.testing.assert_allclose(x1, ref, rtol=1e-10)
        np.testing.assert_allclose(x2, ref, rtol=1e-10)
        np.testing.assert_allclose(x3, ref / 2, rtol=1e-10)


def test_poisson_float32(backend):
    a = poisson2d(40, np.float32)
    b = np.ones(a.shape[0], dtype=np.float32)
    x = solve(a, b)
    assert x.dtype == np.float32
    assert berr(a.astype(np.float64), x.astype(np.float64), b) <= \
        default_tol(a.shape[0], np.float32)


def test_cpu_minimum_degree_option(rng):
    a = spd(60, rng)
    with gpulinalg.config(backend="cpu"), factorize(a, reordering="MMD_AT_PLUS_A") as fac:
        np.testing.assert_allclose(fac.solve(np.ones(60)), spla.spsolve(a.tocsc(), np.ones(60)),
                                   rtol=1e-10)
        assert fac.info["reordering"] == "MMD_AT_PLUS_A" and fac.method == "cholesky"


def test_cpu_uses_symmetric_superlu(rng):
    with gpulinalg.config(backend="cpu"):
        with factorize(poisson2d(20)) as fac:
            info = fac.info
    assert info["library"] == "superlu" and info["reordering"] == "COLAMD"
    assert info["backend"] == "cpu" and info["device"] == "cpu"


def test_warnings_point_at_caller(rng):
    a = pendant(50)
    with gpulinalg.config(backend="cpu"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solve(a, np.ones(a.shape[0]), method="ldlt", refine=0, check="warn")
    assert caught and caught[0].filename == __file__


@pytest.mark.parametrize("kind, method", [("spd", "cholesky"), ("symmetric_indefinite", "ldlt"),
                                          ("unsymmetric", "lu")])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_cpu_refactorize_reuses_the_ordering(rng, kind, method, dtype):
    """SuperLU refactorizations factor the matrix permuted by the first ordering, with
    ``NATURAL``: solutions and log-determinants as from a fresh factorization, also when new
    values make LU pivot elsewhere."""
    a = KINDS[kind](60, rng, dtype)
    if kind == "unsymmetric":  # new values entry by entry
        a2 = a.copy()
        a2.data = a2.data * rng.uniform(0.5, 2.0, a2.nnz)
    else:  # D A D: same pattern, still Hermitian, same inertia
        d = sp.diags(rng.uniform(0.5, 2.0, 60))
        a2 = (d @ a @ d).tocsr()
    assert np.array_equal(a2.indices, a.indices) and np.array_equal(a2.indptr, a.indptr)
    b = rng.standard_normal((60, 2)).astype(dtype)
    with gpulinalg.config(backend="cpu"), factorize(a, method=method) as fac:
        first = fac._factor._order
        fac.refactorize(a2)
        assert first is None and fac._factor._q is not None  # the reused ordering was taken
        x = fac.solve(b)
        np.testing.assert_allclose(a2 @ x, b, rtol=1e-9, atol=1e-9)
        if method != "lu":
            sign, logabs = fac.logdet()
            ref_sign, ref_logabs = np.linalg.slogdet(a2.toarray())
            np.testing.assert_allclose(sign, ref_sign, atol=1e-9)
            np.testing.assert_allclose(logabs, ref_logabs, rtol=1e-10)
        fac.refactorize(a)  # and back
        np.testing.assert_allclose(a @ fac.solve(b), b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("setting, cudss_loads, method, want", [
    ("auto", True, "auto", "CuDSSFactor"),
    ("auto", False, "cholesky", "CuSolverSpFactor"),
    ("auto", True, "qr", "CuSolverSpFactor"),
    ("cudss", True, "lu", "CuDSSFactor"),
    ("cudss", True, "qr", "CuSolverSpFactor"),  # cuDSS has no QR
    ("cusolversp", True, "ldlt", "CuSolverSpFactor"),
])
def test_sparse_gpu_solver_setting_picks_the_library(monkeypatch, setting, cudss_loads, method,
                                                     want):
    """The GPU library follows ``config(sparse_gpu_solver=...)``, not the environment."""
    from gpulinalg.sparse import _cudss_cuda, _engine_cuda
    monkeypatch.setattr(_cudss_cuda, "available", lambda: cudss_loads)
    monkeypatch.setenv("GPULINALG_SPARSE_GPU_LIBRARY", "cusolversp" if want == "CuDSSFactor"
                       else "cudss")  # the old variable is ignored
    with gpulinalg.config(sparse_gpu_solver=setting):
        assert _engine_cuda.factor_class(method).__name__ == want
    assert gpulinalg.get_config().sparse_gpu_solver.value == "auto"


def test_sparse_gpu_solver_invalid_value():
    with pytest.raises(ValueError, match="sparse_gpu_solver"):
        gpulinalg.config(sparse_gpu_solver="mumps")
    with pytest.raises(ValueError, match="sparse_gpu_solver"):
        with gpulinalg.config(sparse_gpu_solver="CUDSS!"):
            pass
    assert gpulinalg.get_config().sparse_gpu_solver.value == "auto"


def test_forced_cudss_without_cudss_is_an_error(fake_gpu, monkeypatch, rng):
    """``sparse_gpu_solver="cudss"`` with cuDSS missing: a clear error from the GPU run (it
    reaches the choice through the dispatcher), not a silent cuSOLVER-Sp."""
    from gpulinalg.sparse import _cudss_cuda, _engine_cuda
    monkeypatch.setattr(_cudss_cuda, "available", lambda: False)
    with gpulinalg.config(sparse_gpu_solver="cudss"):
        with pytest.raises(GPUUnavailableError, match="sparse_gpu_solver='cudss'"):
            _engine_cuda.factor_class("cholesky")
        with gpulinalg.config(backend="gpu"), pytest.raises(GPUUnavailableError, match="cuDSS"):
            solve(spd(10, rng), np.ones(10))


def test_cusolversp_alloc_failure_is_an_out_of_memory():
    """cuSOLVER-Sp's ALLOC_FAILED reaches the dispatcher as a MemoryError (a visible CPU
    fallback); its other errors stay what they are."""
    cusolver = pytest.importorskip("nvmath.bindings.cusolver")
    from gpulinalg.sparse._cusolversp_cuda import as_memory_error
    mem = as_memory_error(cusolver.cuSOLVERError(int(cusolver.Status.ALLOC_FAILED)))
    assert isinstance(mem, MemoryError) and "ALLOC_FAILED" in str(mem)
    assert as_memory_error(cusolver.cuSOLVERError(int(cusolver.Status.INTERNAL_ERROR))) is None
    assert as_memory_error(ValueError("x")) is None
