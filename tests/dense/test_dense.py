"""gpulinalg.dense.matmul against a float64 NumPy reference, on both backends."""

import numpy as np
import pytest

import gpulinalg
from gpulinalg.dense import MatmulAux, matmul
from gpulinalg.dense._matmul_host import preactivation, relu_mask

from tests.support.dense_ref import assert_close, reference

DTYPES = [np.float32, np.float64, np.float16]


def _operands(rng, shape_a, shape_b, dtype):
    a = rng.standard_normal(shape_a).astype(dtype)
    b = rng.standard_normal(shape_b).astype(dtype)
    return a, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias_form", [None, "n", "m1"])
@pytest.mark.parametrize("return_aux", [False, True])
def test_forms(backend, rng, dtype, activation, bias_form, return_aux):
    m, k, n = 37, 24, 19
    a, b = _operands(rng, (m, k), (k, n), dtype)
    bias = {None: None, "n": rng.standard_normal(n), "m1": rng.standard_normal((m, 1))}[bias_form]
    bias = None if bias is None else bias.astype(dtype)
    got = matmul(a, b, bias=bias, activation=activation, return_aux=return_aux)
    ref, z, bound = reference(a, b, bias, activation)
    if return_aux:
        got, aux = got
        if activation is None:
            assert aux is None
        else:
            assert isinstance(aux, MatmulAux) and aux.activation == activation
            assert aux.transposed == (bias_form != "m1")
            _check_aux(aux, z, bound, dtype, k)
    assert got.dtype == dtype
    assert_close(got, ref, bound, dtype, k, activation)
    assert gpulinalg.last_run().backend == backend


def _check_aux(aux, z, bound, dtype, k):
    if aux.activation == "relu":
        mask = relu_mask(aux)
        clear = np.abs(z) > (k + 8) * 2.0 ** -10 * bound  # signs away from rounding noise
        assert np.array_equal(mask[clear], (z > 0)[clear])
    else:
        assert_close(preactivation(aux), z, bound, dtype, k)


@pytest.mark.parametrize("shapes", [((2, 3, 9, 7), (7, 5)), ((9, 7), (4, 7, 5)),
                                    ((2, 1, 9, 7), (1, 3, 7, 5)), ((3, 9, 7), (3, 7, 5))])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_batched_broadcast(backend, rng, shapes, activation):
    a, b = _operands(rng, *shapes, np.float64)
    bias = rng.standard_normal(5)
    out, aux = matmul(a, b, bias=bias, activation=activation, return_aux=True)
    ref, z, bound = reference(a, b, bias, activation)
    assert_close(out, ref, bound, np.float64, 7, activation)
    if activation:
        _check_aux(aux, z, bound, np.float64, 7)


@pytest.mark.parametrize("layout", ["F", "transposed", "strided", "offset"])
def test_layouts(backend, rng, layout):
    base_a = rng.standard_normal((30, 40)).astype(np.float32)
    base_b = rng.standard_normal((40, 30)).astype(np.float32)
    a, b = {"F": (np.asfortranarray(base_a), np.asfortranarray(base_b)),
            "transposed": (base_b.T, base_a.T),
            "strided": (base_a[::2, ::3], base_b[::3, ::2]),
            "offset": (base_a[1:, 1:], base_b[1:, 3:])}[layout]
    bias = rng.standard_normal(b.shape[1]).astype(np.float32)
    out = matmul(a, b, bias=bias, activation="gelu")
    ref, _, bound = reference(a, b, bias, "gelu")
    assert_close(out, ref, bound, np.float32, a.shape[1], "gelu")


@pytest.mark.parametrize("c_shape", [(12, 10), (1, 10), (3, 12, 10)])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_alpha_beta_c(backend, rng, c_shape, activation):
    a, b = _operands(rng, (3, 12, 8), (8, 10), np.float64)
    c = rng.standard_normal(c_shape)
    bias = rng.standard_normal(10)
    out = matmul(a, b, bias=bias, activation=activation, alpha=-0.5, c=c, beta=2.0)
    ref, _, bound = reference(a, b, bias, activation, alpha=-0.5, c=c, beta=2.0)
    assert_close(out, ref, bound, np.float64, 8)


def test_beta_zero_ignores_c(backend, rng):
    a, b = _operands(rng, (4, 3), (3, 5), np.float64)
    c = np.full((4, 5), np.nan)
    assert np.allclose(matmul(a, b, c=c, beta=0.0), a @ b)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex(backend, rng, dtype):
    a = (rng.standard_normal((6, 5)) + 1j * rng.standard_normal((6, 5))).astype(dtype)
    b = (rng.standard_normal((5, 4)) + 1j * rng.standard_normal((5, 4))).astype(dtype)
    bias = (rng.standard_normal(4) + 1j).astype(dtype)
    c = np.ones((6, 4), dtype=dtype)
    out = matmul(a, b, bias=bias, c=c, beta=0.5j, alpha=2.0)
    ref, _, bound = reference(a, b, bias, alpha=2.0, c=c, beta=0.5j)
    assert_close(out, ref, bound, dtype, 5)


def test_bfloat16(backend, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a, b = _operands(rng, (16, 32), (32, 8), ml_dtypes.bfloat16)
    bias = rng.standard_normal(8).astype(ml_dtypes.bfloat16)
    out = matmul(a, b, bias=bias, activation="relu")
    ref, _, bound = reference(a.astype(np.float32), b.astype(np.float32),
                              bias.astype(np.float32), "relu")
    got = np.asarray(out).astype(np.float64)
    assert np.all(np.abs(got - ref) <= 40 * 2.0 ** -7 * (bound + np.abs(ref)))


@pytest.mark.parametrize("shapes", [((0, 4), (4, 3)), ((4, 0), (0, 3)), ((4, 2), (2, 0)),
                                    ((0, 4, 2), (2, 3)), ((1, 1), (1, 1))])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_empty_and_one(backend, rng, shapes, activation):
    a, b = _operands(rng, *shapes, np.float32)
    bias = rng.standard_normal(shapes[1][-1]).astype(np.float32)
    out, aux = matmul(a, b, bias=bias, activation=activation, return_aux=True)
    ref, _, bound = reference(a, b, bias, activation)
    assert_close(out, ref, bound, np.float32, max(a.shape[-1], 1), activation)
    assert (aux is None) == (activation is None)


def test_inputs_not_modified(backend, rng):
    a, b = _operands(rng, (2, 8, 6), (6, 5), np.float32)
    bias, c = rng.standard_normal(5).astype(np.float32), np.ones((8, 5), np.float32)
    copies = [x.copy() for x in (a, b, bias, c)]
    matmul(a, b, bias=bias, c=c, beta=1.0, activation="relu", return_aux=True)
    for x, y in zip((a, b, bias, c), copies):
        assert np.array_equal(x, y)


def test_lists_accepted(backend):
    assert np.allclose(matmul([[1.0, 2.0]], [[3.0], [4.0]]), [[11.0]])


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(a=np.ones((3, 4)), b=np.ones((5, 2))), ValueError, ["K=4", "K=5"]),
    (dict(a=np.ones((3, 4)), b=np.ones((4, 2)), bias=np.ones(3)), ValueError, ["(2,)", "(3,)"]),
    (dict(a=np.ones((3, 4)), b=np.ones((4, 2), np.float32)), TypeError, ["float32", "float64"]),
    (dict(a=np.ones((3, 4)), b=np.ones((4, 2)), bias=np.ones(2, np.float32)), TypeError,
     ["bias", "float32"]),
    (dict(a=np.ones((3, 4), int), b=np.ones((4, 2), int)), TypeError, ["int64"]),
    (dict(a=np.ones(4), b=np.ones((4, 2))), ValueError, ["(4,)"]),
    (dict(a=np.ones((3, 4)), b=np.ones((4, 2)), activation="tanh"), ValueError, ["tanh"]),
    (dict(a=np.ones((3, 4), complex), b=np.ones((4, 2), complex), activation="relu"), ValueError,
     ["complex128"]),
    (dict(a=np.ones((2, 3, 4)), b=np.ones((5, 4, 2))), ValueError, ["(2,)", "(5,)"]),
    (dict(a=np.ones((3, 4)), b=np.ones((4, 2)), c=np.ones((3, 3)), beta=1.0), ValueError,
     ["(3, 3)"]),
    (dict(a=np.ones((3, 4)), b=np.ones((4, 2)), compute_type="int8"), ValueError, ["int8"]),
    (dict(a="abc", b=np.ones((4, 2))), TypeError, ["a"]),
])
def test_bad_input(kwargs, error, words):
    a, b = kwargs.pop("a"), kwargs.pop("b")
    with pytest.raises(error) as info:
        matmul(a, b, **kwargs)
    for w in words:
        assert w in str(info.value)


def test_mixed_packages():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="torch"):
        matmul(np.ones((2, 2)), torch.ones(2, 2, dtype=torch.float64))


@pytest.mark.parametrize("where", ["a", "b", "bias", "c"])
def test_check_finite(backend, where):
    arrays = dict(a=np.ones((3, 4)), b=np.ones((4, 2)), bias=np.ones(2), c=np.ones((3, 2)))
    arrays[where][0] = np.nan
    with pytest.raises(ValueError, match=where):
        matmul(arrays["a"], arrays["b"], bias=arrays["bias"], c=arrays["c"], beta=1.0,
               check_finite=True)


def test_torch_cpu_tensors_round_trip(rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(rng.standard_normal((5, 4)))
    b = torch.from_numpy(rng.standard_normal((4, 3)))
    out, aux = matmul(a, b, bias=torch.ones(3, dtype=torch.float64), activation="relu",
                      return_aux=True)
    assert isinstance(out, torch.Tensor) and isinstance(aux.data, torch.Tensor)
    assert torch.allclose(out, torch.relu(a @ b + 1))


def test_forced_oom_falls_back(fake_gpu, rng):
    from gpulinalg import testing
    a, b = _operands(rng, (6, 5), (5, 4), np.float64)
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(gpulinalg.FallbackWarning):
            out = matmul(a, b, activation="relu")
    assert np.allclose(out, np.maximum(a @ b, 0))
    assert gpulinalg.last_run().fell_back


def test_cupy_in_cupy_out(xp_gpu, rng):
    a = xp_gpu.asarray(rng.standard_normal((64, 32)).astype(np.float16))
    b = xp_gpu.asarray(rng.standard_normal((32, 48)).astype(np.float16))
    bias = xp_gpu.asarray(rng.standard_normal(48).astype(np.float16))
    out, aux = matmul(a, b, bias=bias, activation="relu", return_aux=True)
    assert isinstance(out, xp_gpu.ndarray) and isinstance(aux.data, xp_gpu.ndarray)
    assert out.flags.c_contiguous and aux.data.dtype == np.uint8
    ref, z, bound = reference(a.get(), b.get(), bias.get(), "relu")
    assert_close(out.get(), ref, bound, np.float16, 32)


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("bias_form", ["n", "m1"])
def test_gpu_aux_matches_cpu_aux(rng, activation, bias_form):
    a, b = _operands(rng, (2, 40, 24), (24, 33), np.float32)
    bias = rng.standard_normal(33 if bias_form == "n" else (40, 1)).astype(np.float32)
    with gpulinalg.config(backend="gpu"):
        _, g_aux = matmul(a, b, bias=bias, activation=activation, return_aux=True)
    with gpulinalg.config(backend="cpu"):
        _, c_aux = matmul(a, b, bias=bias, activation=activation, return_aux=True)
    assert g_aux.data.shape == c_aux.data.shape and g_aux.data.dtype == c_aux.data.dtype
    assert (g_aux.rows, g_aux.cols, g_aux.transposed) == (c_aux.rows, c_aux.cols, c_aux.transposed)
    _, z, bound = reference(a, b, bias)
    _check_aux(g_aux, z, bound, np.float32, 24)


@pytest.mark.gpu
@pytest.mark.parametrize("compute_type", [None, "tf32"])
def test_float32_precision(rng, compute_type):
    """float32 stays full float32 unless TF32 is asked for (TF32 has a 10-bit mantissa)."""
    a, b = _operands(rng, (256, 512), (512, 256), np.float32)
    with gpulinalg.config(backend="gpu"):
        out = matmul(a, b, compute_type=compute_type)
    ref, _, bound = reference(a, b)
    err = np.max(np.abs(out - ref) / bound)
    if compute_type is None:
        assert err < 1e-5
    else:
        assert err < 1e-2


# -- issue 18: byte order, NaN policy, answers without running, warnings at the caller ------

@pytest.mark.parametrize("dtype", [">f8", ">f4", ">c16"])
def test_big_endian_inputs_are_converted(backend, rng, dtype):
    a = rng.standard_normal((5, 4)).astype(dtype)
    b = rng.standard_normal((4, 3)).astype(dtype)
    bias = rng.standard_normal(3).astype(dtype)
    a0, b0 = a.copy(), b.copy()
    out = matmul(a, b, bias=bias)
    native = np.dtype(dtype).newbyteorder("=")
    assert out.dtype == native and out.dtype.isnative
    ref = a.astype(native) @ b.astype(native) + bias.astype(native)
    assert np.allclose(out, ref, rtol=10 * np.finfo(native).eps * 4, atol=0)
    assert a.dtype == np.dtype(dtype) and np.array_equal(a, a0) and np.array_equal(b, b0)


def test_big_endian_mixed_with_native_and_backward(backend, rng):
    from gpulinalg.dense import matmul_backward
    a = rng.standard_normal((6, 4)).astype(">f8")
    b = rng.standard_normal((4, 3))  # native float64: the same dtype in another byte order
    out, aux = matmul(a, b, activation="relu", return_aux=True)
    assert np.allclose(out, np.maximum(a.astype("<f8") @ b, 0))
    g = np.ones((6, 3), ">f8")
    grads = matmul_backward(g, a, b, aux=aux, activation="relu")
    mask = (a.astype("<f8") @ b) > 0
    assert np.allclose(grads.grad_a, (g * mask) @ b.T)
    assert grads.grad_a.dtype.isnative and grads.grad_b.dtype.isnative


@pytest.mark.parametrize("where", ["a", "b", "bias", "c"])
def test_nan_propagates_silently_by_default(backend, where):
    """The documented policy: check_finite=False, so NaN in gives NaN out, no error or warning
    (as numpy/cupy/torch matmul); only the rows/columns the NaN reaches are NaN."""
    import warnings
    arrays = dict(a=np.ones((3, 4)), b=np.ones((4, 2)), bias=np.ones(2), c=np.ones((3, 2)))
    arrays[where][(0,) * arrays[where].ndim] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = matmul(arrays["a"], arrays["b"], bias=arrays["bias"], c=arrays["c"], beta=1.0)
    expect = np.zeros((3, 2), bool)
    expect[{"a": (0, slice(None)), "b": (slice(None), 0), "bias": (slice(None), 0),
            "c": (0, 0)}[where]] = True
    assert np.array_equal(np.isnan(out), expect)


def test_nan_in_unused_c_does_not_propagate(backend):
    c = np.full((3, 2), np.nan)
    out = matmul(np.ones((3, 4)), np.ones((4, 2)), c=c, beta=0.0)
    assert np.array_equal(out, np.full((3, 2), 4.0))


@pytest.mark.parametrize("shapes, reason", [
    (((0, 4), (4, 3)), "empty input"), (((4, 2), (2, 0)), "empty input"),
    (((3, 0, 4), (4, 3)), "empty input"), (((4, 0), (0, 3)), "K = 0")])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_answers_without_running_are_recorded(backend, shapes, reason, activation):
    a, b = np.ones(shapes[0], np.float32), np.ones(shapes[1], np.float32)
    out, aux = matmul(a, b, activation=activation, return_aux=True)
    rec = gpulinalg.last_run()
    assert (rec.op, rec.backend, rec.fell_back) == ("dense.matmul", "none", False)
    assert rec.reason.startswith(reason)
    assert out.shape == np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2],
                                                                             b.shape[-1])
    assert out.dtype == np.float32 and not out.any()
    if activation == "relu":
        assert not relu_mask(aux).any()
    elif activation == "gelu":
        assert not preactivation(aux).any()


def test_k0_with_bias_still_runs(backend):
    out = matmul(np.ones((4, 0)), np.ones((0, 3)), bias=np.arange(3.0), activation="relu")
    assert np.array_equal(out, np.tile(np.arange(3.0), (4, 1)))
    assert gpulinalg.last_run().backend in ("cpu", "gpu")


@pytest.mark.parametrize("form", [False, True, "column"])
def test_backward_of_an_empty_product_is_recorded(backend, form):
    from gpulinalg.dense import matmul_backward
    a, b = np.ones((4, 2)), np.ones((2, 0))
    grads = matmul_backward(np.ones((4, 0)), a, b, bias=form)
    assert gpulinalg.last_run().backend == "none"
    assert grads.grad_a.shape == (4, 2) and not grads.grad_a.any()
    assert grads.grad_b.shape == (2, 0)
    want = {False: None, True: (0,), "column": (4, 1)}[form]
    assert (grads.grad_bias is None) if want is None else grads.grad_bias.shape == want


@pytest.mark.skipif(gpulinalg.gpu_available(), reason="checks the no-GPU answer")
def test_shortcut_keeps_backend_gpu_strict():
    with gpulinalg.config(backend="gpu"), pytest.raises(gpulinalg.GPUUnavailableError):
        matmul(np.ones((0, 3)), np.ones((3, 2)))
    assert gpulinalg.last_run().details.get("raised") == "GPUUnavailableError"


def test_fallback_warning_points_at_the_caller(fake_gpu, rng):
    from gpulinalg import testing
    a, b = _operands(rng, (6, 5), (5, 4), np.float64)
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(gpulinalg.FallbackWarning) as record:
            matmul(a, b)
    assert [w.filename for w in record] == [__file__]
