"""Result types of :mod:`gpulinalg.dense`."""

from typing import NamedTuple

from ._epilogs import MatmulAux

__all__ = ["Gradients", "MatmulAux", "PlanCacheInfo"]


class Gradients(NamedTuple):
    """What :func:`gpulinalg.dense.matmul_backward` returns.

    Attributes
    ----------
    grad_a : array, shape of ``a``
    grad_b : array, shape of ``b``
    grad_bias : array or None
        Shape ``(N,)`` or ``(M, 1)`` like the forward bias; ``None`` when ``bias=False``.
    """

    grad_a: object
    grad_b: object
    grad_bias: object


class PlanCacheInfo(NamedTuple):
    """Statistics of the calling thread's plan cache (:func:`gpulinalg.dense.plan_cache_info`)."""

    hits: int
    misses: int
    evictions: int
    size: int
    maxsize: int
