"""``benchmarks.studies.pca_parts`` end to end on a GPU (small shape): every part timed, the
Gram routes agree with the plain product, and the study leaves the library's Gram settings as
it found them."""

import pytest

from benchmarks.studies import pca_parts
from gpulinalg.decomp._gpu import _blas_cuda

pytestmark = pytest.mark.gpu


def test_study_runs_on_a_gpu():
    saved = _blas_cuda.GRAM_BLOCKS, _blas_cuda.GRAM_MIN
    rows = pca_parts.run(20000, 600, 5, 1)
    assert (_blas_cuda.GRAM_BLOCKS, _blas_cuda.GRAM_MIN) == saved
    timed = {r["impl"] for r in rows if "median_s" in r and r["impl"] != "kernel"}
    assert {f"Gram {b} block{'s' if b > 1 else ''}" for b in pca_parts.BLOCKS} <= timed
    assert "eigh: ours" in timed and "mean: batched GEMV with ones" in timed
    mirrors = [r for r in rows if "mirror_ok" in r]
    assert len(mirrors) == 3 and all(r["mirror_ok"] for r in mirrors), mirrors
    means = [r for r in rows if "mean_err" in r]
    assert means and all(r["mean_err"] < 1e-5 for r in means)
