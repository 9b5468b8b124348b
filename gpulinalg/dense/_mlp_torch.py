"""``FusedMLP``: ``nn.Sequential(nn.Linear, act, ..., nn.Linear)`` whose forward and backward are
one ``autograd.Function`` over fused cuBLASLt products, the backward epilogs fused across layers.

A torch-only layer (``_<family>_torch``) over :mod:`._linear_api` (the public ``matmul`` /
``matmul_backward`` road on a key's first call, dispatched repeats after it), never an engine.
Imported only on first use of ``gpulinalg.dense.FusedMLP`` (it needs torch).

Why across layers: a layer's ``dL/dz = dL/dy * act'(z)`` is, on cuBLASLt, the DRELU_BGRAD /
DGELU_BGRAD epilog of the product that makes ``dL/dy``, and that product is the *next* layer's
data gradient ``dz_next @ W_next``. A single ``FusedLinear`` receives ``dL/dy`` from autograd
already computed, so it needs an elementwise kernel; a whole MLP in one Function walks the
layers itself and hands ``(dz_next, W_next)`` to the fused product
(:func:`gpulinalg.dense._linear_api.act_backward`), as NVIDIA apex's ``MLP`` does.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Literal, cast

import torch
from torch import nn

from .._runtime.config import get_config, settings_in_force
from . import _linear_api, _mlp_ops_torch
from ._linear_torch import FusedLinear, not_a_tensor, on_torch_cpu, torch_layer
from ._mlp_ops_torch import backward_all, forward_all

__all__ = ["FusedMLP"]

_is_compiling = torch.compiler.is_compiling
_forward_keyed = _linear_api.forward_keyed


class _FusedMLPFunction(torch.autograd.Function):
    """The whole MLP: ``apply((activation, last_activation), x, W0, b0, W1, b1, ...)`` (a ``b``
    is ``None`` without bias; ``last_activation`` is ``None`` or the activation)."""

    @staticmethod
    def forward(ctx, acts, x, *params):
        act, last_act = acts
        out, hs, auxes, z, keys = forward_all(x, params, act, last_act)
        ctx.save_for_backward(x, *params, out if last_act == "relu" else None)
        ctx.state = (act, last_act, hs, auxes, z, keys, get_config())
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, *params = ctx.saved_tensors
        y = params.pop()
        act, last_act, hs, auxes, z, keys, settings = ctx.state
        args = (grad_out, last_act, y, z, [x, *hs], params, auxes, keys, act,
                ctx.needs_input_grad[1:])
        # as FusedLinear: CUDA backward passes run on torch's autograd worker thread, where the
        # forward's config_context is not in force; the products run under its settings
        if get_config() is settings:
            return (None, *backward_all(*args))
        with settings_in_force(settings):
            return (None, *backward_all(*args))


_functorch_active = torch._C._are_functorch_transforms_active
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead
#: ``autograd.Function.apply`` below its Python wrapper (see ``_linear_torch``).
_c_apply = getattr(super(torch.autograd.Function, _FusedMLPFunction), "apply", None)


def _apply(acts, x, params):
    if _c_apply is None or _functorch_active():
        return _FusedMLPFunction.apply(acts, x, *params)
    return _c_apply(acts, _unwrap_if_dead(x),
                    *[None if p is None else _unwrap_if_dead(p) for p in params])


_ACTIVATIONS = ("relu", "gelu")


def _check_sizes(sizes):
    try:
        sizes = tuple(operator.index(n) for n in sizes)
    except TypeError:
        raise TypeError(f"sizes must be a sequence of ints (in_features, hidden..., "
                        f"out_features), got {sizes!r}") from None
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"sizes must hold at least two positive widths (in_features, ..., "
                         f"out_features), got {sizes}")
    return sizes


class FusedMLP(nn.Module):
    """``nn.Sequential(nn.Linear, act, ..., nn.Linear)`` with fused cuBLASLt forward and backward.

    Layer ``i`` maps ``sizes[i]`` to ``sizes[i + 1]`` features; every layer but the last is
    followed by ``activation`` (the last one too with ``last_activation=True``). Forward is one
    cuBLASLt launch per layer (bias and activation in the epilog, the aux kept); backward walks
    the layers in reverse with, per layer, one weight-gradient product and, below the top
    layer, one data-gradient product whose DRELU_BGRAD / DGELU_BGRAD epilog applies the
    activation's derivative and gives the bias gradient (no elementwise kernel, no reduction;
    ``grad`` of the input only when it requires grad; frozen parameters launch nothing). An
    L-layer step is L + about 2L launches against torch's 2L + 4L. CUDA tensors run on
    torch's current stream and caching allocator; CPU tensors on the NumPy twin.

    The state dict is that of the ``nn.Sequential`` (``"0.weight"``, ``"0.bias"``,
    ``"2.weight"``, ...); :meth:`from_sequential` and :meth:`to_sequential` convert, sharing
    the parameters. The layers are :class:`~gpulinalg.dense.FusedLinear` modules (children
    ``"0"``, ``"2"``, ...). Under ``torch.autocast`` it computes in the autocast dtype, as
    ``nn.Linear``; ``torch.compile(fullgraph=True)`` records the whole MLP as two custom ops,
    ``gpulinalg::fused_mlp`` and ``gpulinalg::fused_mlp_backward`` (the same products).

    Parameters
    ----------
    sizes : sequence of int
        ``(in_features, hidden_1, ..., out_features)``, at least two.
    activation : {"relu", "gelu"}
        GELU is the tanh approximation (``nn.GELU(approximate="tanh")``).
    bias : bool
    last_activation : bool
        Whether the last layer is followed by the activation too.
    device, dtype : optional
        As for ``nn.Linear``.

    See Also
    --------
    gpulinalg.dense.FusedLinear : one fused layer.
    gpulinalg.dense.matmul_backward : ``grad_out=(g, w)`` fuses the same backward epilogs.

    Examples
    --------
    >>> import torch
    >>> from gpulinalg.dense import FusedMLP
    >>> mlp = FusedMLP([8, 16, 4], activation="relu")
    >>> ref = mlp.to_sequential()
    >>> x = torch.randn(3, 8)
    >>> torch.allclose(mlp(x), ref(x), atol=1e-5)
    True
    >>> sorted(mlp.state_dict()) == sorted(ref.state_dict())
    True
    """

    def __init__(self, sizes: Sequence[int], activation: Literal["relu", "gelu"] = "relu",
                 bias: bool = True, last_activation: bool = False,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None
                 ) -> None:
        super().__init__()
        sizes = _check_sizes(sizes)
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
        if not isinstance(last_activation, bool):
            raise TypeError(f"last_activation must be a bool, got {last_activation!r}")
        self.sizes, self.activation, self.last_activation = sizes, activation, last_activation
        n = len(sizes) - 1
        for i in range(n):
            act = activation if i < n - 1 or last_activation else None
            self.add_module(str(2 * i), FusedLinear(sizes[i], sizes[i + 1], bias=bias,
                                                    activation=act, device=device, dtype=dtype))

    def layers(self) -> list[FusedLinear]:
        """The layers, first to last."""
        return cast("list[FusedLinear]", list(self._modules.values()))

    def reset_parameters(self) -> None:
        """The initialisation of ``nn.Linear``, per layer."""
        for layer in self.layers():
            layer.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = cast("list[FusedLinear]", self._modules.values())
        params: list = []
        for layer in layers:
            p = layer._parameters  # dict reads, not nn.Module.__getattr__ calls
            if "weight" in p and "bias" in p:
                params += (p["weight"], p["bias"])
            else:  # parametrized: the attributes
                params += (layer.weight, layer.bias)
        try:
            kind = "cuda" if x.is_cuda else x.device.type
        except AttributeError:  # as torch.nn.Linear: a tensor, not an array
            not_a_tensor("FusedMLP", x)
        if torch.is_autocast_enabled(kind):  # as nn.Linear: compute in the autocast dtype
            dt = torch.get_autocast_dtype(kind)
            x = x.to(dt)
            params = [None if p is None else p.to(dt) for p in params]
        act = self.activation
        last = act if self.last_activation else None
        if kind == "cpu" and on_torch_cpu():  # nothing to fuse: torch's ops, at its speed
            for i in range(0, len(params), 2):
                x = torch_layer(x, params[i], params[i + 1], act if i < len(params) - 2 else last)
            return x
        flat = x.dim() == 2
        x2 = x if flat else x.reshape(-1, x.shape[-1])
        if _is_compiling():  # the whole MLP as two custom ops (Dynamo records one call)
            out = torch.ops.gpulinalg.fused_mlp(x2, params[0::2], params[1::2], act,
                                                last or _mlp_ops_torch.NONE)[0]
        elif torch.is_grad_enabled() and (x2.requires_grad or any(
                p is not None and p.requires_grad for p in params)):
            out = _apply((act, last), x2, params)
        else:  # inference: no aux kept
            out = x2
            for i in range(0, len(params), 2):
                out = _forward_keyed(out, params[i], params[i + 1],
                                     act if i < len(params) - 2 else last, False)[0]
        return out if flat else out.reshape(*x.shape[:-1], out.shape[-1])

    @classmethod
    def from_sequential(cls, seq: nn.Sequential,
                        activation: Literal["relu", "gelu"] | None = None) -> FusedMLP:
        """The ``FusedMLP`` of ``nn.Sequential(nn.Linear, act, ..., nn.Linear[, act])``,
        sharing its parameters. ``act`` is ``nn.ReLU`` or ``nn.GELU(approximate="tanh")``, the
        same for every layer; ``activation`` is needed only for a single ``nn.Linear``
        (default ``"relu"``, unused there).

        Examples
        --------
        >>> import torch
        >>> from gpulinalg.dense import FusedMLP
        >>> seq = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(approximate="tanh"),
        ...                           torch.nn.Linear(16, 4))
        >>> mlp = FusedMLP.from_sequential(seq)
        >>> mlp.activation, mlp.sizes, mlp.get_submodule("2").weight is seq[2].weight
        ('gelu', (8, 16, 4), True)
        """
        mods = list(seq)
        linears = cast("list[nn.Linear]", mods[0::2])
        acts = mods[1::2]
        if not linears or not all(type(m) is nn.Linear for m in linears):
            raise TypeError("from_sequential needs nn.Linear modules at the even positions, "
                            f"got {[type(m).__name__ for m in linears]}")
        names = {_activation_of(m) for m in acts}
        if len(names) > 1:
            raise ValueError(f"from_sequential needs one activation for every layer, got "
                             f"{[type(m).__name__ for m in acts]}")
        found = names.pop() if names else None
        if activation is not None and found is not None and activation != found:
            raise ValueError(f"activation={activation!r} but the modules hold {found!r}")
        act = found or activation or "relu"
        sizes: list[int] = [linears[0].in_features]
        for i, lin in enumerate(linears):
            if lin.in_features != sizes[-1]:
                raise ValueError(f"layer {2 * i} takes {lin.in_features} features but the layer "
                                 f"before gives {sizes[-1]}")
            sizes.append(lin.out_features)
        if len({lin.bias is None for lin in linears}) > 1:
            raise ValueError("from_sequential needs a bias in every nn.Linear or in none")
        mlp = cls(sizes, activation=act, bias=linears[0].bias is not None,
                  last_activation=len(acts) == len(linears), device="meta")
        for i, (lin, layer) in enumerate(zip(linears, mlp.layers())):
            mlp.add_module(str(2 * i), FusedLinear.from_linear(lin, activation=layer.activation))
        return mlp

    def to_sequential(self) -> nn.Sequential:
        """The ``nn.Sequential(nn.Linear, act, ..., nn.Linear[, act])`` of this MLP, sharing
        its parameters.

        Examples
        --------
        >>> from gpulinalg.dense import FusedMLP
        >>> mlp = FusedMLP([4, 8, 2], activation="gelu")
        >>> seq = mlp.to_sequential()
        >>> seq[0].weight is mlp.get_submodule("0").weight, type(seq[1]).__name__
        (True, 'GELU')
        """
        mods: list[nn.Module] = []
        for layer in self.layers():
            mods.append(layer.to_linear())
            if layer.activation is not None:
                mods.append(nn.ReLU() if layer.activation == "relu"
                            else nn.GELU(approximate="tanh"))
        return nn.Sequential(*mods)

    def extra_repr(self) -> str:
        return (f"sizes={self.sizes}, activation={self.activation!r}, "
                f"last_activation={self.last_activation}")


def _activation_of(module):
    if type(module) is nn.ReLU:
        return "relu"
    if type(module) is nn.GELU:
        if module.approximate != "tanh":
            raise ValueError("FusedMLP computes GELU's tanh approximation (cuBLASLt's): "
                             f"nn.GELU(approximate={module.approximate!r}) would differ; use "
                             "nn.GELU(approximate='tanh')")
        return "gelu"
    raise TypeError(f"from_sequential needs nn.ReLU or nn.GELU(approximate='tanh') between the "
                    f"nn.Linear modules, got {type(module).__name__}")
