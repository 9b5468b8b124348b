"""Gradients of torch tensors through ``dense.matmul`` (bias, ReLU, GELU; the backward on
``matmul_backward``, recorded from differentiable pieces for double backward) and through
``dense.matmul_backward`` itself (of the upstream gradient, ``a`` and ``b``, the activation's
derivative held at the aux): ``gradcheck`` and ``gradgradcheck`` in float64 on CPU tensors and
CUDA tensors (``gpu``), the same gradients as torch's own linear layer."""

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


SCALED = {  # name: (kwargs of matmul, whether a c of (4, 5) is passed)
    "alpha": (dict(alpha=0.5), False),
    "c_beta": (dict(beta=2.0), True),
    "alpha_c_relu": (dict(alpha=-1.5, beta=0.5, activation="relu"), True),
    "alpha_c_gelu_bias": (dict(alpha=2.0, beta=-1.0, activation="gelu", bias="row"), True),
}


def _scaled_inputs(name, dtype, device):
    kwargs, with_c = SCALED[name]
    g = torch.Generator().manual_seed(len(name))

    def rand(*shape):
        return torch.randn(*shape, dtype=dtype, generator=g).to(device).requires_grad_()
    inputs = [rand(4, 3), rand(3, 5)]
    if kwargs.get("bias") == "row":
        kwargs = {k: v for k, v in kwargs.items() if k != "bias"}
        inputs.append(rand(5))
    if with_c:
        inputs.append(rand(4, 5))
    return kwargs, with_c, tuple(inputs)


def _scaled(kwargs, with_c):
    def fn(a, b, *rest):
        rest = list(rest)
        c = rest.pop() if with_c else None
        return dense.matmul(a, b, bias=rest[0] if rest else None, c=c, **kwargs)
    return fn


def _addmm(kwargs, with_c):
    """The same function written with torch: ``act(alpha a b + beta c + bias)``."""
    def fn(a, b, *rest):
        rest = list(rest)
        z = kwargs.get("alpha", 1.0) * (a @ b)
        if with_c:
            z = z + kwargs.get("beta", 0.0) * rest.pop()
        if rest:
            z = z + rest[0]
        act = kwargs.get("activation")
        if act == "relu":
            return torch.relu(z)
        return torch.nn.functional.gelu(z, approximate="tanh") if act == "gelu" else z
    return fn


@pytest.mark.parametrize("name", sorted(SCALED))
def test_scaled_matmul_gradients(name, device):
    """alpha, c and beta take torch.addmm's gradients, differentiable again."""
    kwargs, with_c, inputs = _scaled_inputs(name, torch.float64, device)
    assert gradcheck(_scaled(kwargs, with_c), inputs)
    assert gradgradcheck(_scaled(kwargs, with_c), inputs)
    ours = torch.autograd.grad((_scaled(kwargs, with_c)(*inputs) ** 2).sum(), inputs)
    theirs = torch.autograd.grad((_addmm(kwargs, with_c)(*inputs) ** 2).sum(), inputs)
    for x, y in zip(ours, theirs):
        assert torch.allclose(x, y, rtol=1e-10, atol=1e-10 * float(y.abs().max()))


@pytest.mark.parametrize("kwargs", [dict(), dict(alpha=0.5 - 2j, beta=1 + 1j)])
def test_complex_matmul_gradients(kwargs, device):
    """Complex products (no activation: ReLU and GELU are real) with conj(alpha), conj(beta)."""
    g = torch.Generator().manual_seed(3)
    a, b, bias, c = (torch.randn(*s, dtype=torch.complex128, generator=g).to(device)
                     .requires_grad_() for s in ((4, 3), (3, 5), (5,), (4, 5)))
    with_c = "beta" in kwargs

    def fn(a, b, bias, c):
        return dense.matmul(a, b, bias=bias, c=c if with_c else None, **kwargs)
    assert gradcheck(fn, (a, b, bias, c))
    assert gradgradcheck(fn, (a, b, bias, c))
    ours = torch.autograd.grad(fn(a, b, bias, c).abs().pow(2).sum(), (a, b, bias))
    ref = kwargs.get("alpha", 1) * (a @ b) + bias + (kwargs["beta"] * c if with_c else 0)
    theirs = torch.autograd.grad(ref.abs().pow(2).sum(), (a, b, bias))
    for x, y in zip(ours, theirs):
        assert torch.allclose(x, y, rtol=1e-10, atol=1e-10)


# (bias shape of the forward, matmul_backward's bias flag): bias=True follows the aux's form
BIASES = {"none": (None, False), "row": ((5,), True), "column": ((4, 1), "column"),
          "column_from_aux": ((4, 1), True)}


def _backward_case(device, activation, bias_name, a_shape=(4, 3), b_shape=(3, 5)):
    """``(g, a, b)`` that require grad and ``matmul_backward`` of them, the aux made by the
    forward of detached copies (data, as a training step's)."""
    bias_shape, flag = BIASES[bias_name]
    a, b = _rand(*a_shape, device=device), _rand(*b_shape, device=device)
    bias = None if bias_shape is None else _rand(*bias_shape, device=device).detach()
    out, aux = dense.matmul(a.detach(), b.detach(), bias=bias, activation=activation,
                            return_aux=True)
    g = _rand(*out.shape, device=device)

    def fn(g, a, b):
        grads = dense.matmul_backward(g, a, b, aux=aux, activation=activation, bias=flag)
        return tuple(x for x in grads if x is not None)
    return fn, (g, a, b), bias


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias_name", sorted(BIASES))
def test_matmul_backward_gradcheck(device, activation, bias_name):
    fn, inputs, _ = _backward_case(device, activation, bias_name)
    assert all(x.grad_fn is not None for x in fn(*inputs))
    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


@pytest.mark.parametrize("shapes", [((2, 4, 3), (3, 5)), ((4, 3), (2, 3, 5))])
def test_matmul_backward_broadcast_batch_gradgradcheck(device, shapes):
    fn, inputs, _ = _backward_case(device, "gelu", "column", *shapes)
    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


def test_matmul_backward_pair_gradcheck(device):
    """``grad_out=(g, w)`` stands for ``g @ w``: gradients of ``g`` and ``w`` too."""
    fn, (_, a, b), _ = _backward_case(device, "relu", "row")
    g, w = _rand(4, 2, device=device), _rand(2, 5, device=device)
    assert gradcheck(lambda g, w, a, b: fn((g, w), a, b), (g, w, a, b))
    assert gradgradcheck(lambda g, w, a, b: fn((g, w), a, b), (g, w, a, b))


def _torch_backward(g, a, b, bias, activation, held):
    """The gradients of torch's own ``act(a @ b + bias)`` linear layer (GELU's tanh form),
    recorded: torch's activation backward at the pre-activation, which ``held`` detaches (the
    derivative a given aux fixes) or keeps a function of ``a`` and ``b`` (torch's full double
    backward)."""
    if bias is not None:  # its gradient is a result, not a leaf of the loss
        bias = bias.detach().requires_grad_()
    inputs = (a, b) + (() if bias is None else (bias,))
    z = a @ b + (0 if bias is None else bias)
    if held:
        z = z.detach().requires_grad_()
        inputs = (z,)
    out = z if activation is None else (torch.relu(z) if activation == "relu" else
                                        torch.nn.functional.gelu(z, approximate="tanh"))
    grads = torch.autograd.grad(out, inputs, g, create_graph=True)
    if not held:
        return grads
    dz, = grads
    gbias = () if bias is None else (dz.sum(0) if bias.dim() == 1 else dz.sum(1, keepdim=True),)
    return (dz @ b.mT, a.mT @ dz) + gbias


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias_name", ["none", "row", "column"])
def test_matmul_backward_same_gradients_as_torch(device, activation, bias_name):
    """The gradients of a loss of ``matmul_backward``'s results: those of torch's linear
    layer's backward with the activation's derivative held (of ``g``, ``a``, ``b``); of ``g``
    those of torch's full double backward too (the derivative does not depend on ``g``)."""
    fn, (g, a, b), bias = _backward_case(device, activation, bias_name)

    def loss(grads):
        return sum((x ** 2).sum() for x in grads)
    ours = torch.autograd.grad(loss(fn(g, a, b)), (g, a, b))
    held = torch.autograd.grad(loss(_torch_backward(g, a, b, bias, activation, True)), (g, a, b))
    for x, y in zip(ours, held):
        assert torch.allclose(x, y, rtol=1e-10, atol=1e-10 * float(y.abs().max()))
    full = torch.autograd.grad(loss(_torch_backward(g, a, b, bias, activation, False)), g)[0]
    ours_g = torch.autograd.grad(loss(fn(g, a, b)), g)[0]
    assert torch.allclose(ours_g, full, rtol=1e-10, atol=1e-10 * float(full.abs().max()))


def test_matmul_backward_refuses_a_pre_activation_that_requires_grad(device):
    """GELU's aux holds ``z``, on which ``matmul_backward``'s results depend: its gradient is
    not computed, so the call refuses instead of dropping it."""
    fn, (g, a, b), _ = _backward_case(device, "gelu", "row")
    _, aux = dense.matmul(a, b, bias=torch.ones(5, dtype=a.dtype, device=device),
                          activation="gelu", return_aux=True)
    live = aux._replace(data=aux.data.detach().requires_grad_())
    with pytest.raises(NotImplementedError, match="pre-activation requires grad"):
        dense.matmul_backward(g, a, b, aux=live, activation="gelu", bias=True)
    grads = dense.matmul_backward(g, a, b, aux=live._replace(data=live.data.detach()),
                                  activation="gelu", bias=True)
    assert grads.grad_a.grad_fn is not None
    with pytest.raises(NotImplementedError, match="pre-activation requires grad"):
        # the aux alone requires grad: seen inside its NamedTuple, refused as well
        dense.matmul_backward(g.detach(), a.detach(), b.detach(), aux=live,
                              activation="gelu", bias=True)


def test_matmul_backward_complex_refuses():
    a = _rand(4, 3, device="cpu").detach().to(torch.complex128).requires_grad_()
    b = torch.ones(3, 5, dtype=torch.complex128)
    with pytest.raises(NotImplementedError, match="complex"):
        dense.matmul_backward(torch.ones(4, 5, dtype=torch.complex128), a, b)
    with torch.no_grad():  # without a graph to keep, the call runs
        dense.matmul_backward(torch.ones(4, 5, dtype=torch.complex128), a, b)
