"""``FusedLinear``: ``nn.Linear`` + activation whose forward and backward are fused products.

A torch-only layer (``_<family>_torch``): ``nn.Module`` / ``autograd.Function`` wrappers over
:mod:`._ops_torch`, whose products are ``_linear_api``'s (the public ``matmul`` /
``matmul_backward`` road on a first call, dispatched repeats after it), never an engine.
Imported only on first use of ``gpulinalg.dense.FusedLinear`` (it needs torch).
"""

from __future__ import annotations

import math
from typing import Literal, cast

import torch
from torch import nn

from .._runtime.config import get_config, settings_in_force
from .._runtime.dispatch import front_door
from . import _linear_api, _ops_torch

__all__ = ["FusedLinear"]

_is_compiling = torch.compiler.is_compiling


class _FusedLinearFunction(torch.autograd.Function):
    """Eager autograd over :mod:`._linear_api`'s forward and backward (``torch.compile`` records
    the custom ops of :mod:`._ops_torch` instead, which share them). ``activation`` is ``None``,
    ``"relu"`` or ``"gelu"``."""

    @staticmethod
    def forward(ctx, x2, weight, bias, activation, need_saved):
        out, z, key = _forward(x2, weight, bias, activation, need_saved)
        ctx.save_for_backward(x2, weight, out if activation == "relu" else z)
        ctx.state = (activation, bias is not None, key, get_config())
        return out

    @staticmethod
    def backward(ctx, grad_out):
        # one frame from autograd to the launches: the derivative, then the products
        x2, weight, saved = ctx.saved_tensors
        act, has_bias, key, settings = ctx.state
        dz = activation_grad(act, grad_out, saved)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        need_b = has_bias and need_b
        # the GEMM of a gradient nobody asked for is not launched (a first layer's grad_x, a
        # frozen weight's grad_W). CUDA backward passes run on torch's autograd worker thread,
        # where the forward's config_context (a ContextVar) is not in force: the products run
        # under the forward's settings (autotune, backend, ...), and their memo entries serve
        # the same settings object
        if get_config() is settings:
            gx, gw, gb = _backward(dz, x2, weight, has_bias, need_x, need_w or need_b, key)
        else:
            with settings_in_force(settings):
                gx, gw, gb = _backward(dz, x2, weight, has_bias, need_x, need_w or need_b, key)
        return (gx if need_x else None, gw if need_w else None, gb if need_b else None, None,
                None)


def _raw(op):
    """``op``'s callable below ``OpOverload.__call__`` (which only forwards to it)."""
    return getattr(op, "_op", op)


_forward, _backward = _linear_api.forward_keyed, _linear_api.backward
_threshold_backward = _raw(torch.ops.aten.threshold_backward.default)
_gelu_backward = _raw(torch.ops.aten.gelu_backward.default)


def on_torch_cpu():
    """Whether a layer given CPU tensors runs torch's own ops: nothing to fuse on the CPU, so
    at torch's speed (not under ``torch.compile``, where the custom op keeps one graph, nor
    with ``backend="gpu"``, which sends host inputs to the GPU)."""
    return not _is_compiling() and get_config().backend.value != "gpu"


def torch_layer(x, weight, bias, act):
    """``act(x @ weight.T + bias)`` by torch's own ops (``nn.Linear`` and its activation; GELU
    in its tanh form, as the fused epilog): the CPU route of the layers."""
    if x.shape[-1] != weight.shape[-1]:  # the GPU route's message, not torch's "mat1 and mat2"
        raise ValueError(f"linear layer: x has K={x.shape[-1]} (shape {tuple(x.shape)}) but the "
                         f"weight has K={weight.shape[-1]} (shape {tuple(weight.shape)})")
    out = torch.nn.functional.linear(x, weight, bias)
    if act == "relu":
        return torch.relu(out)
    if act == "gelu":
        return torch.nn.functional.gelu(out, approximate="tanh")
    return out


def activation_grad(act, grad_out, saved):
    """The gradient at the pre-activation, contiguous: ``grad_out`` through ``act``'s
    derivative, given what the forward saved for it (the output for ReLU, the pre-activation
    for GELU; nothing without an activation)."""
    if act == "relu":
        return _threshold_backward(grad_out, saved, 0).contiguous()
    if act == "gelu":
        return _gelu_backward(grad_out, saved, approximate="tanh").contiguous()
    return grad_out.contiguous()


_functorch_active = torch._C._are_functorch_transforms_active
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead
#: ``autograd.Function.apply`` below its Python wrapper (which, outside functorch transforms,
#: only unwraps dead functorch wrappers: done here per tensor, without its generic pass).
_c_apply = getattr(super(torch.autograd.Function, _FusedLinearFunction), "apply", None)


def _apply(x2, weight, bias, activation, need_saved):
    if _c_apply is None or _functorch_active():
        return _FusedLinearFunction.apply(x2, weight, bias, activation, need_saved)
    return _c_apply(_unwrap_if_dead(x2), _unwrap_if_dead(weight),
                    None if bias is None else _unwrap_if_dead(bias), activation, need_saved)


def not_a_tensor(layer, x):
    """Refuse ``x``, not a tensor (as ``torch.nn.Linear`` does), recorded as the layer's call
    (:func:`gpulinalg.last_run`), not left to the previous call's record."""
    @front_door(f"dense.{layer}.forward")
    def refuse():
        raise TypeError(f"{layer} takes a torch.Tensor, got {type(x).__name__} "
                        "(torch.as_tensor converts a NumPy array)") from None
    refuse()


class FusedLinear(nn.Module):
    """A drop-in for ``nn.Linear`` followed by an activation, fused through cuBLASLt.

    Forward is ``act(x @ weight.T + bias)`` in one :func:`gpulinalg.dense.matmul` call (one
    cuBLASLt launch with the bias and activation epilog; GELU keeps its pre-activation as the
    aux); backward is one elementwise kernel for the activation's derivative and one
    :func:`gpulinalg.dense.matmul_backward` call (two launches, the bias gradient from the
    BGRADB epilog). With nothing to differentiate (``torch.no_grad``, ``torch.inference_mode``,
    a frozen layer on an input without grad) the forward is that one product, without an
    autograd node. CUDA tensors run on torch's current stream and caching allocator; CPU
    tensors on the NumPy twin. The state dict is ``nn.Linear``'s (``weight``, ``bias``);
    :meth:`from_linear` and :meth:`to_linear` convert, sharing the parameters. Works under
    ``torch.autocast`` (computes in the autocast dtype, as ``nn.Linear``) and
    ``torch.compile(fullgraph=True)`` (the fused ops are torch custom ops,
    ``gpulinalg::fused_linear`` and ``gpulinalg::fused_linear_backward``).

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
        params = self._parameters  # dict reads, not two nn.Module.__getattr__ calls
        weight: torch.Tensor
        bias: torch.Tensor | None
        if "weight" in params and "bias" in params:
            weight, bias = cast(torch.Tensor, params["weight"]), params["bias"]
        else:  # parametrized (torch.nn.utils.parametrize): the attributes
            weight, bias = self.weight, self.bias
        try:
            kind = "cuda" if x.is_cuda else x.device.type
        except AttributeError:  # as torch.nn.Linear: a tensor, not an array
            not_a_tensor("FusedLinear", x)
        if torch.is_autocast_enabled(kind):  # as nn.Linear: compute in the autocast dtype
            dt = torch.get_autocast_dtype(kind)
            x, weight = x.to(dt), weight.to(dt)
            bias = None if bias is None else bias.to(dt)
        if kind == "cpu" and on_torch_cpu():
            return torch_layer(x, weight, bias, self.activation)
        flat = x.dim() == 2  # the common case: no reshapes
        x2 = x if flat else x.reshape(-1, x.shape[-1])
        act = self.activation
        track = torch.is_grad_enabled() and (
            x2.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
        need = track and act == "gelu"
        if _is_compiling():
            out = torch.ops.gpulinalg.fused_linear(x2, weight, bias, act or _ops_torch.NONE,
                                                   need)[0]
        elif track or _functorch_active():
            out = _apply(x2, weight, bias, act, need)
        else:  # nothing to differentiate (inference, frozen layers): no autograd node
            out = _forward(x2, weight, bias, act, False)[0]
        return out if flat else out.reshape(*x.shape[:-1], self.out_features)

    @classmethod
    def from_linear(cls, linear: nn.Linear,
                    activation: Literal["relu", "gelu"] | None = None) -> FusedLinear:
        """A ``FusedLinear`` computing ``act(linear(x))`` that shares ``linear``'s parameters.

        Examples
        --------
        >>> import torch
        >>> from gpulinalg.dense import FusedLinear
        >>> linear = torch.nn.Linear(8, 4)
        >>> layer = FusedLinear.from_linear(linear, activation="relu")
        >>> layer.weight is linear.weight
        True
        >>> x = torch.randn(2, 8)
        >>> torch.allclose(layer(x), torch.relu(linear(x)), atol=1e-6)
        True
        """
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None,
                    activation=activation, device="meta")
        layer.weight = cast(nn.Parameter, linear.weight)
        if linear.bias is not None:
            layer.bias = cast(nn.Parameter, linear.bias)
        return layer

    def to_linear(self) -> nn.Linear:
        """The ``nn.Linear`` of this layer's product (sharing its parameters; the activation is
        not part of it).

        Examples
        --------
        >>> from gpulinalg.dense import FusedLinear
        >>> layer = FusedLinear(8, 4, activation="gelu")
        >>> layer.to_linear().weight is layer.weight
        True
        """
        linear = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                           device="meta")
        linear.weight = self.weight
        if self.bias is not None:
            linear.bias = self.bias
        return linear

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, activation={self.activation!r}")
