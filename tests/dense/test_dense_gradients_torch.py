"""Gradients of torch tensors through ``dense.matmul`` (bias, ReLU, GELU; the backward on
``matmul_backward``, recorded from differentiable pieces for double backward): ``gradcheck`` and
``gradgradcheck`` in float64 on CPU tensors and CUDA tensors (``gpu``)."""

import pytest

torch = pytest.importorskip("torch")

from torch.autograd import gradcheck, gradgradcheck  # noqa: E402

from gpulinalg._runtime.gradients import FUNCTIONS  # noqa: E402
from gpulinalg import dense  # noqa: E402


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA build of torch and a GPU")
    return request.param


def _rand(*shape, device):
    g = torch.Generator().manual_seed(sum(shape))
    return torch.randn(*shape, dtype=torch.float64, generator=g).to(device).requires_grad_()


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias_shape", [None, (5,), (4, 1)])
def test_matmul_gradcheck(device, activation, bias_shape):
    a, b = _rand(4, 3, device=device), _rand(3, 5, device=device)
    inputs = (a, b) + (() if bias_shape is None else (_rand(*bias_shape, device=device),))
    out = dense.matmul(*inputs[:2], bias=inputs[2] if len(inputs) == 3 else None,
                       activation=activation)
    assert out.grad_fn is not None
    assert gradcheck(lambda a, b, *c: dense.matmul(a, b, bias=c[0] if c else None,
                                                   activation=activation), inputs)


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias_shape", [None, (5,), (4, 1)])
def test_matmul_gradgradcheck(device, activation, bias_shape):
    a, b = _rand(4, 3, device=device), _rand(3, 5, device=device)
    inputs = (a, b) + (() if bias_shape is None else (_rand(*bias_shape, device=device),))
    assert gradgradcheck(lambda a, b, *c: dense.matmul(a, b, bias=c[0] if c else None,
                                                       activation=activation), inputs)


@pytest.mark.parametrize("shapes", [((2, 4, 3), (3, 5)), ((4, 3), (2, 3, 5))])
def test_matmul_broadcast_batch_gradgradcheck(device, shapes):
    a, b, bias = _rand(*shapes[0], device=device), _rand(*shapes[1], device=device), \
        _rand(4, 1, device=device)
    assert gradgradcheck(lambda a, b, c: dense.matmul(a, b, bias=c, activation="gelu"),
                         (a, b, bias))


def test_matmul_same_second_derivatives_as_torch(device):
    a, b, bias = _rand(6, 3, device=device), _rand(3, 5, device=device), _rand(5, device=device)

    def hessian_term(out):
        grads = torch.autograd.grad((out ** 2).sum(), (a, b, bias), create_graph=True)
        return torch.autograd.grad(sum((g ** 2).sum() for g in grads), (a, b, bias))
    ours = hessian_term(dense.matmul(a, b, bias=bias, activation="gelu"))
    theirs = hessian_term(torch.nn.functional.gelu(a @ b + bias, approximate="tanh"))
    for x, y in zip(ours, theirs):
        assert torch.allclose(x, y, rtol=1e-10, atol=1e-10 * float(y.abs().max()))


def test_first_order_backward_stays_fused(device, monkeypatch):
    """Without ``create_graph`` the backward is one ``matmul_backward`` call (the epilogs)
    and no product (counted where the rule looks them up: torch runs a CUDA backward on its
    own thread, whose ``last_run()`` is not this one's)."""
    calls = []
    for name in ("dense.matmul", "dense.matmul_backward"):
        real = FUNCTIONS[name]
        monkeypatch.setitem(FUNCTIONS, name,
                            lambda *a, _n=name, _f=real, **k: calls.append(_n) or _f(*a, **k))
    a, b = _rand(4, 3, device=device), _rand(3, 5, device=device)
    out = dense.matmul(a, b, activation="gelu")
    torch.autograd.grad(out.sum(), (a, b))
    assert calls == ["dense.matmul_backward"]


def test_matmul_broadcast_batch_gradcheck(device):
    a, b = _rand(2, 4, 3, device=device), _rand(3, 5, device=device)
    assert gradcheck(lambda a, b: dense.matmul(a, b, activation="relu"), (a, b))


def test_matmul_same_gradients_as_torch(device):
    a, b, bias = _rand(6, 3, device=device), _rand(3, 5, device=device), _rand(5, device=device)
    out = dense.matmul(a, b, bias=bias, activation="gelu")
    ours = torch.autograd.grad((out ** 2).sum(), (a, b, bias))
    ref = torch.nn.functional.gelu(a @ b + bias, approximate="tanh")
    theirs = torch.autograd.grad((ref ** 2).sum(), (a, b, bias))
    for x, y in zip(ours, theirs):
        assert torch.allclose(x, y, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kwargs", [dict(alpha=2.0), dict(c="ones", beta=1.0)])
def test_matmul_unsupported_refuses(kwargs):
    a, b = _rand(4, 3, device="cpu"), _rand(3, 5, device="cpu")
    if kwargs.get("c") == "ones":
        kwargs = dict(kwargs, c=torch.ones(4, 5, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match="alpha"):
        dense.matmul(a, b, **kwargs)
