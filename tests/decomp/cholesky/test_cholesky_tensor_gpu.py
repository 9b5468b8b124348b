"""The blocked Cholesky whose trailing updates run in TF32 (``_cholesky_tensor_cuda``), against
float64 on the same matrices: the factor within TF32's accuracy, the failing minor reported,
and ``solve(..., assume_a="pos", precision="mixed")`` taking it for one large matrix and
still answering to float64's accuracy."""

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg._runtime.streams import get_stream
from gpulinalg.decomp import solve
from gpulinalg.decomp.cholesky import _cholesky_tensor_cuda

from tests.support.decomp_dense_ref import solve_ratio

pytestmark = pytest.mark.gpu


def _spd(rng, n, cond=10.0):
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (q * np.logspace(0, np.log10(cond), n)) @ q.T


def _factor(xp, a, panel):
    """The factor of ``a`` in float32 and its code, on the thread's stream (where the
    dispatcher runs it: cuBLAS and cuSOLVER are bound to that stream)."""
    w = xp.asfortranarray(xp.asarray(a, dtype=np.float32))
    with get_stream():
        code = _cholesky_tensor_cuda.factor(w, panel)
    return xp.asnumpy(w), code


@pytest.mark.parametrize("n, panel", [(700, 128), (300, 512), (513, 64)])
def test_tensor_cholesky_is_the_factor(xp_gpu, rng, n, panel):
    a = _spd(rng, n)
    w, code = _factor(xp_gpu, a, panel)
    assert code == 0
    low = np.tril(w.astype(np.float64))
    err = np.abs(a - low @ low.T).max() / np.abs(a).max()
    assert 0 < err < 2e-3, err  # TF32's unit roundoff is 2^-11
    # above the diagonal blocks the upper triangle is untouched (inside them it is scratch)
    blocks = np.arange(n)[:, None] // panel < np.arange(n)[None, :] // panel
    np.testing.assert_array_equal(w[blocks], a.astype(np.float32)[blocks])


def test_tensor_cholesky_reports_the_failing_minor(xp_gpu, rng):
    a = _spd(rng, 300)
    a[150, 150] = -1.0  # the leading minor of order 151 is not positive definite
    _, code = _factor(xp_gpu, a, 64)
    assert 0 < code <= 151


@pytest.fixture
def small_tensor_route(monkeypatch):
    """The tensor route from order 256 with panels of 64 (several panels at test sizes)."""
    monkeypatch.setattr(_cholesky_tensor_cuda, "TENSOR_MIN", 256)
    monkeypatch.setattr(_cholesky_tensor_cuda, "PANEL", 64)


def test_mixed_solve_refines_the_tensor_factor_to_double(xp_gpu, rng, small_tensor_route):
    n = 600
    a = _spd(rng, n, cond=3.0)
    b = rng.standard_normal((n, 2))
    with gpulinalg.config_context(backend="gpu"):
        x = solve(xp_gpu.asarray(a), xp_gpu.asarray(b), assume_a="pos", precision="mixed")
    details = gpulinalg.last_run().details
    assert details["precision"] == "mixed" and "TF32" in details["factor"], details
    ref = scipy.linalg.solve(a, b, assume_a="pos")
    x = xp_gpu.asnumpy(x)
    assert solve_ratio(a, x, b, np.float64) <= 10 * max(solve_ratio(a, ref, b, np.float64), 1.0)


def test_tensor_factor_that_cannot_refine_goes_to_double_within_three_steps(
        xp_gpu, rng, small_tensor_route):
    """cond 3e4: refinable from a float32 factor, not from a TF32 one (cond * 2^-11 >> 1):
    a step soon fails to shrink the residual fourfold, the float64 solve answers, and the
    record says why."""
    n = 400
    a = _spd(rng, n, cond=3e4)
    b = rng.standard_normal(n)
    with gpulinalg.config_context(backend="gpu"):
        x = xp_gpu.asnumpy(solve(xp_gpu.asarray(a), xp_gpu.asarray(b), assume_a="pos",
                                 precision="mixed"))
    details = gpulinalg.last_run().details
    assert details["precision"] == "full", details
    assert "stopped converging" in details["mixed_fallback"]
    assert len(details["residual_history"]) <= 3
    np.testing.assert_allclose(x, scipy.linalg.solve(a, b, assume_a="pos"), rtol=1e-8)
