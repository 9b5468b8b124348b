"""The raw kernels' CUDA sources (``*.cu`` package data, read by
:func:`gpulinalg._runtime.kernels.kernel_source`) compile (``tests/support/nvrtc.py``: NVRTC, to
PTX for ``compute_90``, no GPU needed). :data:`KERNELS` builds every kernel as its launcher
does, in a few specializations each (the CPU emulations check every specialization they
build besides), and every ``.cu`` file of the package is part of at least one of them."""

import pathlib
import re

import numpy as np
import pytest

from tests.support import nvrtc as _nvrtc
from tests.support.cusolver_emulator import dev, emulated_gpu
from gpulinalg._runtime.kernels import kernel_code
from gpulinalg.decomp._gpu import _finite_cuda, _transpose_cuda
from gpulinalg.decomp._kernels import (_cholinv_cuda, _fused_cuda, _fused_qr_cuda,
                                       _fused_svd_cuda, _ritz_cuda, _stream_trsm_cuda,
                                       _wide_trsm_cuda)
from gpulinalg.decomp._kernels._scalars_cuda import KERNEL_TYPES
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.lowrank import _sketch_cuda
from gpulinalg.decomp.svd import _svd_cuda
from gpulinalg.decomp.triangular import _triangular_cuda
from gpulinalg.gp import _cg_fused_cuda as _gp_cg
from gpulinalg.gp import _fused_cuda as _gp_fused
from gpulinalg.gp._kernels_xp import FUSED_KINDS, FUSED_MAX_D

needs_nvrtc = pytest.mark.skipif(not _nvrtc.available(),
                                 reason="NVRTC not installed (the test extra brings it on Linux)")

PACKAGE = pathlib.Path(_cholesky_cuda.__file__).resolve().parents[2]
REAL = (np.dtype(np.float32), np.dtype(np.float64))
ALL = REAL + (np.dtype(np.complex64), np.dtype(np.complex128))
STD = ("--std=c++17",)


def _tt(dtype):
    t, r = KERNEL_TYPES[dtype]
    return {"T": t, "R": r}


def _kernels():
    """``[(id, kernel name, code, options)]``: each kernel in a few specializations, its source,
    types and options as its launcher passes them."""
    out = []

    def add(name, source, typ, options=STD, tag=""):
        out.append((f"{name}{tag}", name, kernel_code(source, typ), tuple(options)))
    for dt in REAL:
        add("gl_transpose_copy", _transpose_cuda._SOURCE, {"T": _transpose_cuda._TYPES[dt]},
            tag=f"-{dt}")
        add("gl_flag_flat", _finite_cuda._FLAT_SOURCE,
            {"R": _finite_cuda._FLAT_TYPES[dt], "U": "int"}, tag=f"-{dt}")
        add("gl_potrf_codes", _cholesky_cuda._CODES_SOURCE,
            {"T": _cholesky_cuda._CODE_TYPES[dt]}, tag=f"-{dt}")
        add("gl_flip_signs", _ritz_cuda._FLIP_SOURCE, {"T": _ritz_cuda.TYPES[dt]}, (),
            tag=f"-{dt}")
        add("gl_lift", _ritz_cuda._LIFT_SOURCE, {"T": _ritz_cuda.TYPES[dt]}, (), tag=f"-{dt}")
    for dt in ALL:
        add("gl_tri_figures", _triangular_cuda._FIGURES_SOURCE,
            {"T": _triangular_cuda._FIGURE_TYPES[dt]}, tag=f"-{dt}")
        add("gl_svd_signs", _svd_cuda._SIGNS_SOURCE, {"T": _svd_cuda._SIGN_TYPES[dt]},
            tag=f"-{dt}")
        scalar, res = _cholinv_cuda._TYPES[dt]
        add("gl_chol_inv", _cholinv_cuda._SOURCE, {"SCALAR": scalar, "OUT": res}, tag=f"-{dt}")
        for size in (8, 64):
            ts, minb = _fused_cuda.tile(size, dt)
            add("gl_small_potrf", _fused_cuda._POTRF_SOURCE, _tt(dt),
                (*STD, f"-DNB={size}", f"-DTS={ts}", f"-DMINB={minb}"), tag=f"-{dt}-{size}")
            add("gl_small_trsm", _fused_cuda._TRSM_SOURCE, _tt(dt),
                (*STD, f"-DNB={size}", "-DTS=1"), tag=f"-{dt}-{size}")
            add("gl_small_qr", _fused_qr_cuda._SOURCE, _tt(dt), (*STD, f"-DMB={size}"),
                tag=f"-{dt}-{size}")
        for size in (8, 32):
            typ, opts = _fused_svd_cuda._spec(dt, size)
            add("gl_small_svd", _fused_svd_cuda._PRELUDE + _fused_svd_cuda._SOURCE +
                _fused_svd_cuda._KERNEL, typ, opts, tag=f"-{dt}-{size}")
        add("gl_stream_trsm", _stream_trsm_cuda._SOURCE, _tt(dt),
            (*STD, f"-DNT={_stream_trsm_cuda._threads(dt)}", "-DUNR=4"), tag=f"-{dt}")
        add("gl_wide_trsm", _wide_trsm_cuda._SOURCE, _tt(dt),
            (*STD, f"-DNT={_wide_trsm_cuda.THREADS}", f"-DMAXK={_wide_trsm_cuda.MAX_RHS}"),
            tag=f"-{dt}")
    add("gl_tri_inv_leaves", _cholinv_cuda._LEAF_SOURCE, {}, ())
    for kind in sorted(set(FUSED_KINDS.values())):
        for d in (1, FUSED_MAX_D):
            options = _gp_fused.kernel_options(kind, d)
            add("gl_gp_build", _gp_fused._BUILD, {}, options, tag=f"-{kind}-{d}")
            add("gl_gp_build", _gp_fused._BUILD, {}, _gp_fused.kernel_options(kind, d, "f"),
                tag=f"-{kind}-{d}-float32")
            add("gl_gp_contract", _gp_fused.CONTRACT_SOURCE, {}, options, tag=f"-{kind}-{d}")
            for dt in REAL:
                add("gl_gp_weight_contract", _gp_fused.CONTRACT_SOURCE, {},
                    _gp_fused.kernel_options(kind, d, dt), tag=f"-{kind}-{d}-{dt}")
            for dt in REAL:
                for tp in (8, _gp_cg.MAX_COLUMNS):
                    add("gl_gp_product", _gp_cg.SOURCE, {}, _gp_cg.options(kind, d, dt, tp),
                        tag=f"-{kind}-{d}-{dt}-{tp}")
                add("gl_gp_factor_contract", _gp_cg.SOURCE, {}, _gp_cg.options(kind, d, dt),
                    tag=f"-{kind}-{d}-{dt}")
            for name in ("gl_gp_pivot_select", "gl_gp_pivot_row"):
                add(name, _gp_cg.PIVOT_SOURCE, {}, _gp_cg.pivot_options(kind, d),
                    tag=f"-{kind}-{d}")
    # the Gaussian sketch's elementwise preamble, called as CuPy's kernel calls it
    add("gl_gaussian_probe", _sketch_cuda._GAUSS_PREAMBLE + 'extern "C" __global__ void '
        "gl_gaussian_probe(unsigned long long* z) { z[0] = gl_mix(z[0]); }\n", {}, ())
    return out


KERNELS = _kernels()


def test_every_cu_file_is_part_of_a_compiled_kernel():
    sources = sorted(PACKAGE.rglob("*.cu"))
    assert sources, "the kernels' sources are .cu files of the package"
    for path in sources:
        text = path.read_text(encoding="utf-8")
        assert any(text in code for _, _, code, _ in KERNELS), \
            f"{path.relative_to(PACKAGE.parent)} is compiled by no test"


@needs_nvrtc
@pytest.mark.parametrize("ident, name, code, options", KERNELS, ids=[k[0] for k in KERNELS])
def test_kernel_compiles(ident, name, code, options):
    _nvrtc.check(name, code, options)


@needs_nvrtc
def test_a_source_that_does_not_compile_fails_with_the_log():
    code = kernel_code('extern "C" __global__ void gl_bad() { not_declared = 1; }', {})
    with pytest.raises(AssertionError, match=r"gl_bad does not compile(.|\n)*not_declared"):
        _nvrtc.check("gl_bad", code)


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


#: Where each kernel factory of the package takes the kernel's name (position in the call).
_NAME_ARG = {"raw_kernel": 0, "elementwise_kernel": 3, "_sized": 0, "RawKernel": 1,
             "ElementwiseKernel": 3, "ReductionKernel": 6}


def test_every_kernel_the_package_builds_has_our_prefix():
    """``make gpu-test`` runs compute-sanitizer on the kernels named ``gl_*`` (hand-written)
    or ``gpulinalg_*`` (CuPy-generated) only, the libraries' kernels uninstrumented beside
    them: a kernel of ours named otherwise would escape it."""
    import ast
    names = []
    for path in sorted(PACKAGE.rglob("*.cu")):
        text = path.read_text(encoding="utf-8")
        names += re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)",
                            text)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else \
                getattr(node.func, "id", None)
            at = _NAME_ARG.get(func)
            if at is not None and len(node.args) > at and \
                    isinstance(node.args[at], ast.Constant):
                names.append(node.args[at].value)
    assert len(names) > 20, names  # the scan finds the kernels
    assert [n for n in names if not n.startswith(("gl_", "gpulinalg_"))] == []
