"""``solve(..., precision="mixed")``: a double-precision system factored in single precision
and refined, on the CPU (LAPACK), on the GPU engine over the emulated libraries, and on a GPU:
double-precision accuracy where refinement converges, the double-precision solve (and the
reason) where it cannot, and the record of which answered."""

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg.decomp import solve
from gpulinalg.decomp.lu import _refine_xp

from tests.support.decomp_dense_ref import host, random, solve_ratio


@pytest.fixture(autouse=True)
def refine_on_every_gpu(monkeypatch):
    """The refinement runs on the GPU twins whatever the card's single-to-double speed ratio
    (an H100's float32 ``getrf`` is no faster than its float64 one: there the engine answers
    in float64 at once, :func:`test_no_faster_single_precision_answers_in_double`)."""
    from gpulinalg.decomp.lu import _lu_cuda
    monkeypatch.setattr(_lu_cuda, "single_pays", lambda: True)


def _system(rng, kind, dtype, batch=()):
    n = 60
    a = random(rng, batch + (n, n), dtype)
    if kind == "pos":
        a = a @ np.conj(a.swapaxes(-1, -2)) + n * np.eye(n)
    elif kind == "sym":
        a = a + a.swapaxes(-1, -2) + 4 * n ** 0.5 * np.eye(n)
    elif kind == "her":
        a = a + np.conj(a.swapaxes(-1, -2)) + 4 * n ** 0.5 * np.eye(n)
    else:
        a = a + 3 * n ** 0.5 * np.eye(n)
    return a.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
@pytest.mark.parametrize("kind", [None, "gen", "pos", "sym", "her"])
def test_mixed_is_as_accurate_as_double(backend, rng, kind, dtype):
    a = _system(rng, kind, dtype)
    b = random(rng, (60, 3), dtype)
    x = solve(a, b, assume_a=kind, precision="mixed")
    rec = gpulinalg.last_run()
    assert rec.details["precision"] == "mixed", rec.details
    assert 1 <= rec.details["refinement_steps"] <= 5
    history = rec.details["residual_history"]
    assert history[-1] < 1e-3 * history[0]
    ref = scipy.linalg.solve(a, b, assume_a=kind or "gen")
    assert solve_ratio(a, x, b, dtype) <= 10 * max(solve_ratio(a, ref, b, dtype), 1.0)
    assert host(x).dtype == np.dtype(dtype)


@pytest.mark.parametrize("transposed", [False, True])
def test_mixed_batches_vectors_and_transposed(backend, rng, transposed):
    a = _system(rng, "gen", np.float64, batch=(3,))
    b = random(rng, (60,), np.float64)  # one right-hand side for every matrix
    x = host(solve(a, b, transposed=transposed, precision="mixed"))
    assert gpulinalg.last_run().details["precision"] == "mixed"
    ref = np.stack([scipy.linalg.solve(m, b, transposed=transposed) for m in a])
    assert x.shape == (3, 60)
    np.testing.assert_allclose(x, ref, rtol=1e-12, atol=1e-12)


def test_ill_conditioned_goes_to_double_at_once(backend):
    """cond(hilbert(10)) ~ 1e13: the single-precision factor's estimate (itself capped near
    1 / float32's eps) is far past the gate, no refinement step is tried, and the answer is
    the double-precision solve's."""
    a, b = scipy.linalg.hilbert(10), np.ones(10)
    x = host(solve(a, b, precision="mixed"))
    details = gpulinalg.last_run().details
    assert details["precision"] == "full" and "condition estimate" in details["mixed_fallback"]
    gate = _refine_xp.CONTRACTION / (np.finfo(np.float32).eps / 2)
    assert details["condition_estimate"] > 10 * gate and "refinement_steps" not in details
    np.testing.assert_allclose(x, host(solve(a, b)), rtol=1e-12)


def test_refinement_that_stops_contracting_falls_back(backend, monkeypatch):
    """With the estimate's gate opened, a system refinement cannot solve stops after a few
    steps that do not shrink the residual and is answered in double precision."""
    monkeypatch.setattr(_refine_xp, "CONTRACTION", 1e30)
    a, b = scipy.linalg.hilbert(12), np.ones(12)
    with pytest.warns(scipy.linalg.LinAlgWarning):  # the double-precision solve's, as SciPy's
        x = host(solve(a, b, precision="mixed"))
    details = gpulinalg.last_run().details
    assert details["precision"] == "full", details
    assert "stopped converging" in details["mixed_fallback"]
    assert len(details["residual_history"]) < _refine_xp.ITERATIONS
    with pytest.warns(scipy.linalg.LinAlgWarning):
        np.testing.assert_allclose(x, host(solve(a, b)), rtol=1e-12)


def test_single_precision_overflow_goes_to_double(backend, rng):
    a = _system(rng, "gen", np.float64) * 1e39  # beyond float32's range once cast down
    b = random(rng, (60,), np.float64)
    x = host(solve(a, b, precision="mixed"))
    assert gpulinalg.last_run().details["precision"] == "full"
    np.testing.assert_allclose(x, scipy.linalg.solve(a, b), rtol=1e-10)


@pytest.mark.parametrize("dtype, kind", [(np.float32, None), (np.float64, "lower triangular"),
                                         (np.float64, "diagonal")])
def test_other_systems_solve_in_full(backend, rng, dtype, kind):
    a = np.triu(_system(rng, "gen", np.float64)).T.astype(dtype) if kind else \
        _system(rng, "gen", dtype)
    b = random(rng, (60,), dtype)
    x = host(solve(a, b, assume_a=kind, precision="mixed"))
    details = gpulinalg.last_run().details
    assert details["precision"] == "full" and "own precision" in details["mixed_fallback"]
    np.testing.assert_allclose(x, host(solve(a, b, assume_a=kind)), rtol=1e-12)


def test_precision_is_checked():
    with pytest.raises(ValueError, match="precision"):
        solve(np.eye(2), np.ones(2), precision="half")


@pytest.mark.gpu
@pytest.mark.parametrize("ratio, refined", [(2, False), (64, True)])
def test_no_faster_single_precision_answers_in_double(xp_gpu, rng, monkeypatch, ratio, refined):
    """A card whose float32 runs at most twice its float64 rate (float64 products on tensor
    cores: A100, H100, H200) gains nothing from a float32 factor: the double-precision solve
    answers, and the record names the ratio."""
    from gpulinalg._runtime import device
    from gpulinalg.decomp.lu import _lu_cuda
    monkeypatch.undo()  # the real gate, over a pretended attribute
    monkeypatch.setattr(device, "_attributes", {
        (xp_gpu.cuda.Device().id, "SingleToDoublePrecisionPerfRatio"): ratio})
    assert _lu_cuda.single_pays() is refined
    a = _system(rng, "gen", np.float64)
    b = random(rng, (60,), np.float64)
    with gpulinalg.config_context(backend="gpu"):
        x = host(solve(xp_gpu.asarray(a), xp_gpu.asarray(b), precision="mixed"))
    details = gpulinalg.last_run().details
    assert (details["precision"] == "mixed") is refined, details
    if not refined:
        assert f"SingleToDoublePrecisionPerfRatio {ratio}" in details["mixed_fallback"]
    np.testing.assert_allclose(x, scipy.linalg.solve(a, b), rtol=1e-10)


@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("vector", [False, True])
def test_mixed_spd_reads_only_its_named_triangle(backend, rng, lower, vector):
    """A real SPD system is read by the triangle ``lower`` names, as SciPy's: the other holds
    garbage (the GPU engine factors a copy of that triangle and refines with ``symv`` on it,
    never a mirrored copy)."""
    a = _system(rng, "pos", np.float64)
    junk = np.triu(rng.standard_normal(a.shape) * 1e3, 1)
    given = a - np.triu(a, 1) + junk if lower else a - np.tril(a, -1) + junk.T
    b = random(rng, (60,) if vector else (60, 2), np.float64)
    x = host(solve(given, b, assume_a="pos", lower=lower, precision="mixed"))
    assert gpulinalg.last_run().details["precision"] == "mixed"
    assert x.shape == b.shape
    ref = scipy.linalg.solve(a, b, assume_a="pos")
    np.testing.assert_allclose(x, ref, rtol=1e-10, atol=1e-12)
