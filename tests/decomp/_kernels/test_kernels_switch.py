"""The one switch of the hand-written kernels (:mod:`gpulinalg.decomp._kernels._policy_cuda`),
on the CPU emulation: ``config_context(custom_kernels=False)`` sends every route that takes a
hand-written kernel to its cuSOLVER / cuBLAS / CuPy route (no such kernel is even built) with
the same results, and a device of a compute capability the rows were not measured on has
them off by default."""

import sys

import numpy as np
import pytest

import gpulinalg
from gpulinalg._runtime.config import get_config
from gpulinalg.decomp._kernels import _policy_cuda
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.lowrank import _sketch_cuda
from gpulinalg.decomp.qr import _qr_cuda
from gpulinalg.decomp.svd import _svd_cuda
from gpulinalg.decomp.triangular import _triangular_cuda
from gpulinalg.gp import _engine_cuda as _gp_engine
from tests.support.cusolver_emulator import CALLS, DEVICE_ATTRIBUTES, dev, emulated_gpu, plain

#: The hand-written kernels (decomp's _kernels and gp's fused likelihood).
HAND_WRITTEN = {"gl_small_potrf", "gl_small_trsm", "gl_stream_trsm", "gl_wide_trsm",
                "gl_small_qr", "gl_small_svd", "gl_chol_inv",
                "gl_tri_inv_leaves", "gl_flip_signs", "gl_lift", "gl_gp_build", "gl_gp_contract"}


@pytest.fixture
def built(monkeypatch):
    """The emulated GPU; yields the names of the raw kernels built under it."""
    names = []
    with emulated_gpu(monkeypatch):
        cupy = sys.modules["cupy"]
        raw = cupy.RawKernel

        def record(code, name, options=()):
            names.append(name)
            return raw(code, name, options)
        monkeypatch.setattr(cupy, "RawKernel", record)
        yield names


def _spd(rng, batch, n, dtype):
    x = rng.standard_normal((*batch, n, n))
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(dtype)


def _cholesky(a, dtype):
    return plain(_cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype(dtype), True))


def _solve(a, b, dtype):
    return plain(_triangular_cuda.solve_triangular(dev(a), dev(b), 0, True, False, False,
                                                   np.dtype(dtype), True))


def _qr(a, dtype):
    return tuple(plain(x) for x in _qr_cuda.qr(dev(a), "economic", False, None, False,
                                               np.dtype(dtype)))


def _svd(a, dtype):
    return tuple(plain(x) for x in _svd_cuda.svd(dev(a), False, True, "auto", np.dtype(dtype)))


CASES = {  # name: (inputs, call, the kernel the route takes with the kernels on)
    "cholesky fused": (lambda r: (_spd(r, (8,), 16, "f8"),), _cholesky, "gl_small_potrf"),
    "solve fused": (lambda r: (np.tril(_spd(r, (8,), 16, "f8")), r.standard_normal((8, 16, 2))),
                    _solve, "gl_small_trsm"),
    "solve stream": (lambda r: (np.tril(_spd(r, (4,), 200, "f8")),
                                r.standard_normal((4, 200, 2))), _solve, "gl_stream_trsm"),
    "solve wide": (lambda r: (np.tril(_spd(r, (), 100, "f8")), r.standard_normal(100)),
                   _solve, "gl_wide_trsm"),
    "qr fused": (lambda r: (r.standard_normal((8, 12, 10)),), _qr, "gl_small_qr"),
    "svd fused": (lambda r: (r.standard_normal((8, 12, 10)),), _svd, "gl_small_svd"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_custom_kernels_false_takes_the_library_route(built, rng, case):
    make, call, kernel = CASES[case]
    args = make(rng)
    on = call(*args, "f8")
    assert kernel in built
    del built[:]
    CALLS.clear()
    with gpulinalg.config_context(custom_kernels=False):
        off = call(*args, "f8")
    assert not HAND_WRITTEN & set(built), built
    assert not {"small_potrf", "small_trsm", "stream_trsm", "wide_trsm", "small_qr",
                "small_svd"} & {k for k, v in CALLS.items() if v}
    for x, y in zip(on if isinstance(on, tuple) else (on,),
                    off if isinstance(off, tuple) else (off,)):
        if case.startswith("svd"):  # deterministic signs: the same factors
            x, y = np.abs(x), np.abs(y)
        assert np.allclose(x, y, rtol=1e-10, atol=1e-10)


def test_an_unmeasured_compute_capability_has_the_kernels_off(built, rng, monkeypatch):
    assert _policy_cuda.enabled() and _policy_cuda.compute_capability() == (9, 0)
    monkeypatch.setitem(DEVICE_ATTRIBUTES, "ComputeCapabilityMajor", 8)  # an A100
    assert _policy_cuda.compute_capability() == (8, 0) and not _policy_cuda.enabled()
    assert get_config().custom_kernels  # on as a setting, off for this device
    a = _spd(rng, (8,), 16, "f8")
    got = _cholesky(a, "f8")
    assert not HAND_WRITTEN & set(built) and CALLS["potrf_batched"]
    assert np.allclose(got, np.linalg.cholesky(a))
    assert _triangular_cuda.own_route(4096, 1, 2, np.dtype("f8")) == "looped"


def test_the_setting_alone_turns_them_off(built):
    with gpulinalg.config_context(custom_kernels=False):
        assert not _policy_cuda.enabled()
        assert _cholesky_cuda.own_route(16, 8, np.dtype("f8")) == "batched"
        assert _cholesky_cuda.own_route(300, 8, np.dtype("f8")) == "batched"
        assert _triangular_cuda.own_route(200, 4, 2, np.dtype("f8")) == "batched"
    assert _cholesky_cuda.own_route(16, 8, np.dtype("f8")) == "fused"


def test_lowrank_and_gp_kernels_step_aside(monkeypatch):
    """The low-rank engine's kernels answer ``None`` (the engine's library calls run) and gp's
    ``K^-1`` takes ``potri``, without touching the device, when the kernels are off."""
    with gpulinalg.config_context(custom_kernels=False):
        assert _sketch_cuda._chol_inverse(np.eye(4), 1.0, np.dtype("f8")) is None
        assert _sketch_cuda._flip_signs(None, None, np.ones((2, 3)), True, False) is None
        assert _sketch_cuda._lift(np.ones((3, 2)), None, np.ones(3), 2) is None
        with emulated_gpu(monkeypatch):
            monkeypatch.setattr(_gp_engine, "_potri", lambda c: "potri")
            assert _gp_engine.cho_inverse(dev(np.asfortranarray(np.eye(4)))) == "potri"
