"""FusedLinear against nn.Linear + activation (outputs and gradients), CPU and CUDA tensors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpulinalg.dense import FusedLinear  # noqa: E402

REFS = {None: lambda z: z, "relu": torch.relu,
        "gelu": lambda z: torch.nn.functional.gelu(z, approximate="tanh")}


def _devices():
    yield "cpu"
    yield pytest.param("cuda", marks=pytest.mark.gpu)


@pytest.mark.parametrize("device", list(_devices()))
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_linear(device, activation, bias, dtype):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    torch.manual_seed(0)
    layer = FusedLinear(24, 16, bias=bias, activation=activation, device=device, dtype=dtype)
    ref_layer = torch.nn.Linear(24, 16, bias=bias, device=device, dtype=dtype)
    ref_layer.load_state_dict(layer.state_dict())
    x = torch.randn(3, 5, 24, device=device, dtype=dtype, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    y = layer(x)
    y_ref = REFS[activation](ref_layer(x_ref))
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-12)
    if activation == "gelu" and device == "cuda" and dtype == torch.float64:
        tol = dict(rtol=1e-8, atol=1e-9)  # cuBLASLt evaluates GELU's tanh to ~1e-10
    assert y.shape == y_ref.shape and y.device == y_ref.device
    torch.testing.assert_close(y, y_ref, **tol)
    w = torch.randn_like(y)
    (y * w).sum().backward()
    (y_ref * w).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, **tol)
    torch.testing.assert_close(layer.weight.grad, ref_layer.weight.grad, **tol)
    if bias:
        torch.testing.assert_close(layer.bias.grad, ref_layer.bias.grad, **tol)


def test_gradcheck():
    torch.manual_seed(1)
    layer = FusedLinear(5, 3, activation="gelu", dtype=torch.float64)
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))


def test_no_grad_skips_aux():
    layer = FusedLinear(4, 2, activation="relu")
    with torch.no_grad():
        y = layer(torch.randn(3, 4))
    assert y.shape == (3, 2) and not y.requires_grad


@pytest.mark.parametrize("device", list(_devices()))
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("case", ["no_grad", "inference_mode", "frozen"])
def test_nothing_to_differentiate_makes_no_autograd_node(monkeypatch, device, activation, case):
    """Inference (``no_grad``, ``inference_mode``) and a frozen layer on an input without grad
    run the product without an ``autograd.Function``: same values, no graph."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    from gpulinalg.dense import _linear_torch
    torch.manual_seed(3)
    layer = FusedLinear(24, 16, activation=activation, device=device)
    x = torch.randn(2, 7, 24, device=device)
    ref = REFS[activation](torch.nn.functional.linear(x, layer.weight, layer.bias)).detach()
    applied, real = [], _linear_torch._apply
    monkeypatch.setattr(_linear_torch, "_apply", lambda *a: applied.append(a) or real(*a))
    if case == "frozen":
        layer.requires_grad_(False)
        y = layer(x)
    else:
        with getattr(torch, case)():
            y = layer(x)
    assert applied == [] and y.grad_fn is None and not y.requires_grad
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-5)
    layer.requires_grad_(True)  # and a layer that needs its gradients does make one
    # (on the CPU torch's own ops, whose nodes are torch's: nothing fused to apply)
    assert layer(x).grad_fn is not None and len(applied) == (0 if device == "cpu" else 1)


def test_repr_and_bad_activation():
    assert "activation='relu'" in repr(FusedLinear(4, 2, activation="relu"))
    with pytest.raises(ValueError, match="tanh"):
        FusedLinear(4, 2, activation="tanh")


def test_mlp_trains():
    torch.manual_seed(2)
    model = torch.nn.Sequential(FusedLinear(8, 16, activation="relu"), FusedLinear(16, 1))
    x = torch.randn(64, 8)
    y = x[:, :1] * 2 - x[:, 1:2]
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    first = None
    for _ in range(50):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.5 * first
    assert np.isfinite(loss.item())


@pytest.mark.parametrize("device", list(_devices()))
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_bfloat16_layer(device, activation):
    """bfloat16 tensors, also on the CPU (NumPy has no bfloat16: the bits travel as ml_dtypes'):
    outputs and gradients as nn.Linear's computed in float32 and rounded to bfloat16."""
    pytest.importorskip("ml_dtypes")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    torch.manual_seed(1)
    layer = FusedLinear(32, 8, activation=activation, device=device, dtype=torch.bfloat16)
    ref_layer = torch.nn.Linear(32, 8, device=device, dtype=torch.float32)
    ref_layer.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    x = torch.randn(6, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
    x_ref = x.detach().float().requires_grad_(True)
    y = layer(x)
    y_ref = REFS[activation](ref_layer(x_ref))
    assert y.dtype == torch.bfloat16 and y.device == x.device
    tol = dict(rtol=2e-2, atol=2e-2)  # bfloat16: 8 bits of mantissa
    torch.testing.assert_close(y.float(), y_ref, **tol)
    w = torch.randn(y.shape, device=device)
    (y.float() * w).sum().backward()
    (y_ref * w).sum().backward()
    torch.testing.assert_close(x.grad.float(), x_ref.grad, rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(layer.weight.grad.float(), ref_layer.weight.grad,
                               rtol=5e-2, atol=1e-1)
    assert layer.weight.grad.dtype == torch.bfloat16
