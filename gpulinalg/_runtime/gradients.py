"""Gradients of torch tensors through gpulinalg's functions, and the rule that a result is never
silently detached.

A public function decorated with :func:`differentiable` checks its torch tensor arguments: when
autograd is recording and one of them requires grad, the call goes through the gradient rule
registered for its name (:func:`rule`), a :class:`torch.autograd.Function` whose forward runs the
function itself on detached tensors (the same engines, the same dispatch) and whose backward is
the formula torch.linalg uses, written with torch operations and gpulinalg's own calls (so the
backward is differentiable again: double backward works where every call in it has a rule).
A function without a rule raises :class:`NotImplementedError` naming itself instead of returning
a result cut off from the graph. Nothing of torch is imported unless torch already is.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from . import records as _records

__all__ = ["differentiable", "rule", "needs_grad", "call", "RULES", "FUNCTIONS"]

#: Gradient rules by the public function's name: ``rule(fn, *args, **kwargs)``.
RULES: dict[str, Callable[..., Any]] = {}
#: The guarded public functions by name (a rule's backward calls another through this table,
#: not by importing its module).
FUNCTIONS: dict[str, Callable[..., Any]] = {}
#: ``torch.compiler.is_compiling`` once torch is seen (a plain read under torch.compile, which
#: cannot trace a look-up in ``sys.modules``).
_COMPILING: list = [c.is_compiling for c in [getattr(sys.modules.get("torch"), "compiler", None)]
                    if c is not None]


def rule(op: str) -> Callable:
    """Register the gradient rule of the function named ``op``.

    Examples
    --------
    >>> @rule("demo.identity")
    ... def _identity_rule(fn, x):
    ...     return call(lambda t: (fn(t),), lambda ins, outs, grads: grads, x)[0]
    >>> RULES["demo.identity"] is _identity_rule
    True
    """
    def register(fn):
        RULES[op] = fn
        return fn
    return register


#: What an argument's type is to the grad check: 1 a torch tensor, 2 a tuple or list (looked
#: into), 0 neither; learnt once per type (a negative ``isinstance`` against torch's ``Tensor``
#: costs more than the lookup, and a CuPy or NumPy argument would pay it on every call).
_ROLES: dict = {}


def _role(kind, tensor):
    role = 1 if issubclass(kind, tensor) else 2 if issubclass(kind, (tuple, list)) else 0
    if len(_ROLES) < 256:
        _ROLES[kind] = role
    return role


def _any_requires_grad(values, tensor) -> bool:
    for v in values:
        kind = type(v)
        role = _ROLES.get(kind)
        if role is None:
            role = _role(kind, tensor)
        if role == 1:
            if v.requires_grad:
                return True
        elif role == 2 and _any_requires_grad(v, tensor):  # a (c, lower) pair, an aux NamedTuple
            return True
    return False


def _torch_recording():
    """torch's ``Tensor`` type while torch is imported and autograd records, else ``None``."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if not _COMPILING and hasattr(torch, "compiler"):
        _COMPILING.append(torch.compiler.is_compiling)
    return torch.Tensor if torch.is_grad_enabled() else None


def needs_grad(*values: Any) -> bool:
    """Whether autograd is recording and a torch tensor among ``values`` (looked into tuples and
    lists, as a ``(c, lower)`` pair) requires grad; ``False`` at once when torch is not
    imported.

    >>> needs_grad(1.0, (2.0, True))
    False
    """
    tensor = _torch_recording()
    return tensor is not None and _any_requires_grad(values, tensor)


def differentiable(op: str) -> Callable:
    """Decorator of a public function ``op``: torch inputs that require grad go through its
    registered rule; without one the call raises ``NotImplementedError`` (never a detached
    result). Over a :func:`~gpulinalg._runtime.dispatch.front_door` it runs the door in its
    own frame (every public call pays the frames it passes through)."""
    def wrap(fn):
        inner, failed = getattr(fn, "front_door", (fn, None))

        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            if _COMPILING and _COMPILING[0]():  # torch.compile: a graph break, run eagerly
                return _eager(guarded)(*args, **kwargs)
            tensor = _torch_recording()
            if tensor is None or not (_any_requires_grad(args, tensor) or (
                    kwargs and _any_requires_grad(kwargs.values(), tensor))):
                if failed is None:
                    return inner(*args, **kwargs)
                before = _records.local.record
                try:
                    return inner(*args, **kwargs)
                except Exception as exc:
                    return failed(args, kwargs, exc, before)
            grad_rule = RULES.get(op)
            if grad_rule is None:
                raise NotImplementedError(
                    f"{op}: gradients are not supported for this call yet, and its result would "
                    "not carry any; call it on tensors that do not require grad (x.detach(), or "
                    "under torch.no_grad()) or use torch.linalg (docs/decomp.md, 'Gradients')")
            return grad_rule(guarded, *args, **kwargs)  # its backward's calls record again
        FUNCTIONS[op] = guarded
        return guarded
    return wrap


_EAGER: dict = {}


def _eager(fn):
    """``fn`` wrapped by ``torch.compiler.disable``: torch.compile runs it as it is, outside its
    graph (the call dispatches, synchronizes and may fall back: nothing to trace)."""
    eager = _EAGER.get(fn)
    if eager is None:
        import torch
        eager = _EAGER[fn] = torch.compiler.disable(fn, recursive=True)
    return eager


_FUNCTION: list = []


def _function():
    """The one :class:`torch.autograd.Function` of every rule (made on first use)."""
    if _FUNCTION:
        return _FUNCTION[0]
    import torch

    class GpulinalgCall(torch.autograd.Function):
        @staticmethod
        def forward(ctx, spec, *inputs):
            forward, backward = spec
            like = next(x for x in inputs if isinstance(x, torch.Tensor))
            # a scalar result (a float for one matrix) becomes a 0-d tensor that carries grad
            outs = tuple(o if isinstance(o, torch.Tensor) else  # NumPy keeps a float's float64
                         torch.as_tensor(np.asarray(o), device=like.device)
                         for o in forward(*inputs))
            ctx.backward_fn, ctx.n_in = backward, len(inputs)
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(*inputs, *outs)
            return outs

        @staticmethod
        def backward(ctx, *grads):
            saved = ctx.saved_tensors
            ins, outs = saved[:ctx.n_in], saved[ctx.n_in:]
            return (None, *ctx.backward_fn(ins, outs, grads))

    _FUNCTION.append(GpulinalgCall)
    return GpulinalgCall


def call(forward: Callable, backward: Callable, *inputs: Any) -> tuple:
    """``forward(*inputs)`` (a tuple of tensors) recorded by autograd with ``backward(inputs,
    outputs, grads) -> grads of inputs`` (a ``grads`` entry is ``None`` for an output the loss
    does not use; return ``None`` for an input that takes no gradient)."""
    return _function().apply((forward, backward), *inputs)


def bound(fn: Callable, args: tuple, kwargs: dict) -> dict:
    """The arguments of a call of ``fn`` by parameter name, defaults filled in."""
    import inspect
    params = inspect.signature(fn).bind(*args, **kwargs)
    params.apply_defaults()
    return dict(params.arguments)


def as_tensor(x: Any, like: Any) -> Any:
    """``x`` as a torch tensor on ``like``'s device (a tensor is returned as it is)."""
    import torch
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(x, device=like.device)


def as_tensors(a: Any, b: Any) -> tuple:
    """``a`` and ``b`` as torch tensors on the device of the one that is a tensor."""
    a = as_tensor(a, b if hasattr(b, "device") else a)
    return a, as_tensor(b, a)


def unbroadcast(g: Any, shape: tuple) -> Any:
    """``g`` summed over the leading dimensions a broadcast added to an input of ``shape``
    (and over those it stretched from 1)."""
    if g is None:
        return None
    extra = g.dim() - len(shape)
    if extra > 0:
        g = g.sum(dim=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(dim=stretched, keepdim=True) if stretched else g
