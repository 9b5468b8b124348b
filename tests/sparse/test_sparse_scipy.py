"""Issue 14, sparse: SciPy's SuperLU interface on every engine.

``solve(b, trans="N"|"T"|"H")`` as ``splu(A).solve``; a factorization wrapped by
``scipy.sparse.linalg.aslinearoperator`` and used as the preconditioner ``M`` of ``cg`` and
``gmres``; empty inputs recorded through the dispatcher's shortcut; warnings at the user's line.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import gpulinalg
from gpulinalg import GPUUnavailableError, ResidualWarning
from gpulinalg.sparse import NotPositiveDefiniteWarning, factorize, solve

from tests.support.sparse_ref import KINDS, berr, pendant, spd, unsymmetric


def host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def rhs(rng, shape, dtype):
    b = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(shape)
    return b.astype(dtype)


@pytest.mark.parametrize("trans", ["N", "T", "H"])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_trans_matches_splu(backend, rng, kind, dtype, trans):
    a = KINDS[kind](70, rng, dtype) if kind != "symmetric_indefinite" else \
        KINDS[kind](70, rng).astype(dtype)
    ref_lu = spla.splu(a.tocsc())
    with factorize(a) as fac:
        for shape in ((70,), (70, 3)):
            b = rhs(rng, shape, dtype)
            x = fac.solve(b, trans=trans)
            np.testing.assert_allclose(host(x), ref_lu.solve(b, trans=trans), rtol=1e-9,
                                       atol=1e-12)
        op = {"N": a, "T": a.T, "H": a.conj().T}[trans]
        assert berr(op, host(x), b) <= 1e-13
        # after new values, the transposed solve follows them (a GPU LU refactorizes its Aᵀ)
        fac.refactorize(a * 3.0)
        x = fac.solve(b, trans=trans)
        np.testing.assert_allclose(host(x), ref_lu.solve(b, trans=trans) / 3.0, rtol=1e-9,
                                   atol=1e-12)


def test_trans_positional_and_invalid(backend, rng):
    a = unsymmetric(30, rng)
    b = rng.standard_normal(30)
    with factorize(a) as fac:
        np.testing.assert_allclose(host(fac.solve(b, "T")), spla.spsolve(a.T.tocsc(), b),
                                   rtol=1e-10)
        with pytest.raises(ValueError, match="trans"):
            fac.solve(b, trans="C")


def test_trans_of_real_factor_with_complex_rhs(backend, rng):
    a = unsymmetric(25, rng)
    b = rhs(rng, 25, np.complex128)
    with factorize(a) as fac:
        x = fac.solve(b, trans="H")
    np.testing.assert_allclose(a.T @ host(x), b, rtol=1e-10, atol=1e-12)


def test_aslinearoperator_and_preconditioner(backend, rng):
    a = unsymmetric(80, rng)
    b = rng.standard_normal(80)
    with factorize(a) as fac:
        assert fac.shape == (80, 80) and fac.dtype == np.float64
        op = spla.aslinearoperator(fac)
        assert op.shape == (80, 80) and op.dtype == np.float64
        np.testing.assert_allclose(op.matvec(b), spla.spsolve(a.tocsc(), b), rtol=1e-10)
        np.testing.assert_allclose(op.rmatvec(b), spla.spsolve(a.T.tocsc(), b), rtol=1e-10)
        np.testing.assert_allclose(op.matmat(np.c_[b, 2 * b])[:, 1],
                                   2 * spla.spsolve(a.tocsc(), b), rtol=1e-10)
        np.testing.assert_allclose(op.rmatmat(np.c_[b, b])[:, 0],
                                   spla.spsolve(a.T.tocsc(), b), rtol=1e-10)
        calls = []
        x, info = spla.gmres(a, b, M=fac, rtol=1e-12, callback=calls.append,
                             callback_type="pr_norm")
        assert info == 0 and len(calls) <= 3  # M = A⁻¹: converged at once
        np.testing.assert_allclose(a @ x, b, atol=1e-9)


def test_preconditioner_for_cg(backend, rng):
    a = spd(120, rng)
    b = rng.standard_normal(120)
    near = (a + sp.diags(np.full(120, 0.05))).tocsr()  # a nearby SPD matrix as M
    its = {}
    for name, m in (("none", None), ("fac", spla.aslinearoperator(factorize(near)))):
        count = [0]
        x, info = spla.cg(a, b, M=m, rtol=1e-10, callback=lambda xk: count.__setitem__(
            0, count[0] + 1))
        assert info == 0
        np.testing.assert_allclose(a @ x, b, atol=1e-7)
        its[name] = count[0]
    assert its["fac"] < its["none"] and its["fac"] <= 8


def test_empty_inputs_are_recorded_shortcuts(backend):
    x = solve(sp.csr_matrix((0, 0)), np.ones(0))
    rec = gpulinalg.last_run()
    assert x.shape == (0,) and rec.op == "sparse.solve" and rec.backend == "none"
    solve(sp.identity(3, format="csr"), np.ones((3, 0)))
    assert gpulinalg.last_run().backend == "none"
    fac = factorize(sp.csr_matrix((0, 0)))
    assert gpulinalg.last_run().op == "sparse.factorize"
    assert fac.solve(np.ones(0), trans="T").shape == (0,)
    assert gpulinalg.last_run().op == "sparse.SparseFactorization.solve"


def test_empty_input_with_backend_gpu_and_no_gpu_raises(monkeypatch):
    from gpulinalg._runtime import device
    monkeypatch.setattr(device, "gpu_available", lambda: False)
    with gpulinalg.config(backend="gpu"):
        with pytest.raises(GPUUnavailableError):
            solve(sp.csr_matrix((0, 0)), np.ones(0))
        with pytest.raises(GPUUnavailableError):
            factorize(sp.csr_matrix((0, 0)))


def test_warnings_point_at_the_callers_line(rng):
    a = pendant(50)
    with gpulinalg.config(backend="cpu"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with factorize(a, method="ldlt") as fac:
                fac.solve(np.ones(a.shape[0]), refine=0, check="warn")  # ResidualWarning
            solve(pendant(30, d=0.1, spread=0), np.ones(60))  # NotPositiveDefiniteWarning
    kinds = {w.category: w.filename for w in caught}
    assert kinds[ResidualWarning] == __file__
    assert kinds[NotPositiveDefiniteWarning] == __file__


def test_fallback_warning_points_at_the_callers_line(fake_gpu, rng):
    from gpulinalg import FallbackWarning
    from gpulinalg import testing
    a = spd(30, rng)
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            solve(a, np.ones(30))
    fb = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert fb and fb[0].filename == __file__
