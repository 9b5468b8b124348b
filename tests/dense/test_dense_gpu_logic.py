"""The GPU engine's layout logic, run on the CPU: NumPy stands in for CuPy and an emulator of
cuBLASLt's epilog semantics (bias per row of the column-major result, padded column-major aux,
BGRAD vectors) stands in for the cached nvmath plans. It checks the transposed-product mapping
of the NumPy bias, the aux orientation and the backward plumbing of ``_matmul_cuda`` against the
CPU engine ``_matmul_host``; the real cuBLASLt is exercised by the GPU tests.
"""

import math
import types

import numpy as np
import pytest

from gpulinalg._runtime import memo as _memo  # noqa: E402
from gpulinalg.dense import _calls, _matmul_cuda, _matmul_host
from gpulinalg.dense._epilogs_xp import gelu, gelu_grad
from gpulinalg.dense._spec import Spec, aux_shape


class FakeArray(np.ndarray):
    """A NumPy array with CuPy's ``.data.ptr`` / ``.data.device_id``."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data if self.size else 0, device_id=0)


def _fake(x):
    return np.asarray(x).view(FakeArray)


def _wrap(fn):
    return lambda *a, **k: _fake(fn(*a, **k))


fake_cupy = types.SimpleNamespace(
    ndarray=FakeArray, broadcast_to=_wrap(np.broadcast_to),
    ascontiguousarray=_wrap(np.ascontiguousarray), array=_wrap(np.array), zeros=_wrap(np.zeros),
    matmul=_wrap(np.matmul), packbits=_wrap(np.packbits), unpackbits=_wrap(np.unpackbits),
    swapaxes=_wrap(np.swapaxes), maximum=np.maximum, tanh=np.tanh, where=np.where,
    float32=np.float32, uint8=np.uint8)


def _col_major_buffer(batch, rows, cols, dtype):
    buf = np.zeros((*batch, cols, rows), dtype=dtype)
    return _fake(np.swapaxes(buf, -1, -2))


def _relu_aux(z):
    rows, cols = z.shape[-2:]
    pad, _ = aux_shape("relu", rows, cols)
    bits = np.zeros((*z.shape[:-2], cols, pad * 8), dtype=np.uint8)
    bits[..., :rows] = np.swapaxes(z, -1, -2) > 0
    packed = np.packbits(bits, axis=-1, bitorder="little")
    return _fake(np.swapaxes(packed, -1, -2))


def _unpack(aux, rows):
    bits = np.unpackbits(np.swapaxes(aux, -1, -2), axis=-1, bitorder="little")[..., :rows]
    return np.swapaxes(bits, -1, -2).astype(bool)


def emulated_gemm(a, b, c=None, *, transpose=False, alpha=1.0, beta=0.0, epilog=None,
                  inputs=None, compute_type=None, autotune=False):
    """cuBLASLt's epilog semantics on the planned (column-major) problem, in float64."""
    if transpose:  # plan b.T @ a.T; the result comes back transposed, epilog outputs as planned
        d, extra = emulated_gemm(_fake(np.swapaxes(b, -1, -2)), _fake(np.swapaxes(a, -1, -2)),
                                 None if c is None else _fake(np.swapaxes(c, -1, -2)),
                                 alpha=alpha, beta=beta, epilog=epilog, inputs=inputs)
        return _fake(np.swapaxes(d, -1, -2)), extra
    inputs = inputs or {}
    wide = np.result_type(a.dtype, np.float64)
    z = alpha * np.matmul(np.asarray(a, wide), np.asarray(b, wide))
    if c is not None:
        z = z + beta * np.asarray(c)
    epi = epilog or ""
    if "BIAS" in epi:
        bias = np.asarray(inputs["bias"])
        assert bias.ndim == 1 and bias.shape[0] == z.shape[-2], "bias runs along M"
        z = z + bias[:, None]
    extra, rows = {}, z.shape[-2]
    if "RELU_AUX" in epi:
        extra["relu_aux"] = _relu_aux(z)
    if "GELU_AUX" in epi:
        pad, _ = aux_shape("gelu", rows, z.shape[-1])
        g = _col_major_buffer(z.shape[:-2], pad, z.shape[-1], a.dtype)
        g[..., :rows, :] = z
        extra["gelu_aux"] = g
    if epi.startswith("DRELU"):
        z = z * _unpack(np.asarray(inputs["relu_aux"]), rows)
    elif epi.startswith("DGELU"):
        z = z * gelu_grad(np.asarray(inputs["gelu_aux"])[..., :rows, :].astype(np.float64), np)
    elif "RELU" in epi:
        z = np.maximum(z, 0)
    elif "GELU" in epi:
        z = gelu(z, np)
    if epi.endswith("BGRAD") or epi == "BGRADA":
        src = z if epi.endswith("BGRAD") else np.asarray(a, np.float64)
        extra[epi.lower()] = _bgrad(src.sum(axis=-1), z.shape[:-2], a.dtype)
    if epi == "BGRADB":
        extra["bgradb"] = _bgrad(np.asarray(b, np.float64).sum(axis=-2), z.shape[:-2], a.dtype)
    d = _col_major_buffer(z.shape[:-2], rows, z.shape[-1], a.dtype)
    d[...] = z
    return d, extra


def _bgrad(v, batch, dtype):
    return _fake((v[..., None] if batch else v).astype(dtype))


@pytest.fixture
def emulated(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(_matmul_cuda, "gemm", emulated_gemm)
    # a "plan" is its epilog name here; rerun is run (the real one checks the plan is cached)
    monkeypatch.setattr(_matmul_cuda, "lookup", _emulated_lookup)
    monkeypatch.setattr(_matmul_cuda, "run", _emulated_run)
    monkeypatch.setattr(_matmul_cuda, "rerun", _emulated_rerun)
    monkeypatch.setattr(_calls, "_ndarray", [])  # resolved again: the fake CuPy's ndarray
    _calls.clear()


class _EmulatedPlan(str):
    lookups = reruns = 0


def _emulated_lookup(a, b, c, transpose, alpha, beta, epilog, inputs, compute_type, autotune):
    _EmulatedPlan.lookups += 1
    return _EmulatedPlan(epilog or "")


def _emulated_run(plan, a, b, c, transpose, alpha, beta, inputs):
    return emulated_gemm(a, b, c, transpose=transpose, alpha=alpha, beta=beta,
                         epilog=plan or None, inputs=inputs)


def _emulated_rerun(*args):
    _EmulatedPlan.reruns += 1
    return _emulated_run(*args)


def _spec(a, b, activation, form, return_aux=True, alpha=1.0, beta=0.0):
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return Spec(activation=activation, alpha=alpha, beta=beta, return_aux=return_aux,
                bias_form=form, transposed=form != "m1",
                out_shape=(*batch, a.shape[-2], b.shape[-1]), batch_shape=batch)


CASES = [((7, 5), (5, 6)), ((2, 7, 5), (5, 6)), ((7, 5), (3, 5, 6)), ((2, 1, 7, 5), (1, 3, 5, 6))]


@pytest.mark.parametrize("shapes", CASES)
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("form", [None, "n", "m1"])
def test_forward_mapping_matches_twin(emulated, rng, shapes, activation, form):
    a, b = (_fake(rng.standard_normal(s)) for s in shapes)
    m, n = shapes[0][-2], shapes[1][-1]
    bias = None if form is None else _fake(rng.standard_normal(n if form == "n" else (m, 1)))
    c = _fake(rng.standard_normal((m, n)))
    spec = _spec(a, b, activation, form, alpha=0.5, beta=2.0)
    out, aux = _matmul_cuda.matmul(a, b, bias, c, spec)
    ref, ref_aux = _matmul_host.matmul(np.asarray(a), np.asarray(b), None if bias is None else
                               np.asarray(bias), np.asarray(c), spec)
    assert np.allclose(out, ref)
    assert out.flags.c_contiguous == (form != "m1")
    if activation is not None:
        assert aux.data.shape == ref_aux.data.shape
        assert (aux.rows, aux.cols, aux.transposed) == (ref_aux.rows, ref_aux.cols,
                                                       ref_aux.transposed)
        assert np.allclose(np.asarray(aux.data, np.float64), np.asarray(ref_aux.data, np.float64))


@pytest.mark.parametrize("shapes", CASES)
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("form", [None, "n", "m1"])
@pytest.mark.parametrize("pair", [False, True])
def test_backward_mapping_matches_twin(emulated, rng, shapes, activation, form, pair):
    a, b = (_fake(rng.standard_normal(s)) for s in shapes)
    m, n = shapes[0][-2], shapes[1][-1]
    bias = None if form is None else _fake(rng.standard_normal(n if form == "n" else (m, 1)))
    spec = _spec(a, b, activation, form)
    _, aux = _matmul_host.matmul(np.asarray(a), np.asarray(b),
                                 None if bias is None else np.asarray(bias), None, spec)
    if aux is not None:
        aux = aux._replace(data=_fake(aux.data))
    batch = spec.batch_shape
    g = _fake(rng.standard_normal((*batch, m, n)))
    up = (_fake(rng.standard_normal((*batch, m, 4))), _fake(rng.standard_normal((4, n))))
    args = (None, up) if pair else (g, None)
    got = _matmul_cuda.matmul_backward(*args, a, b, aux, spec)
    ref = _matmul_host.matmul_backward(*(None if x is None else (tuple(map(np.asarray, x))
                                                        if isinstance(x, tuple) else np.asarray(x))
                                 for x in args), np.asarray(a), np.asarray(b), aux, spec)
    for x, y in zip(got, ref):
        if y is None:
            assert x is None
        else:
            assert x.shape == y.shape and np.allclose(x, y), (x.shape, y.shape)


def test_complex_bias_goes_through_c(emulated, rng):
    a = _fake(rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3)))
    b = _fake(rng.standard_normal((3, 5)) + 1j)
    bias = _fake(rng.standard_normal(5) + 2j)
    spec = _spec(a, b, None, "n", return_aux=False, alpha=1.5)
    out = _matmul_cuda.matmul(a, b, bias, None, spec)
    assert np.allclose(out, 1.5 * np.asarray(a) @ np.asarray(b) + np.asarray(bias))


def test_layout_helpers_copy_only_when_needed(emulated, rng):
    x = _fake(rng.standard_normal((3, 4, 5)))
    assert _matmul_cuda._gemm_ready(x, (3,)) is x
    assert _matmul_cuda._gemm_ready(x[:, ::2, ::2], (3,)) is not x
    y = _matmul_cuda._gemm_ready(_fake(rng.standard_normal((1, 4, 5))), (3,))
    assert y.shape == (3, 4, 5) and y.strides[0] != 0
    f = _fake(np.asfortranarray(rng.standard_normal((4, 5))))
    assert _matmul_cuda._col_major(f) is f
    cm = _matmul_cuda._col_major(_fake(rng.standard_normal((2, 4, 5))))
    assert cm.strides[-2] == cm.itemsize and math.prod(cm.shape) == 40


@pytest.mark.parametrize("form", [None, "n", "m1"])
@pytest.mark.parametrize("return_aux", [False, True])
def test_a_repeat_runs_the_plan_left_on_its_spec(emulated, rng, form, return_aux):
    a, b = _fake(rng.standard_normal((7, 5))), _fake(rng.standard_normal((5, 6)))
    bias = None if form is None else _fake(rng.standard_normal(6 if form == "n" else (7, 1)))
    spec = _spec(a, b, "relu", form, return_aux=return_aux)
    first = _matmul_cuda.matmul(a, b, bias, None, spec)
    assert spec.plan is not None
    lookups, reruns = _EmulatedPlan.lookups, _EmulatedPlan.reruns
    second = _matmul_cuda.matmul(a, b, bias, None, spec)
    assert (_EmulatedPlan.lookups, _EmulatedPlan.reruns) == (lookups, reruns + 1)
    for x, y in zip(first if return_aux else (first,), second if return_aux else (second,)):
        x, y = (np.asarray(v.data if hasattr(v, "rows") else v) for v in (x, y))
        assert np.array_equal(x, y)
    ref = _matmul_host.matmul(np.asarray(a), np.asarray(b),
                              None if bias is None else np.asarray(bias), None, spec)
    assert np.allclose(second[0] if return_aux else second, ref[0] if return_aux else ref)


@pytest.mark.parametrize("case", ["strided a", "broadcast batch", "misaligned bias", "c copied"])
def test_no_plan_is_left_when_an_operand_was_copied(emulated, rng, case):
    a = _fake(rng.standard_normal((7, 10)))[:, ::2] if case == "strided a" else \
        _fake(rng.standard_normal((2, 1, 7, 5) if case == "broadcast batch" else (7, 5)))
    b = _fake(rng.standard_normal((1, 3, 5, 6) if case == "broadcast batch" else (5, 6)))
    bias = _fake(rng.standard_normal(13))[1::2] if case == "misaligned bias" else \
        _fake(rng.standard_normal(6))
    c = _fake(rng.standard_normal((7, 6)))
    # (M, 1) plans a column-major C: C-ordered c is copied
    form = "m1" if case == "c copied" else "n"
    if form == "m1":
        bias = _fake(rng.standard_normal((7, 1)))
    spec = _spec(a, b, None, form, return_aux=False, beta=1.0)
    out = _matmul_cuda.matmul(a, b, bias, c, spec)
    assert spec.plan is None
    ref = _matmul_host.matmul(np.asarray(a), np.asarray(b), np.asarray(bias), np.asarray(c), spec)
    assert np.allclose(out, ref)


def test_call_key_covers_what_validation_and_plans_depend_on(emulated, rng):
    a, b = _fake(rng.standard_normal((7, 5))), _fake(rng.standard_normal((5, 6)))
    key = _calls.call_key(a, b, None, None, "relu", 1.0, 0.0, False, None, False)
    assert key == _calls.call_key(a, b, None, None, "relu", 1.0, 0.0, False, None, False)
    others = [
        _calls.call_key(np.asarray(a), np.asarray(b), None, None, "relu", 1.0, 0.0, False, None,
                        False),  # NumPy arrays: not memoized
        _calls.call_key(a, b, np.ones(6), None, "relu", 1.0, 0.0, False, None, False),
    ]
    assert others == [None, None]
    variants = [
        _calls.call_key(a, b, None, None, "relu", 1, 0.0, False, None, False),  # int alpha
        _calls.call_key(a, b, None, None, "relu", 1 + 0j, 0.0, False, None, False),
        _calls.call_key(a, b, None, None, "gelu", 1.0, 0.0, False, None, False),
        _calls.call_key(a, b, None, None, "relu", 1.0, 0.0, True, None, False),
        _calls.call_key(a, b, None, None, "relu", 1.0, 0.0, False, "tf32", False),
        _calls.call_key(a, b, None, None, "relu", 1.0, 0.0, False, None, True),
        _calls.call_key(a.T.copy().T.view(type(a)), b, None, None, "relu", 1.0, 0.0, False,
                        None, False),  # same values, other strides
        _calls.call_key(_fake(np.asarray(a, np.float32)), b, None, None, "relu", 1.0, 0.0,
                        False, None, False),
        _calls.call_key(a, b, _fake(np.ones(6)), None, "relu", 1.0, 0.0, False, None, False),
    ]
    assert len({key, *variants}) == len(variants) + 1
    base = _fake(np.zeros(36))
    shifted = _calls.call_key(base[1:], b, None, None, None, 1.0, 0.0, False, None, False)
    aligned = _calls.call_key(base[:35], b, None, None, None, 1.0, 0.0, False, None, False)
    assert shifted[3] != aligned[3]  # pointer alignment is part of the key


def test_memoized_calls_validate_and_answer_like_first_calls(emulated, rng, monkeypatch):
    import gpulinalg
    from gpulinalg.dense import _matmul_api as _matmul
    a, b = _fake(rng.standard_normal((7, 5))), _fake(rng.standard_normal((5, 6)))
    bias = _fake(rng.standard_normal(6))
    with gpulinalg.config(backend="cpu"):
        first = _matmul.matmul(a, b, bias=bias, activation="relu")
        assert len(_memo.entries()) == 1
        spec = next(iter(_memo.entries().values())).tail[-1]
        again = _matmul.matmul(a, b, bias=bias, activation="relu")
        assert len(_memo.entries()) == 1 and next(iter(_memo.entries().values())).tail[-1] is spec
        assert np.array_equal(first, again)
        assert np.allclose(again, np.maximum(np.asarray(a) @ np.asarray(b) + bias, 0))
        with pytest.raises(TypeError, match="complex"):
            _matmul.matmul(a, b, bias=bias, activation="relu", alpha=1 + 0j)
        with pytest.raises(ValueError, match="activation"):
            _matmul.matmul(a, b, bias=bias, activation=["relu"])  # unhashable: full path
        with pytest.raises(ValueError, match="NaN"):
            _matmul.matmul(a, b, bias=_fake(np.full(6, np.nan)), activation="relu",
                           check_finite=True)
        monkeypatch.setattr(_memo._memo, "limit", 2)  # the memo of the calling thread
        for n in (2, 3, 4):
            _matmul.matmul(a, _fake(rng.standard_normal((5, n))))
        assert 1 <= len(_memo.entries()) <= 2
