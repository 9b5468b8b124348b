"""matmul_backward: finite differences on the CPU, the CPU twin on the GPU, FusedLinear vs torch."""

import numpy as np
import pytest

import gpulinalg
from gpulinalg.dense import matmul, matmul_backward

from tests.support.dense_ref import assert_close


def _problem(rng, shape_a=(5, 4), shape_b=(4, 3), bias_form="n", dtype=np.float64):
    a = rng.standard_normal(shape_a).astype(dtype)
    b = rng.standard_normal(shape_b).astype(dtype)
    m, n = shape_a[-2], shape_b[-1]
    bias = {None: None, "n": rng.standard_normal(n), "m1": rng.standard_normal((m, 1))}[bias_form]
    return a, b, None if bias is None else bias.astype(dtype)


def _loss(a, b, bias, activation, weights):
    return float((matmul(a, b, bias=bias, activation=activation) * weights).sum())


def _numeric_grad(f, x, h=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + h
        up = f()
        x[idx] = old - h
        down = f()
        x[idx] = old
        g[idx] = (up - down) / (2 * h)
    return g


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias_form", [None, "n", "m1"])
@pytest.mark.parametrize("shapes", [((5, 4), (4, 3)), ((2, 5, 4), (4, 3)),
                                    ((2, 1, 5, 4), (3, 4, 3))])
def test_finite_differences(rng, activation, bias_form, shapes):
    a, b, bias = _problem(rng, *shapes, bias_form=bias_form)
    out, aux = matmul(a, b, bias=bias, activation=activation, return_aux=True)
    w = rng.standard_normal(out.shape)
    grads = matmul_backward(w, a, b, aux=aux, activation=activation,
                            bias=bias is not None and ("column" if bias_form == "m1" else True))
    f = lambda: _loss(a, b, bias, activation, w)  # noqa: E731
    assert np.allclose(grads.grad_a, _numeric_grad(f, a), atol=1e-6)
    assert np.allclose(grads.grad_b, _numeric_grad(f, b), atol=1e-6)
    if bias is None:
        assert grads.grad_bias is None
    else:
        assert grads.grad_bias.shape == bias.shape
        assert np.allclose(grads.grad_bias, _numeric_grad(f, bias), atol=1e-6)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_upstream_pair_equals_product(backend, rng, activation):
    """grad_out given as (g, w) (the next layer's backward) equals passing g @ w."""
    a, b, bias = _problem(rng, (16, 12), (12, 10), dtype=np.float32)
    out, aux = matmul(a, b, bias=bias, activation=activation, return_aux=True)
    g = rng.standard_normal((16, 6)).astype(np.float32)
    w = rng.standard_normal((6, 10)).astype(np.float32)
    pair = matmul_backward((g, w), a, b, aux=aux, activation=activation, bias=True)
    with gpulinalg.config(backend="cpu"):
        full = matmul_backward(g @ w, a, b, aux=aux, activation=activation, bias=True)
    for x, y in zip(pair, full):
        assert np.allclose(x, y, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias_form", [None, "n", "m1"])
@pytest.mark.parametrize("pair", [False, True])
def test_gpu_matches_cpu_twin(rng, dtype, activation, bias_form, pair):
    a, b, bias = _problem(rng, (2, 48, 32), (32, 40), bias_form=bias_form, dtype=dtype)
    flag = bias is not None and ("column" if bias_form == "m1" else True)
    g = rng.standard_normal((2, 48, 40)).astype(dtype)
    up = (rng.standard_normal((2, 48, 8)).astype(dtype), rng.standard_normal((8, 40)).astype(dtype))
    results = {}
    for where in ("cpu", "gpu"):
        with gpulinalg.config(backend=where):
            _, aux = matmul(a, b, bias=bias, activation=activation, return_aux=True)
            results[where] = matmul_backward(up if pair else g, a, b, aux=aux,
                                             activation=activation, bias=flag)
            assert gpulinalg.last_run().backend == where
    scale = 64 * 32 * (8 if pair else 1)
    for got, ref in zip(results["gpu"], results["cpu"]):
        if ref is None:
            assert got is None
            continue
        ref64 = np.asarray(ref, dtype=np.float64)
        assert got.shape == ref.shape
        assert_close(got, ref64, np.abs(ref64).max() + scale ** 0.5, dtype, 32, activation)


def test_aux_required(rng):
    a, b, _ = _problem(rng)
    with pytest.raises(ValueError, match="aux"):
        matmul_backward(np.ones((5, 3)), a, b, activation="relu")


def test_aux_mismatch(rng):
    a, b, bias = _problem(rng)
    _, aux = matmul(a, b, bias=bias, activation="relu", return_aux=True)
    with pytest.raises(ValueError, match="relu"):
        matmul_backward(np.ones((5, 3)), a, b, aux=aux, activation="gelu")
    with pytest.raises(ValueError, match=r"\(5, 4\)"):
        matmul_backward(np.ones((5, 4)), a, b, aux=aux, activation="relu")


def test_backward_inputs_not_modified(backend, rng):
    a, b, bias = _problem(rng, (6, 5), (5, 4))
    out, aux = matmul(a, b, bias=bias, activation="gelu", return_aux=True)
    g = np.ones_like(out)
    copies = [x.copy() for x in (a, b, g, aux.data)]
    matmul_backward(g, a, b, aux=aux, activation="gelu", bias=True)
    for x, y in zip((a, b, g, aux.data), copies):
        assert np.array_equal(x, y)


def test_backward_empty(backend, rng):
    a, b, bias = _problem(rng, (0, 4), (4, 3))
    out, aux = matmul(a, b, bias=bias, activation="relu", return_aux=True)
    grads = matmul_backward(np.ones_like(out), a, b, aux=aux, activation="relu", bias=True)
    assert grads.grad_a.shape == (0, 4) and grads.grad_b.shape == (4, 3)
    assert np.array_equal(grads.grad_b, np.zeros((4, 3))) and grads.grad_bias.shape == (3,)
