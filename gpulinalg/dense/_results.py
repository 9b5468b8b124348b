"""Result types of :mod:`gpulinalg.dense`."""

from typing import Any, NamedTuple

__all__ = ["Gradients", "MatmulAux", "PlanCacheInfo"]


class MatmulAux(NamedTuple):
    """What :func:`gpulinalg.dense.matmul_backward` needs from a fused forward pass.

    Attributes
    ----------
    activation : {"relu", "gelu"}
    data : array
        The ReLU bit-mask or the GELU pre-activation, in cuBLASLt's layout (see Notes).
    transposed : bool
        True when ``data`` describes the transposed product ``(N x M)``.
    rows, cols : int
        ``R`` and ``C``: the planned product's shape (``N, M`` when transposed, else ``M, N``).

    See Also
    --------
    gpulinalg.dense.matmul : makes it with ``return_aux=True``.
    gpulinalg.dense.matmul_backward : consumes it.

    Notes
    -----
    The layout is cuBLASLt's on both backends, so an aux made on the GPU can drive a backward
    pass on the CPU and the other way round:

    * ReLU: a bit-mask, ``uint8`` of shape ``(..., ceil16(ceil(R / 8)), C)``, column-major in
      its last two axes; bit ``r % 8`` (least significant first) of byte ``(r // 8, col)`` is
      set where the pre-activation ``Z[r, col] > 0``.
    * GELU: the pre-activation itself, result dtype, shape ``(..., ceil8(R), C)``,
      column-major.
    """

    activation: str
    data: Any
    transposed: bool
    rows: int
    cols: int


class Gradients(NamedTuple):
    """What :func:`gpulinalg.dense.matmul_backward` returns.

    Attributes
    ----------
    grad_a : array, shape of ``a``
    grad_b : array, shape of ``b``
    grad_bias : array or None
        Shape ``(N,)`` or ``(M, 1)`` like the forward bias; ``None`` when ``bias=False``.
    """

    grad_a: Any
    grad_b: Any
    grad_bias: Any


class PlanCacheInfo(NamedTuple):
    """Statistics of the calling thread's plan cache (:func:`gpulinalg.dense.plan_cache_info`).

    See Also
    --------
    gpulinalg.dense.clear_plan_cache
    """

    hits: int
    misses: int
    evictions: int
    size: int
    maxsize: int
