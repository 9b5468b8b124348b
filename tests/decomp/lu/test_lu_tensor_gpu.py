"""The blocked LU whose trailing updates run in TF32 (``_lu_tensor_cuda``), against float64 on
the same matrices: ``P A = L U`` within TF32's accuracy with partial pivoting's bounded
multipliers, an exactly singular column reported, and ``solve(..., precision="mixed")`` taking
it for one large general matrix and still answering to float64's accuracy."""

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg._runtime.streams import get_stream
from gpulinalg.decomp import lu_solve, solve
from gpulinalg.decomp.lu import _lu_tensor_cuda
from gpulinalg.decomp.lu._lu_pivots import row_permutation

from tests.support.decomp_dense_ref import solve_ratio

pytestmark = pytest.mark.gpu


def _conditioned(rng, n, cond=10.0):
    q1, _ = np.linalg.qr(rng.standard_normal((n, n)))
    q2, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (q1 * np.logspace(0, np.log10(cond), n)) @ q2.T


def _factor(xp, a, panel):
    """The packed factor, 1-based pivots and code of ``a`` in float32, on the thread's stream
    (where the dispatcher runs it: cuBLAS and cuSOLVER are bound to that stream)."""
    w = xp.asfortranarray(xp.asarray(a, dtype=np.float32))
    piv = xp.empty(a.shape[0], dtype=np.int64)
    with get_stream():
        code = _lu_tensor_cuda.factor(w, piv, panel)
    return xp.asnumpy(w), xp.asnumpy(piv), code


@pytest.mark.parametrize("n, panel", [(700, 128), (300, 512), (513, 64)])
def test_tensor_lu_is_the_factor(xp_gpu, rng, n, panel):
    a = rng.standard_normal((n, n))
    w, piv, code = _factor(xp_gpu, a, panel)
    assert code == 0
    low = np.tril(w.astype(np.float64), -1) + np.eye(n)
    up = np.triu(w.astype(np.float64))
    assert np.abs(low).max() <= 1 + 1e-6  # partial pivoting over the whole column
    perm = row_permutation(piv - 1)
    err = np.abs(a[perm] - low @ up).max() / np.abs(a).max()
    assert 0 < err < 2e-2, err  # TF32's unit roundoff 2^-11, times n^(1/2) growth
    # the pivots are SciPy's, so SciPy's lu_solve reads the factor as its own
    b = rng.standard_normal(n)
    x = scipy.linalg.lu_solve((w.astype(np.float64), (piv - 1).astype(np.int32)), b)
    assert np.abs(a @ x - b).max() / (np.abs(a).max() * np.abs(x).max() * n) < 1e-3


def test_tensor_lu_reports_an_exactly_zero_pivot(xp_gpu, rng):
    a = rng.standard_normal((300, 300))
    a[:, 100:] = 0.0  # column 101 onward is zero below (and on) the diagonal after 100 steps
    _, _, code = _factor(xp_gpu, a, 64)
    assert code == 101


@pytest.fixture
def small_tensor_route(monkeypatch):
    """The tensor route from order 256 with panels of 64 (several panels at test sizes)."""
    monkeypatch.setattr(_lu_tensor_cuda, "TENSOR_MIN", 256)
    monkeypatch.setattr(_lu_tensor_cuda, "PANEL", 64)


@pytest.mark.parametrize("kind", ["gen", "sym"])
def test_mixed_solve_refines_the_tensor_lu_to_double(xp_gpu, rng, small_tensor_route, kind):
    n = 600
    a = _conditioned(rng, n, cond=3.0)
    if kind == "sym":
        a = (a + a.T) / 2
    b = rng.standard_normal((n, 2))
    with gpulinalg.config_context(backend="gpu"):
        x = solve(xp_gpu.asarray(a), xp_gpu.asarray(b), assume_a=kind, precision="mixed")
    details = gpulinalg.last_run().details
    assert details["precision"] == "mixed" and "LU" in details["factor"], details
    ref = scipy.linalg.solve(a, b)
    x = xp_gpu.asnumpy(x)
    assert solve_ratio(a, x, b, np.float64) <= 10 * max(solve_ratio(a, ref, b, np.float64), 1.0)


def test_tensor_lu_that_cannot_refine_goes_to_double(xp_gpu, rng, small_tensor_route):
    """cond 1e8: the condition estimate or a step that fails to shrink the residual sends the
    system to float64, which answers to its own accuracy."""
    n = 400
    a = _conditioned(rng, n, cond=1e8)
    b = rng.standard_normal(n)
    with gpulinalg.config_context(backend="gpu"):
        x = xp_gpu.asnumpy(solve(xp_gpu.asarray(a), xp_gpu.asarray(b), precision="mixed"))
    details = gpulinalg.last_run().details
    assert details["precision"] == "full", details
    np.testing.assert_allclose(x, scipy.linalg.solve(a, b), rtol=1e-6)


def test_lu_solve_reads_a_tensor_factor_as_lu_factor_s(xp_gpu, rng):
    """Differential: the tensor factor through the library's getrs (``lu_solve``) against
    SciPy's solve of the float32-rounded matrix."""
    n = 400
    a = _conditioned(rng, n, cond=5.0)
    w, piv, code = _factor(xp_gpu, a, 64)
    assert code == 0
    b = rng.standard_normal(n).astype(np.float32)
    x = xp_gpu.asnumpy(lu_solve((xp_gpu.asarray(w), xp_gpu.asarray(piv - 1)), xp_gpu.asarray(b)))
    ref = scipy.linalg.solve(a, b.astype(np.float64))
    assert np.abs(x - ref).max() / np.abs(ref).max() < 1e-2
