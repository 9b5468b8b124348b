"""Fused matrix multiply (bias, ReLU, GELU, their backward passes) on cuBLASLt; a NumPy twin.

``FusedLinear`` and ``FusedMLP`` (``torch.nn.Module`` s) load on first use and need torch.

Files are named for where their code runs: ``_matmul_api`` (the public functions: validation
and one dispatch), ``_matmul_cuda`` / ``_plans_cuda`` / ``_nvmath_cuda`` (the GPU engine:
cuBLASLt through nvmath plans), ``_matmul_host`` (the CPU engine), ``_fused_xp`` /
``_epilogs_xp`` (algorithms written once for NumPy or CuPy), ``_linear_torch`` (the torch layer
over the public functions); ``_spec``, ``_calls`` and ``_results`` hold no array computation.
"""

from ._matmul_api import matmul, matmul_backward
from ._plans_cuda import clear_plan_cache, plan_cache_info
from ._results import Gradients, MatmulAux, PlanCacheInfo

__all__ = ["matmul", "matmul_backward", "MatmulAux", "Gradients", "PlanCacheInfo",
           "clear_plan_cache", "plan_cache_info", "FusedLinear", "FusedMLP"]


def __getattr__(name):
    if name == "FusedLinear":
        try:
            from ._linear_torch import FusedLinear
        except ImportError as exc:
            raise ImportError(f"gpulinalg.dense.FusedLinear needs torch ({exc})") from exc
        globals()["FusedLinear"] = FusedLinear
        return FusedLinear
    if name == "FusedMLP":
        try:
            from ._mlp_torch import FusedMLP
        except ImportError as exc:
            raise ImportError(f"gpulinalg.dense.FusedMLP needs torch ({exc})") from exc
        globals()["FusedMLP"] = FusedMLP
        return FusedMLP
    raise AttributeError(f"module 'gpulinalg.dense' has no attribute {name!r}")
