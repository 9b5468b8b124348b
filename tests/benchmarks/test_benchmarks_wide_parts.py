"""``benchmarks.decomp_wide_parts``: every part it takes out of the wide solve's kernel is
still there to take (an edit of the kernel that moves one fails here, not on the GPU), each
variant differs from the whole kernel and compiles (where NVRTC is installed), and without a
GPU the run says so in one row."""

import pytest

from tests.support import nvrtc as _nvrtc
from benchmarks.suites import decomp_wide_parts
from gpulinalg._runtime.kernels import kernel_code
from gpulinalg.decomp._kernels import _wide_trsm_cuda


@pytest.mark.parametrize("part", list(decomp_wide_parts.PARTS))
def test_each_part_is_found_in_the_kernel(part):
    text = decomp_wide_parts.source(part)
    whole = _wide_trsm_cuda._SOURCE
    assert (text == whole) == (decomp_wide_parts.PARTS[part] is None)
    assert "gl_wide_trsm" in text


@pytest.mark.skipif(not _nvrtc.available(), reason="NVRTC not installed")
@pytest.mark.parametrize("part", list(decomp_wide_parts.PARTS))
def test_each_variant_compiles(part):
    _nvrtc.check(f"gl_wide_trsm ({part})", kernel_code(decomp_wide_parts.source(part), {
        "T": "double", "R": "double"}), ("--std=c++17", f"-DNT={_wide_trsm_cuda.THREADS}",
                                         f"-DMAXK={_wide_trsm_cuda.MAX_RHS}"))


def test_a_part_the_kernel_lost_is_an_error(monkeypatch):
    monkeypatch.setitem(decomp_wide_parts.PARTS, "gone", ("no such text", ""))
    with pytest.raises(ValueError, match="no longer holds the text"):
        decomp_wide_parts.source("gone")


def test_without_a_gpu_one_absent_row(monkeypatch):
    import gpulinalg
    if gpulinalg.gpu_available():
        pytest.skip("a GPU is present: the rows are real")
    rows = decomp_wide_parts.run((64,))
    assert len(rows) == 1 and rows[0]["suite"] == "decomp_wide_parts" and "absent" in rows[0]
