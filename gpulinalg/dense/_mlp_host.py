"""The CPU engine of ``FusedMLP``'s fused backward product (:func:`act_grad`): NumPy arrays in
and out, the same semantics as :func:`gpulinalg.dense._mlp_cuda.act_grad`."""

import numpy as np

from . import _fused_xp
from ._matmul_host import unpack_bits

__all__ = ["act_grad"]


def act_grad(g, w, aux, spec):
    """``(dz, grad_bias or None)``: ``dz = (g @ w) * act'(z)`` (``z`` from ``aux``) and, with
    ``spec.bias_form``, its column sums; half precision computes in float32 and rounds once."""
    work = np.float32 if g.dtype.name in ("float16", "bfloat16") else g.dtype
    gw = np.matmul(g.astype(work, copy=False), w.astype(work, copy=False))
    dz = _fused_xp.activation_grad(gw, aux, spec.activation, np, unpack_bits)
    grad_bias = None if spec.bias_form is None else _fused_xp.bias_grad(dz, "n", np)
    dt = g.dtype
    return dz.astype(dt, copy=False), (None if grad_bias is None
                                       else grad_bias.astype(dt, copy=False))
