"""Repeats of small GPU calls of cholesky / cho_factor / cho_solve / solve_triangular: the
first call of a layout validates and dispatches, a repeat skips both (the dispatcher's memo,
keyed by decomp._checks.cupy_key: the factorizations on the engines' own stream, the solves on the
caller's), with the same results, errors and records.

The engines run on the CPU emulation of cuSOLVER/cuBLAS (tests/support/cusolver_emulator.py); the
dispatcher sees a GPU whose arrays are the emulator's (no device provider, as on a real GPU).
"""

import numpy as np
import pytest
from tests.support.cusolver_emulator import FakeDev, dev, emulated_gpu, plain

import gpulinalg
from gpulinalg.decomp._checks import cupy_key
from gpulinalg import NotPositiveDefiniteError
from gpulinalg._runtime import arrays, budget, device, dispatch, memo
from gpulinalg.decomp import cho_factor, cho_solve, cholesky, solve_triangular


class _Stream:
    entered = 0

    def __enter__(self):
        _Stream.entered += 1
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def emu_gpu(monkeypatch):
    with emulated_gpu(monkeypatch):
        monkeypatch.setitem(arrays._KIND_OF_TYPE, FakeDev, arrays.Kind.CUPY)
        monkeypatch.setitem(device._state, "probed", True)
        monkeypatch.setitem(device._state, "gpus", [device.GPUInfo(0, "emu", (9, 0), 1 << 36)])
        monkeypatch.setitem(device._state, "disabled", None)
        monkeypatch.setattr(device, "current_device", lambda: 0)
        monkeypatch.setattr(device, "gpu_is_real", lambda: True)
        monkeypatch.setattr(budget, "fits", lambda n, d=None: (int(n) <= 1 << 34, 1 << 34))
        monkeypatch.setattr(dispatch, "_op_stream", _Stream)
        memo.clear()
        yield
        memo.clear()


def spd(rng, batch, n, dtype=np.float64):
    g = rng.standard_normal((*batch, n, n)).astype(dtype)
    return g @ g.swapaxes(-1, -2) + n * np.eye(n, dtype=dtype)


def _validation_calls(monkeypatch):
    from gpulinalg.decomp.cholesky import _cholesky_api
    from gpulinalg.decomp.triangular import _triangular_api
    seen = []
    for mod in (_cholesky_api, _triangular_api):
        real = mod.prepare
        monkeypatch.setattr(mod, "prepare", lambda *a, _r=real, **k: seen.append(1) or _r(*a, **k))
    return seen


def test_repeats_skip_validation_and_keep_records(emu_gpu, monkeypatch, rng):
    seen = _validation_calls(monkeypatch)
    a = spd(rng, (3,), 6)
    L = np.tril(spd(rng, (3,), 6))
    b = rng.standard_normal((3, 6, 2))
    calls = [lambda: cholesky(dev(a), lower=True), lambda: cho_factor(dev(a)),
             lambda: cho_solve((dev(np.linalg.cholesky(a)), True), dev(b)),
             lambda: solve_triangular(dev(L), dev(b), lower=True)]
    want = [np.linalg.cholesky(a), None, np.linalg.solve(a, b), np.linalg.solve(L, b)]
    own = [3, 3, 0, 0]  # the solves launch on the caller's stream: no hand-off by events
    for call, ref, entries in zip(calls, want, own):
        seen.clear()
        first = call()
        n_first = len(seen)
        before = _Stream.entered
        for _ in range(3):
            got = call()
            rec = gpulinalg.last_run()
            assert rec.backend == "gpu" and "decided at the first call" in rec.reason
        assert n_first > 0 and len(seen) == n_first  # the repeats validated nothing
        assert _Stream.entered == before + entries
        got, first = (got[0], first[0]) if isinstance(got, tuple) else (got, first)
        assert np.allclose(plain(got), plain(first))
        if ref is not None:
            assert np.allclose(plain(got), ref)


def test_repeat_names_the_failing_slice_and_checks_finite(emu_gpu, rng):
    a = spd(rng, (2, 3), 5)
    for _ in range(2):
        cholesky(dev(a), lower=True)
    bad = a.copy()
    bad[1, 2, 3, 3] = -100.0
    with pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(dev(bad), lower=True)
    assert info.value.batch_index == (1, 2)
    assert gpulinalg.last_run().details.get("raised", "").startswith("NotPositiveDefinite")
    nan = a.copy()
    nan[0, 1, 2, 2] = np.nan
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        cholesky(dev(nan), lower=True)
    L = np.tril(spd(rng, (2,), 5))
    b = rng.standard_normal((2, 5, 1))
    for _ in range(2):
        solve_triangular(dev(L), dev(b), lower=True)
    b[1, 0, 0] = np.inf
    with pytest.raises(ValueError, match="b must not contain infs or NaNs"):
        solve_triangular(dev(L), dev(b), lower=True)


def test_repeats_follow_the_configuration(emu_gpu, rng):
    a = spd(rng, (2,), 4)
    for _ in range(2):
        cholesky(dev(a))
    with gpulinalg.config(backend="cpu"):
        got = cholesky(dev(a))
        assert gpulinalg.last_run().backend == "cpu"
    assert np.allclose(plain(got), np.linalg.cholesky(a).swapaxes(-1, -2))
    cholesky(dev(a))
    assert gpulinalg.last_run().backend == "gpu"


def test_keys_hold_layout_options_and_no_array(emu_gpu, rng):
    a = dev(spd(rng, (2,), 4))
    k1 = cupy_key("decomp.cholesky", a, None, (True, True))
    assert k1 == cupy_key("decomp.cholesky", dev(spd(rng, (2,), 4)), None, (True, True))
    assert k1 != cupy_key("decomp.cholesky", a.swapaxes(-1, -2), None, (True, True))
    assert k1 != cupy_key("decomp.cholesky", a, None, (False, True))
    assert cupy_key("decomp.cholesky", np.asarray(a).view(np.ndarray), None, ()) is None
    assert not any(isinstance(p, np.ndarray) for p in k1)


def test_repeat_records_what_the_engine_notes(emu_gpu, rng):
    L = np.tril(spd(rng, (2,), 5))
    b = rng.standard_normal((2, 5, 1))
    for _ in range(3):
        solve_triangular(dev(L), dev(b), lower=True)
        assert gpulinalg.last_run().details["rcond_bound"] > 0


@pytest.mark.parametrize("lower", [True, False])
def test_cleaned_copy_checks_finite_in_the_same_kernel(emu_gpu, rng, lower, monkeypatch):
    """The working copy that zeroes the other triangle also flags NaN or Inf of ``a`` (one
    pass over ``a``, one read-back); any layout and side is checked as SciPy's."""
    from tests.support.cusolver_emulator import CALLS, without_fused
    without_fused(monkeypatch)  # the library route (small stacks are fused)

    from gpulinalg.decomp.cholesky import _cholesky_cuda
    a = spd(rng, (3,), 6)
    for x in (a, np.asfortranarray(a.swapaxes(-1, -2)).swapaxes(-1, -2)):
        CALLS.clear()
        got = _cholesky_cuda.cholesky(dev(x), lower, False, True, np.dtype("f8"), True)
        assert CALLS["flag_nonfinite"] == 1 and CALLS["get"] == 1
        ref = np.linalg.cholesky(a)
        assert np.allclose(plain(got), ref if lower else ref.swapaxes(-1, -2))
    CALLS.clear()
    _cholesky_cuda._copy_zero_triangle(dev(a), dev(np.empty_like(a)), lower,
                                       dev(np.zeros(1, np.int32)))
    assert CALLS["copy_zero"] == 1 and CALLS["flag_nonfinite"] == 1
    bad = a.copy()
    bad[1, 0, 5] = np.inf  # above the diagonal: the triangle lower=True does not read
    bad[1, 5, 0] = np.inf if not lower else bad[1, 5, 0]
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        cholesky(dev(bad), lower=lower)
    with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
        cholesky(dev(bad), lower=lower)  # the repeat
