"""Fused matrix multiply (bias, ReLU, GELU, their backward passes) on cuBLASLt; a NumPy twin.

``FusedLinear`` (a ``torch.nn.Module``) loads on first use and needs torch.
"""

from ._epilogs import MatmulAux
from ._matmul import matmul, matmul_backward
from ._plans import clear_plan_cache, plan_cache_info
from ._results import Gradients, PlanCacheInfo

__all__ = ["matmul", "matmul_backward", "MatmulAux", "Gradients", "PlanCacheInfo",
           "clear_plan_cache", "plan_cache_info", "FusedLinear"]


def __getattr__(name):
    if name == "FusedLinear":
        try:
            from ._torch import FusedLinear
        except ImportError as exc:
            raise ImportError(f"gpulinalg.dense.FusedLinear needs torch ({exc})") from exc
        globals()["FusedLinear"] = FusedLinear
        return FusedLinear
    raise AttributeError(f"module 'gpulinalg.dense' has no attribute {name!r}")
