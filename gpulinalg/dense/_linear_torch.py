"""``FusedLinear``: ``nn.Linear`` + activation whose forward and backward are fused products.

A torch-only layer (``_<family>_torch``): ``nn.Module`` / ``autograd.Function`` wrappers that call
the public functions of ``_matmul_api`` (which dispatch as for any caller), never an engine.
Imported only on first use of ``gpulinalg.dense.FusedLinear`` (it needs torch).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from ._matmul_api import matmul, matmul_backward

__all__ = ["FusedLinear"]


class _FusedLinearFunction(torch.autograd.Function):
    """``act(x @ weight.T + bias)`` forward with the aux kept for the fused backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, activation, grad_wanted):
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])
        need_aux = activation is not None and grad_wanted
        result = matmul(x2, weight.t(), bias=bias, activation=activation, return_aux=need_aux)
        out, aux = result if need_aux else (result, None)
        ctx.save_for_backward(x2, weight)
        ctx.aux, ctx.activation, ctx.has_bias, ctx.lead = aux, activation, bias is not None, lead
        return out.reshape(*lead, weight.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        x2, weight = ctx.saved_tensors
        g = grad_out.reshape(-1, weight.shape[0])
        grads = matmul_backward(g, x2, weight.t(), aux=ctx.aux, activation=ctx.activation,
                                bias=ctx.has_bias)
        grad_x = grads.grad_a.reshape(*ctx.lead, x2.shape[-1]) if ctx.needs_input_grad[0] else None
        grad_w = grads.grad_b.t() if ctx.needs_input_grad[1] else None
        grad_bias = grads.grad_bias if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_bias, None, None


class FusedLinear(nn.Module):
    """A drop-in for ``nn.Linear`` followed by an activation, fused through cuBLASLt.

    Forward is ``act(x @ weight.T + bias)`` in one :func:`gpulinalg.dense.matmul` call (the ReLU
    bit-mask or the GELU pre-activation is kept as the aux); backward is one
    :func:`gpulinalg.dense.matmul_backward` call. CPU tensors run on the NumPy twin.

    Parameters
    ----------
    in_features, out_features : int
    bias : bool
    activation : {None, "relu", "gelu"}
        GELU is the tanh approximation (``nn.GELU(approximate="tanh")``).
    device, dtype : optional
        As for ``nn.Linear``.

    See Also
    --------
    gpulinalg.dense.matmul : the fused forward product.
    gpulinalg.dense.matmul_backward : the fused backward products.

    Examples
    --------
    >>> import torch
    >>> from gpulinalg.dense import FusedLinear
    >>> layer = FusedLinear(8, 4, activation="relu")
    >>> x = torch.randn(3, 8)
    >>> ref = torch.relu(torch.nn.functional.linear(x, layer.weight, layer.bias))
    >>> torch.allclose(layer(x), ref, atol=1e-6)
    True
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 activation: Literal["relu", "gelu"] | None = None,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None
                 ) -> None:
        super().__init__()
        if activation not in (None, "relu", "gelu"):
            raise ValueError(f"activation must be None, 'relu' or 'gelu', got {activation!r}")
        self.in_features, self.out_features, self.activation = in_features, out_features, activation
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device,
                                                dtype=dtype))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The initialisation of ``nn.Linear``."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grad_wanted = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, self.weight, self.bias))
        return _FusedLinearFunction.apply(x, self.weight, self.bias, self.activation, grad_wanted)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, activation={self.activation!r}")
