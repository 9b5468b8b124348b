"""The blocked factorizations whose trailing updates run in TF32 (``_lu_tensor_cuda``,
``_cholesky_tensor_cuda``), against float64 on the same matrices: factors within TF32's
accuracy, LAPACK's pivots, the zero-pivot code, and ``solve(..., precision="mixed")`` taking
them for one large matrix and still answering to float64's accuracy."""

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg.decomp import solve
from gpulinalg.decomp.cholesky import _cholesky_tensor_cuda
from gpulinalg.decomp.lu import _lu_tensor_cuda
from gpulinalg.decomp.lu._lu_pivots import row_permutation

from tests.support.decomp_dense_ref import solve_ratio

pytestmark = pytest.mark.gpu


def _matrix(rng, n, cond=10.0, spd=False):
    q1, _ = np.linalg.qr(rng.standard_normal((n, n)))
    q2 = q1 if spd else np.linalg.qr(rng.standard_normal((n, n)))[0]
    return (q1 * np.logspace(0, np.log10(cond), n)) @ q2.T


@pytest.mark.parametrize("n, panel", [(700, 128), (300, 512), (513, 64)])
def test_tensor_lu_is_a_pivoted_factor(xp_gpu, rng, n, panel):
    a = _matrix(rng, n)
    w = xp_gpu.asfortranarray(xp_gpu.asarray(a, dtype=np.float32))
    piv = xp_gpu.empty(n, dtype=np.int64)
    assert _lu_tensor_cuda.factor(w, piv, panel) == 0
    lu, p = xp_gpu.asnumpy(w).astype(np.float64), xp_gpu.asnumpy(piv) - 1
    assert ((p >= np.arange(n)) & (p < n)).all()  # LAPACK's: row i swapped with a later one
    low, up = np.tril(lu, -1) + np.eye(n), np.triu(lu)
    perm = row_permutation(p, n)
    err = np.abs(a[perm] - low @ up).max() / np.abs(a).max()
    assert err < 2e-3, err  # TF32's unit roundoff is 2^-11
    assert np.abs(low).max() <= 1 + 1e-6  # partial pivoting: |L| <= 1


def test_tensor_lu_reports_an_exact_zero_pivot(xp_gpu, rng):
    a = _matrix(rng, 300)
    a[:, 200] = 0.0  # column 200 is zero: U[200, 200] is exactly 0 after elimination
    w = xp_gpu.asfortranarray(xp_gpu.asarray(a, dtype=np.float32))
    assert _lu_tensor_cuda.factor(w, xp_gpu.empty(300, dtype=np.int64), 64) == 201


@pytest.mark.parametrize("n, panel", [(700, 128), (300, 512)])
def test_tensor_cholesky_is_the_factor(xp_gpu, rng, n, panel):
    a = _matrix(rng, n, spd=True)
    w = xp_gpu.asfortranarray(xp_gpu.asarray(a, dtype=np.float32))
    assert _cholesky_tensor_cuda.factor(w, panel) == 0
    low = np.tril(xp_gpu.asnumpy(w).astype(np.float64))
    err = np.abs(a - low @ low.T).max() / np.abs(a).max()
    assert 0 < err < 2e-3, err
    np.testing.assert_array_equal(np.triu(xp_gpu.asnumpy(w), 1), np.triu(a.astype(np.float32), 1))


def test_tensor_cholesky_reports_the_failing_minor(xp_gpu, rng):
    a = _matrix(rng, 300, spd=True)
    a[150, 150] = -1.0
    w = xp_gpu.asfortranarray(xp_gpu.asarray(a, dtype=np.float32))
    code = _cholesky_tensor_cuda.factor(w, 64)
    assert 0 < code <= 151


@pytest.fixture
def small_tensor_route(monkeypatch):
    """The tensor route from order 256 with panels of 64 (several panels at test sizes)."""
    for mod in (_lu_tensor_cuda, _cholesky_tensor_cuda):
        monkeypatch.setattr(mod, "TENSOR_MIN", 256)
        monkeypatch.setattr(mod, "PANEL", 64)


@pytest.mark.parametrize("kind", ["gen", "pos"])
def test_mixed_solve_refines_the_tensor_factor_to_double(xp_gpu, rng, small_tensor_route, kind):
    n = 600
    a = _matrix(rng, n, cond=3.0, spd=kind == "pos")
    b = rng.standard_normal((n, 2))
    with gpulinalg.config_context(backend="gpu"):
        x = solve(xp_gpu.asarray(a), xp_gpu.asarray(b), assume_a=kind, precision="mixed")
    details = gpulinalg.last_run().details
    assert details["precision"] == "mixed" and "TF32" in details["factor"], details
    ref = scipy.linalg.solve(a, b, assume_a=kind)
    x = xp_gpu.asnumpy(x)
    assert solve_ratio(a, x, b, np.float64) <= 10 * max(solve_ratio(a, ref, b, np.float64), 1.0)


def test_tensor_factor_gate_sends_moderate_conditioning_to_double(xp_gpu, rng,
                                                                   small_tensor_route):
    """cond 1e5: refinable from a float32 factor, not from a TF32 one (cond * 2^-11 >> 0.1):
    the float64 solve answers at once, and the record says why."""
    n = 400
    a = _matrix(rng, n, cond=1e5)
    b = rng.standard_normal(n)
    with gpulinalg.config_context(backend="gpu"):
        x = xp_gpu.asnumpy(solve(xp_gpu.asarray(a), xp_gpu.asarray(b), precision="mixed"))
    details = gpulinalg.last_run().details
    assert details["precision"] == "full" and "condition estimate" in details["mixed_fallback"]
    np.testing.assert_allclose(x, scipy.linalg.solve(a, b), rtol=1e-8)
