"""The raw kernels' CUDA sources compile (``tests/support/nvrtc.py``: NVRTC, to PTX for ``compute_90``,
no GPU needed). The CPU emulations check every kernel they build; the kernels no emulation
builds (the fused GP kernels, the triangular inverse's leaves) are compiled here in each of
their specializations."""

import types

import numpy as np
import pytest

from tests.support import nvrtc as _nvrtc
from tests.support.cusolver_emulator import dev, emulated_gpu
from gpulinalg._runtime.kernels import kernel_code
from gpulinalg.decomp._kernels import _cholinv_cuda
from gpulinalg.decomp.triangular import _triangular_cuda
from gpulinalg.gp import _fused_cuda as _gp_fused
from gpulinalg.gp._kernels_xp import FUSED_KINDS, FUSED_MAX_D

needs_nvrtc = pytest.mark.skipif(not _nvrtc.available(),
                                 reason="NVRTC not installed (the test extra brings it on Linux)")


@needs_nvrtc
def test_a_source_that_does_not_compile_fails_with_the_log():
    code = kernel_code('extern "C" __global__ void gl_bad() { not_declared = 1; }', {})
    with pytest.raises(AssertionError, match=r"gl_bad does not compile(.|\n)*not_declared"):
        _nvrtc.check("gl_bad", code)


@needs_nvrtc
@pytest.mark.parametrize("kind", sorted(set(FUSED_KINDS.values())))
@pytest.mark.parametrize("d", [1, 6, FUSED_MAX_D])
def test_fused_gp_kernels_compile(kind, d):
    options = _gp_fused._opts(types.SimpleNamespace(kind=kind), d)
    for name, source in (("gl_gp_build", _gp_fused._BUILD),
                         ("gl_gp_contract", _gp_fused._CONTRACT)):
        _nvrtc.check(name, kernel_code(source, {}), options)


@needs_nvrtc
def test_triangular_inverse_leaves_compile():
    _nvrtc.check("gl_tri_inv_leaves", kernel_code(_cholinv_cuda._LEAF_SOURCE, {}))


def test_the_emulation_checks_the_kernels_it_builds(monkeypatch, rng):
    """Whether or not NVRTC is here, an emulated solve hands its kernel's code and options
    to the check."""
    seen = []
    monkeypatch.setattr(_nvrtc, "check", lambda name, code, options=(): seen.append(
        (name, code, tuple(options))))
    a = np.tril(rng.standard_normal((100, 100))) + 10 * np.eye(100)
    with emulated_gpu(monkeypatch):
        _triangular_cuda.solve_triangular(dev(a), dev(np.ones(100)), 0, True, False, False,
                                          np.dtype("f8"), True)
    names = [name for name, _, _ in seen]
    assert "gl_wide_trsm" in names
    code, options = next((c, o) for n, c, o in seen if n == "gl_wide_trsm")
    assert code.startswith("#include <cupy/complex.cuh>\ntypedef double T;")
    assert "--std=c++17" in options
