"""``FusedMLP``'s forward and backward (:func:`forward_all`, :func:`backward_all`: the
products of :mod:`._linear_api`, the cross-layer walk), and both as torch custom ops
(``torch.library``), what ``torch.compile`` records: ``gpulinalg::fused_mlp`` and
``gpulinalg::fused_mlp_backward``, opaque to Dynamo (their fake implementations give the shapes),
the backward op registered as the forward op's derivative. Both run the same functions as the eager
``autograd.Function`` of :mod:`._mlp_torch`, so a compiled step launches the same products (the
cross-layer DRELU_BGRAD / DGELU_BGRAD fusion included).

The forward op returns ``[out, h_1, ..., h_{L-1}, aux_0, ..., aux_{L-2}, saved]``: the hidden
outputs (the next layers' inputs), the aux data of the hidden layers (cuBLASLt's layout:
column-major ``(ceil16(ceil(N / 8)), M)`` bytes for ReLU, ``(ceil8(N), M)`` for GELU) and the
last layer's GELU pre-activation (empty otherwise).
"""

from __future__ import annotations


import torch

from . import _linear_api
from ._linear_torch import activation_grad
from ._results import MatmulAux
from ._spec import aux_shape

__all__ = ["NONE", "forward_all", "backward_all"]

_forward_aux, _forward_keyed = _linear_api.forward_aux, _linear_api.forward_keyed
_backward, _act_backward = _linear_api.backward, _linear_api.act_backward

#: The ops' spelling of "no activation after the last layer" (a plain ``str`` in the schema).
NONE = "none"


def forward_all(x, params, act, last_act):
    """``(out, hidden outputs, hidden auxes, last GELU pre-activation or None, keys)`` of the
    MLP of ``params`` (``[W0, b0, W1, b1, ...]``) on 2-D ``x``: one fused launch per layer."""
    hs, auxes, keys = [], [], []
    h = x
    for i in range(0, len(params) - 2, 2):  # hidden layers: the aux is kept
        h, aux, key = _forward_aux(h, params[i], params[i + 1], act)
        hs.append(h)
        auxes.append(aux)
        keys.append(key)
    out, z, key = _forward_keyed(h, params[-2], params[-1], last_act, last_act == "gelu")
    keys.append(key)
    return out, hs, auxes, z, keys


def backward_all(grad_out, last_act, y, z, hs, params, auxes, keys, act, needs):
    """``[grad_x, grad_W0, grad_b0, ...]`` (``None`` where ``needs``, the inputs'
    ``requires_grad`` in that order, says no) from the output gradient: the last
    activation's derivative (on the output ``y`` for ReLU, the pre-activation ``z`` for
    GELU), then :func:`_walk` over the layers' inputs ``hs`` (``x`` first)."""
    dz = activation_grad(last_act, grad_out, y if last_act == "relu" else z)
    return _walk(dz, hs, params, auxes, keys, act, needs)


def _walk(dz, hs, params, auxes, keys, act, needs):
    """``(grad_x, grad_W0, grad_b0, ...)`` from the top layer's ``dz``: per layer at most one
    weight-gradient product (the top layer's with BGRADB), per layer below the top one fused
    product ``(dz_next @ W_next) * act'(z)`` with DRELU_BGRAD / DGELU_BGRAD (its bias gradient
    in the same launch), ``grad_x`` by one plain product when the input asks for it; nothing
    for a layer when neither it nor anything below it needs a gradient."""
    n = len(hs)
    has_bias = params[1] is not None
    grads: list = [None] * (2 * n + 1)
    below, acc = [], needs[0]
    for i in range(n):  # below[i]: a gradient at layer i or under it (or the input's)
        acc = acc or needs[2 * i + 1] or (has_bias and needs[2 * i + 2])
        below.append(acc)
    i, db = n - 1, None
    while below[i]:
        nx, nw = i == 0 and needs[0], needs[2 * i + 1]
        nb = has_bias and needs[2 * i + 2]
        weight = params[2 * i]
        if i == n - 1:  # the top layer: its bias gradient from BGRADB of the weight product
            if nx or nw or nb:
                gx, gw, gb = _backward(dz, hs[i], weight, has_bias, nx, nw or nb, keys[i])
                grads[2 * i + 1], grads[2 * i + 2] = (gw if nw else None), (gb if nb else None)
                grads[0] = gx if nx else None
        else:  # dz and the bias gradient came from the fused product
            grads[2 * i + 2] = db if nb else None
            if nx or nw:
                gx, gw, _ = _backward(dz, hs[i], weight, False, nx, nw, keys[i])
                grads[2 * i + 1], grads[0] = (gw if nw else None), (gx if nx else None)
        if i == 0 or not below[i - 1]:
            break
        dz, db = _act_backward(dz, weight, auxes[i - 1], act, has_bias and needs[2 * i])
        i -= 1
    return grads


def _last(last):
    return None if last == NONE else last


@torch.library.custom_op("gpulinalg::fused_mlp", mutates_args=())
def fused_mlp(x: torch.Tensor, weights: list[torch.Tensor],
              biases: list[torch.Tensor | None], activation: str, last_activation: str
              ) -> list[torch.Tensor]:
    params = [p for pair in zip(weights, biases) for p in pair]
    out, hs, auxes, z, _ = forward_all(x, params, activation, _last(last_activation))
    saved = x.new_empty(0) if z is None else z.contiguous()
    return [out.contiguous(), *hs, *[a.data for a in auxes], saved]


@fused_mlp.register_fake
def _fused_mlp_fake(x, weights, biases, activation, last_activation):
    m = x.shape[0]
    outs = [x.new_empty((m, weights[-1].shape[0]))]
    outs += [x.new_empty((m, w.shape[0])) for w in weights[:-1]]
    for w in weights[:-1]:
        pr, pc = aux_shape(activation, w.shape[0], m)
        dt = torch.uint8 if activation == "relu" else x.dtype
        outs.append(x.new_empty_strided((pr, pc), (1, pr), dtype=dt))
    outs.append(x.new_empty((m, weights[-1].shape[0]) if last_activation == "gelu" else (0,)))
    return outs


@torch.library.custom_op("gpulinalg::fused_mlp_backward", mutates_args=())
def fused_mlp_backward(grad: torch.Tensor, x: torch.Tensor, weights: list[torch.Tensor],
                       has_bias: bool, hs: list[torch.Tensor], auxes: list[torch.Tensor],
                       saved: torch.Tensor, activation: str, last_activation: str,
                       needs: list[bool]) -> list[torch.Tensor]:
    n, m = len(weights), x.shape[0]
    params = [p for w in weights for p in (w, w if has_bias else None)]  # only has_bias is read
    aux = [MatmulAux(activation, a, True, w.shape[0], m) for a, w in zip(auxes, weights)]
    grads = backward_all(grad, _last(last_activation), saved, saved, [x, *hs], params, aux,
                         [None] * n, activation, needs)
    return [x.new_empty(0) if g is None else g.contiguous() for g in grads]


@fused_mlp_backward.register_fake
def _fused_mlp_backward_fake(grad, x, weights, has_bias, hs, auxes, saved, activation,
                             last_activation, needs):
    outs = [x.new_empty(x.shape) if needs[0] else x.new_empty(0)]
    for i, w in enumerate(weights):
        outs.append(w.new_empty(w.shape) if needs[2 * i + 1] else w.new_empty(0))
        outs.append(w.new_empty((w.shape[0],)) if has_bias and needs[2 * i + 2]
                    else w.new_empty(0))
    return outs


def _setup_context(ctx, inputs, output):
    x, weights, biases, activation, last = inputs
    n = len(weights)
    needs = [x.requires_grad]
    for w, b in zip(weights, biases):
        needs += (w.requires_grad, b is not None and b.requires_grad)
    saved = output[0] if last == "relu" else output[-1]
    ctx.save_for_backward(x, saved, *weights, *output[1:-1])
    ctx.meta = (n, biases[0] is not None, activation, last, needs)


def _autograd_backward(ctx, grads):
    x, saved, *rest = ctx.saved_tensors
    n, has_bias, activation, last, needs = ctx.meta
    weights, hs, auxes = rest[:n], rest[n:2 * n - 1], rest[2 * n - 1:]
    out = torch.ops.gpulinalg.fused_mlp_backward(grads[0], x, weights, has_bias, hs, auxes,
                                                 saved, activation, last, needs)
    gws = [out[2 * i + 1] if needs[2 * i + 1] else None for i in range(n)]
    gbs = [out[2 * i + 2] if needs[2 * i + 2] else None for i in range(n)]
    return out[0] if needs[0] else None, gws, gbs, None, None


fused_mlp.register_autograd(_autograd_backward, setup_context=_setup_context)
