"""``benchmarks.studies.mixed_spd_parts`` runs end to end on a GPU: every factor variant gives
the Cholesky factor within TF32's accuracy, every solve variant answers (the variants
themselves are tested in ``tests/decomp/_gpu/test_blas_emulated.py``), and the factor's
settings come back after each variant."""

import pytest

from benchmarks.studies import mixed_spd_parts


def test_factor_settings_are_restored():
    from gpulinalg.decomp.cholesky import _cholesky_tensor_cuda as tensor
    before = tensor.PANEL, tensor.INNER, tensor.INVERTED
    with pytest.raises(RuntimeError):
        with mixed_spd_parts.factor_settings(64, 16, not tensor.INVERTED):
            assert (tensor.PANEL, tensor.INNER) == (64, 16)
            raise RuntimeError
    assert (tensor.PANEL, tensor.INNER, tensor.INVERTED) == before


@pytest.mark.gpu
def test_study_runs_on_a_gpu():
    rows = mixed_spd_parts.run(1024, 1)
    timed = [r for r in rows if "median_s" in r and r["impl"] != "kernel"]
    mixed = [r for r in timed if r["impl"].startswith("gpulinalg solve mixed")]
    assert len(mixed) == 1 + len(mixed_spd_parts.SOLVE_VARIANTS)
    assert all(r["backward_err"] < 1e-14 for r in mixed), mixed
    factors = [r for r in timed if "factor_err" in r]
    assert len(factors) == len(mixed_spd_parts.PANELS) + len(mixed_spd_parts.VARIANTS)
    assert all(r["code"] == 0 and r["factor_err"] < 2e-3 for r in factors), factors
    solves = [r for r in timed if r["impl"].startswith("solve: ")]
    assert len(solves) == 2 and all(r["backward_err"] < 1e-5 for r in solves), solves
