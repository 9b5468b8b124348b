"""The CPU engine: :mod:`gpulinalg.dense._fused_xp` on NumPy arrays, with NumPy's bit packing.

Same signatures as the GPU engine (:mod:`gpulinalg.dense._matmul_cuda`); the dispatcher hands
these functions NumPy arrays.
"""

import numpy as np

from . import _epilogs_xp, _fused_xp
from ._epilogs_xp import RELU_BITORDER

__all__ = ["matmul", "matmul_backward", "pack_bits", "unpack_bits", "relu_mask",
           "preactivation"]


def pack_bits(positive, pad_rows):
    """Boolean ``(..., C, R)`` -> ``uint8`` ``(..., C, pad_rows)``, packed along the last axis."""
    rows = positive.shape[-1]
    data = np.zeros((*positive.shape[:-1], pad_rows), dtype=np.uint8)
    data[..., :-(-rows // 8)] = np.packbits(positive, axis=-1, bitorder=RELU_BITORDER)
    return data


def unpack_bits(packed, rows):
    """``uint8`` ``(..., C, P)`` -> boolean ``(..., C, rows)`` (a view of the unpacked bytes)."""
    return np.unpackbits(packed, axis=-1, count=rows, bitorder=RELU_BITORDER).view(bool)


def matmul(a, b, bias, c, spec):
    """``act(alpha * a @ b + beta * c + bias)`` on NumPy arrays (see :func:`_fused_xp.matmul`)."""
    return _fused_xp.matmul(a, b, bias, c, spec, np, pack_bits)


def matmul_backward(grad_out, upstream, a, b, aux, spec):
    """The gradients on NumPy arrays (see :func:`_fused_xp.matmul_backward`)."""
    return _fused_xp.matmul_backward(grad_out, upstream, a, b, aux, spec, np, unpack_bits)


def relu_mask(aux):
    """The boolean mask ``Z > 0``, NumPy-shaped ``(..., M, N)``, of a ReLU aux on the host."""
    return _epilogs_xp.relu_mask(aux, np, unpack_bits)


def preactivation(aux):
    """The pre-activation ``Z``, NumPy-shaped ``(..., M, N)``, of a GELU aux on the host."""
    return _epilogs_xp.preactivation(aux, np)
