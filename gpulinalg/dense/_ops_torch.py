"""The fused linear layer's forward and backward as torch custom ops (``torch.library``).

``gpulinalg::fused_linear`` and ``gpulinalg::fused_linear_backward`` are opaque to
``torch.compile``: Dynamo records one call of each (their fake implementations give the
shapes), so ``torch.compile(model, fullgraph=True)`` over a model holding
:class:`~gpulinalg.dense.FusedLinear` compiles without graph breaks. ``register_autograd`` makes
the backward op the forward op's derivative. Eager calls skip the custom-op machinery
(``FusedLinear`` uses an ``autograd.Function`` over the same :func:`forward` and
:func:`backward`).

Both call :mod:`gpulinalg.dense._linear_api` (the public :func:`~gpulinalg.dense.matmul` /
:func:`~gpulinalg.dense.matmul_backward` road on a key's first call; CUDA tensors: cuBLASLt on
torch's stream and caching allocator, repeats launched at once; CPU tensors: the NumPy
engine). Per training step on CUDA (``FusedLinear`` with bias):

* forward: one cuBLASLt launch, ``RELU_BIAS`` (the output is kept: ReLU's derivative is
  ``out > 0``) or ``GELU_AUX_BIAS`` (the pre-activation is kept as the aux);
* backward: one elementwise kernel for ``dL/dz`` (``threshold_backward`` on the output, or
  ``gelu_backward`` on the aux), then two launches: ``grad_x = dz @ W`` and
  ``grad_W = dz.T @ x`` whose ``BGRADB`` epilog also gives ``grad_bias`` (no reduction kernel).
"""

from __future__ import annotations


import torch

from . import _linear_api

__all__ = ["forward", "backward", "NONE"]

#: The activation name the ops take for "no activation" (their schema has a plain ``str``).
NONE = "none"


def forward(x, weight, bias, activation, need_saved):
    """``(act(x @ weight.T + bias), saved)`` for 2-D ``x``; ``saved`` is the GELU pre-activation
    ``(M, N)`` when ``need_saved`` (else ``None``)."""
    return _linear_api.forward(x, weight, bias, None if activation == NONE else activation,
                               need_saved)


def backward(grad, x, weight, saved, activation, has_bias):
    """``(grad_x, grad_weight, grad_bias or None)``; ``saved`` is the forward output (ReLU) or
    the pre-activation (GELU)."""
    if activation == "relu":
        dz = _threshold_backward(grad, saved, 0)
    elif activation == "gelu":
        dz = _gelu_backward(grad, saved, approximate="tanh")
    else:
        dz = grad
    return _linear_api.backward(dz, x, weight, has_bias)


_threshold_backward = getattr(torch.ops.aten.threshold_backward.default, "_op",
                              torch.ops.aten.threshold_backward.default)
_gelu_backward = getattr(torch.ops.aten.gelu_backward.default, "_op",
                         torch.ops.aten.gelu_backward.default)


@torch.library.custom_op("gpulinalg::fused_linear", mutates_args=())
def fused_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 activation: str, need_saved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    out, z = forward(x, weight, bias, activation, need_saved)  # .contiguous(): no-ops but for
    return out.contiguous(), (x.new_empty(0) if z is None else z.contiguous())  # odd layouts


@fused_linear.register_fake
def _fused_linear_fake(x, weight, bias, activation, need_saved):
    out = x.new_empty((x.shape[0], weight.shape[0]))
    saved = x.new_empty(out.shape) if activation == "gelu" and need_saved else x.new_empty(0)
    return out, saved


@torch.library.custom_op("gpulinalg::fused_linear_backward", mutates_args=())
def fused_linear_backward(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                          saved: torch.Tensor, activation: str, has_bias: bool
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gx, gw, gb = backward(grad, x, weight, saved, activation, has_bias)
    return gx.contiguous(), gw.contiguous(), grad.new_empty(0) if gb is None else gb.contiguous()


@fused_linear_backward.register_fake
def _fused_linear_backward_fake(grad, x, weight, saved, activation, has_bias):
    gb = grad.new_empty((weight.shape[0],) if has_bias else (0,))
    return x.new_empty(x.shape), weight.new_empty(weight.shape), gb


def _setup_context(ctx, inputs, output):
    x, weight, bias, activation, _ = inputs
    out, z = output
    ctx.save_for_backward(x, weight, out if activation == "relu" else z)
    ctx.activation, ctx.has_bias = activation, bias is not None


def _backward(ctx, grad_out, grad_saved):
    x, weight, saved = ctx.saved_tensors
    gx, gw, gb = torch.ops.gpulinalg.fused_linear_backward(
        grad_out.contiguous(), x, weight, saved, ctx.activation, ctx.has_bias)
    return gx, gw, gb if ctx.has_bias else None, None, None


fused_linear.register_autograd(_backward, setup_context=_setup_context)
