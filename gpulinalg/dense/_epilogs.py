"""What both backends agree on: activations, the tanh-GELU formula, epilog names, aux layout.

The auxiliary output of a fused forward pass has one layout on both backends, cuBLASLt's, so an
aux made on the GPU can drive a backward pass on the CPU and the other way round:

* ReLU: a bit-mask, ``uint8`` of shape ``(..., ceil16(ceil(R / 8)), C)``, column-major in its last
  two axes; bit ``r % 8`` (least significant first) of byte ``(r // 8, col)`` is set where the
  pre-activation ``Z[r, col] > 0``.
* GELU: the pre-activation itself, result dtype, shape ``(..., ceil8(R), C)``, column-major.

``R x C`` is the product as planned for cuBLASLt: the transpose ``(N x M)`` of the NumPy-shaped
result when ``MatmulAux.transposed`` is true (bias of shape ``(N,)`` or none), else ``M x N``.
"""

import math
from typing import NamedTuple

import numpy as np

__all__ = ["MatmulAux", "ACTIVATIONS", "gelu", "gelu_grad", "forward_epilog", "pack_aux",
           "preactivation", "relu_mask", "aux_shape"]

ACTIVATIONS = (None, "relu", "gelu")
#: Bit order of cuBLASLt's ReLU mask bytes: element ``r`` is bit ``r % 8`` of byte ``r // 8``.
RELU_BITORDER = "little"
GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715


class MatmulAux(NamedTuple):
    """What :func:`gpulinalg.dense.matmul_backward` needs from a fused forward pass.

    Attributes
    ----------
    activation : {"relu", "gelu"}
    data : array
        The ReLU bit-mask or the GELU pre-activation, in cuBLASLt's layout (see module notes).
    transposed : bool
        True when ``data`` describes the transposed product ``(N x M)``.
    rows, cols : int
        ``R`` and ``C``: the planned product's shape (``N, M`` when transposed, else ``M, N``).
    """

    activation: str
    data: object
    transposed: bool
    rows: int
    cols: int


def gelu(z, xp=np):
    """GELU, tanh approximation (cuBLASLt's).

    ``0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))``
    """
    return 0.5 * z * (1.0 + xp.tanh(GELU_C * (z + GELU_A * z * z * z)))


def gelu_grad(z, xp=np):
    """Derivative of :func:`gelu` with respect to ``z``."""
    t = xp.tanh(GELU_C * (z + GELU_A * z * z * z))
    return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * GELU_A * z * z)


#: (activation, bias?, aux?) -> nvmath MatmulEpilog member name (None: plain product).
_FORWARD = {
    (None, False): None, (None, True): "BIAS",
    ("relu", False): "RELU", ("relu", True): "RELU_BIAS",
    ("gelu", False): "GELU", ("gelu", True): "GELU_BIAS",
}


def forward_epilog(activation, has_bias, aux):
    """The cuBLASLt epilog name of a forward pass (``None`` for a plain product)."""
    name = _FORWARD[activation, bool(has_bias)]
    if aux and activation is not None:
        name = name.replace(activation.upper(), activation.upper() + "_AUX")
    return name


def _ceil(n, base):
    return -(-n // base) * base


def aux_shape(activation, rows, cols):
    """Shape (last two axes) of the aux buffer of an ``rows x cols`` planned product."""
    if activation == "relu":
        return _ceil(-(-rows // 8), 16), cols
    return _ceil(rows, 8), cols


def pack_aux(activation, z, transposed, xp=np):
    """Build the aux of pre-activation ``z`` (NumPy-shaped ``(..., M, N)``) in cuBLASLt layout."""
    zp_t = z if transposed else xp.swapaxes(z, -1, -2)  # (..., C, R): planned product, transposed
    cols, rows = zp_t.shape[-2:]
    pad_rows, _ = aux_shape(activation, rows, cols)
    batch = zp_t.shape[:-2]
    if activation == "relu" and xp is np:
        data = np.zeros((*batch, cols, pad_rows), dtype=np.uint8)
        data[..., :-(-rows // 8)] = np.packbits(zp_t > 0, axis=-1, bitorder=RELU_BITORDER)
    elif activation == "relu":  # CuPy's packbits has no axis: pack a padded, flattened copy
        bits = xp.zeros((*batch, cols, pad_rows * 8), dtype=np.uint8)
        bits[..., :rows] = zp_t > 0
        packed = xp.packbits(bits.reshape(-1), bitorder=RELU_BITORDER)
        data = packed.reshape(*batch, cols, pad_rows)
    else:
        data = xp.zeros((*batch, cols, pad_rows), dtype=z.dtype)
        data[..., :rows] = zp_t
    return MatmulAux(activation, xp.swapaxes(data, -1, -2), bool(transposed), rows, cols)


def _planned_t(aux, xp):
    """The aux data as ``(..., C, R_padded)`` C-ordered (a view when already laid out so)."""
    return xp.swapaxes(aux.data, -1, -2)


def _to_numpy_shape(view, transposed, xp):
    return view if transposed else xp.swapaxes(view, -1, -2)


def relu_mask(aux, xp=np):
    """The boolean mask ``Z > 0`` in the NumPy shape ``(..., M, N)`` from a ReLU aux."""
    t = _planned_t(aux, xp)
    if xp is np:
        bits = np.unpackbits(t, axis=-1, count=aux.rows, bitorder=RELU_BITORDER).view(bool)
        return _to_numpy_shape(bits, aux.transposed, xp)
    t = xp.ascontiguousarray(t)
    batch, cols = t.shape[:-2], t.shape[-2]
    bits = xp.unpackbits(t.reshape(-1), bitorder=RELU_BITORDER)
    bits = bits.reshape(*batch, cols, t.shape[-1] * 8)
    return _to_numpy_shape(bits[..., :aux.rows].astype(bool), aux.transposed, xp)


def preactivation(aux, xp=np):
    """The pre-activation ``Z`` in the NumPy shape ``(..., M, N)`` from a GELU aux (a view)."""
    return _to_numpy_shape(_planned_t(aux, xp)[..., :aux.rows], aux.transposed, xp)
