"""The fused products written once for any array module (``xp``: NumPy or CuPy).

The CPU engine runs them on NumPy arrays; the GPU engine on CuPy arrays for the few cases
cuBLASLt cannot fuse (``K == 0``, complex with a bias) and for the elementwise steps of its
backward pass. Each engine passes its ``xp`` and, where the ReLU mask is (un)packed, its own
bit (un)packing (see :mod:`gpulinalg.dense._epilogs_xp`). Half-precision inputs are computed in
float32 and rounded once at the end, as cuBLASLt does.
"""

import numpy as np

from ._epilogs_xp import gelu, gelu_grad, pack_aux, preactivation, relu_mask
from ._results import Gradients

__all__ = ["matmul", "matmul_backward", "activation_grad", "unbroadcast", "bias_grad"]

_HALF = {"float16", "bfloat16"}


def _work(x):
    """``x`` in the dtype the arithmetic runs in (float32 for half precision)."""
    return x.astype(np.float32) if x.dtype.name in _HALF else x


def preactivation_of(a, b, bias, c, spec, xp):
    """``alpha * a @ b + beta * c + bias`` in the working dtype, shape ``(..., M, N)``."""
    z = xp.matmul(_work(a), _work(b))
    if spec.alpha != 1.0:
        z *= spec.alpha
    if c is not None and spec.beta != 0.0:  # beta == 0 ignores c, NaN or not, like cuBLAS
        z += spec.beta * _work(c)
    if bias is not None:
        z += _work(bias)
    return z


def _activate(z, activation, xp, inplace=False):
    if activation == "relu":
        return xp.maximum(z, 0, out=z if inplace else None)
    if activation == "gelu":
        return gelu(z, xp)
    return z


def matmul(a, b, bias, c, spec, xp, pack_bits):
    """``act(alpha * a @ b + beta * c + bias)``; ``(out, aux)`` when ``spec.return_aux``."""
    z = preactivation_of(a, b, bias, c, spec, xp)
    out = _activate(z, spec.activation, xp, inplace=not spec.return_aux).astype(a.dtype, copy=False)
    if not spec.return_aux:
        return out
    if spec.activation is None:
        return out, None
    return out, pack_aux(spec.activation, z.astype(a.dtype, copy=False), spec.transposed, xp,
                         pack_bits)


def activation_grad(g, aux, activation, xp, unpack_bits):
    """``dL/dZ`` from ``dL/dOut`` (``g``) and the forward aux."""
    if activation is None:
        return g
    if activation == "relu":
        return g * relu_mask(aux, xp, unpack_bits)
    return g * gelu_grad(_work(preactivation(aux, xp)), xp)


def unbroadcast(g, shape, xp):
    """Sum ``g`` over the axes along which an operand of ``shape`` was broadcast."""
    if tuple(g.shape) == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def bias_grad(dz, form, xp):
    """Gradient of a ``(N,)`` (``form="n"``) or ``(M, 1)`` (``"m1"``) bias from ``dL/dZ``."""
    if form == "n":
        return dz.reshape(-1, dz.shape[-1]).sum(axis=0)
    lead = tuple(range(dz.ndim - 2))
    total = dz.sum(axis=lead) if lead else dz
    return total.sum(axis=-1, keepdims=True)


def matmul_backward(grad_out, upstream, a, b, aux, spec, xp, unpack_bits):
    """``Gradients(grad_a, grad_b, grad_bias)`` of :func:`matmul`'s forward pass."""
    g = _work(grad_out) if upstream is None else xp.matmul(_work(upstream[0]), _work(upstream[1]))
    dz = activation_grad(g, aux, spec.activation, xp, unpack_bits)
    grad_a = unbroadcast(xp.matmul(dz, xp.swapaxes(_work(b), -1, -2)), a.shape, xp)
    grad_b = unbroadcast(xp.matmul(xp.swapaxes(_work(a), -1, -2), dz), b.shape, xp)
    grad_bias = None if spec.bias_form is None else bias_grad(dz, spec.bias_form, xp)
    dt = a.dtype
    return Gradients(grad_a.astype(dt, copy=False), grad_b.astype(dt, copy=False),
                     None if grad_bias is None else grad_bias.astype(dt, copy=False))
