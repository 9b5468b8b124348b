"""Activations and the aux layout, written once for any array module (``xp``: NumPy or CuPy).

The auxiliary output of a fused forward pass has one layout on both backends, cuBLASLt's (see
:class:`~gpulinalg.dense.MatmulAux`), so an aux made on the GPU can drive a backward pass on
the CPU and the other way round. ``R x C`` is the product as planned for cuBLASLt: the
transpose ``(N x M)`` of the NumPy-shaped result when ``MatmulAux.transposed`` is true (bias of
shape ``(N,)`` or none), else ``M x N``.

Packing the ReLU mask into bits is the one step whose best form differs per array module
(NumPy's ``packbits`` takes an axis, CuPy's does not): the engines pass theirs in
(``pack_bits`` / ``unpack_bits`` of ``_matmul_host`` and ``_matmul_cuda``).
"""

import math

from ._results import MatmulAux
from ._spec import aux_shape

__all__ = ["gelu", "gelu_grad", "pack_aux", "preactivation", "relu_mask", "RELU_BITORDER"]

#: Bit order of cuBLASLt's ReLU mask bytes: element ``r`` is bit ``r % 8`` of byte ``r // 8``.
RELU_BITORDER = "little"
GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715


def gelu(z, xp):
    """GELU, tanh approximation (cuBLASLt's).

    ``0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))``
    """
    return 0.5 * z * (1.0 + xp.tanh(GELU_C * (z + GELU_A * z * z * z)))


def gelu_grad(z, xp):
    """Derivative of :func:`gelu` with respect to ``z``."""
    t = xp.tanh(GELU_C * (z + GELU_A * z * z * z))
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * z * z)


def pack_aux(activation, z, transposed, xp, pack_bits):
    """Build the aux of pre-activation ``z`` (NumPy-shaped ``(..., M, N)``) in cuBLASLt layout.

    ``pack_bits(positive, pad_rows)`` packs a boolean ``(..., C, R)`` array along its last axis
    into ``uint8`` ``(..., C, pad_rows)`` (bit order :data:`RELU_BITORDER`, zero padded).
    """
    zp_t = z if transposed else xp.swapaxes(z, -1, -2)  # (..., C, R): planned product, transposed
    cols, rows = zp_t.shape[-2:]
    pad_rows, _ = aux_shape(activation, rows, cols)
    if activation == "relu":
        data = pack_bits(zp_t > 0, pad_rows)
    else:
        data = xp.zeros((*zp_t.shape[:-2], cols, pad_rows), dtype=z.dtype)
        data[..., :rows] = zp_t
    return MatmulAux(activation, xp.swapaxes(data, -1, -2), bool(transposed), rows, cols)


def _planned_t(aux, xp):
    """The aux data as ``(..., C, R_padded)`` C-ordered (a view when already laid out so)."""
    return xp.swapaxes(aux.data, -1, -2)


def _to_numpy_shape(view, transposed, xp):
    return view if transposed else xp.swapaxes(view, -1, -2)


def relu_mask(aux, xp, unpack_bits):
    """The boolean mask ``Z > 0`` in the NumPy shape ``(..., M, N)`` from a ReLU aux.

    ``unpack_bits(packed, rows)`` turns ``uint8`` ``(..., C, P)`` into boolean ``(..., C, rows)``.
    """
    bits = unpack_bits(_planned_t(aux, xp), aux.rows)
    return _to_numpy_shape(bits, aux.transposed, xp)


def preactivation(aux, xp):
    """The pre-activation ``Z`` in the NumPy shape ``(..., M, N)`` from a GELU aux (a view)."""
    return _to_numpy_shape(_planned_t(aux, xp)[..., :aux.rows], aux.transposed, xp)
