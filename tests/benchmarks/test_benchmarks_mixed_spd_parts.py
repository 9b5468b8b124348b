"""``benchmarks.studies.mixed_spd_parts``: its factor variants give the Cholesky factor (on the
emulated cuSOLVER/cuBLAS here, whose TF32 products are exact float32 ones; on a GPU within
TF32's accuracy), and the study runs end to end on a GPU."""

import numpy as np
import pytest

from benchmarks.studies import mixed_spd_parts
from tests.support.cusolver_emulator import dev, emulated_gpu, plain


def _spd(n, seed=0):
    g = np.random.default_rng(seed).standard_normal((n, n))
    return g @ g.T / n + np.eye(n)


@pytest.mark.parametrize("panel, inner, inverted", [(64, None, False), (64, 16, False),
                                                    (64, None, True), (96, 32, True),
                                                    (500, 64, True)])
def test_variant_factor_is_the_cholesky_factor(monkeypatch, panel, inner, inverted):
    a = _spd(200)
    with emulated_gpu(monkeypatch):
        w = dev(np.asfortranarray(a.astype(np.float32)))
        code = mixed_spd_parts.variant_factor(w, panel, inner, inverted)
        low = np.tril(plain(w).astype(np.float64))
    assert code == 0
    np.testing.assert_allclose(low, np.linalg.cholesky(a), atol=2e-5 * np.abs(a).max())


def test_variant_factor_reports_the_failing_minor(monkeypatch):
    a = _spd(200)
    a[120, 120] = -1.0  # the leading minor of order 121 is not positive definite
    with emulated_gpu(monkeypatch):
        code = mixed_spd_parts.variant_factor(dev(np.asfortranarray(a.astype(np.float32))),
                                              64, 16, True)
    assert 0 < code <= 121


@pytest.mark.gpu
def test_study_runs_on_a_gpu():
    rows = mixed_spd_parts.run(1024, 1)
    timed = [r for r in rows if "median_s" in r and r["impl"] != "kernel"]
    assert any(r["impl"] == "gpulinalg solve mixed" for r in timed)
    factors = [r for r in timed if "factor_err" in r]
    assert len(factors) == len(mixed_spd_parts.PANELS) + len(mixed_spd_parts.VARIANTS)
    assert all(r["code"] == 0 and r["factor_err"] < 2e-3 for r in factors), factors
    solves = [r for r in timed if r["impl"].startswith("solve: ")]
    assert len(solves) == 2 and all(r["backward_err"] < 1e-5 for r in solves), solves


@pytest.mark.parametrize("n, panel", [(200, 64), (128, 64), (50, 64)])
def test_blocked_solve_solves_with_the_factor(monkeypatch, n, panel):
    a = _spd(n, 3)
    b = np.random.default_rng(4).standard_normal((n, 2))
    with emulated_gpu(monkeypatch):
        w = dev(np.asfortranarray(a.astype(np.float32)))
        assert mixed_spd_parts.variant_factor(w, panel) == 0
        invs = mixed_spd_parts.inverse_blocks(w, panel)
        x = plain(mixed_spd_parts.blocked_solve(w, invs, panel, dev(b.astype(np.float32))))
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-4, atol=1e-4)
