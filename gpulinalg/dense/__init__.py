"""Fused matrix multiply (bias, ReLU, GELU, their backward passes) on cuBLASLt; a NumPy twin.

``FusedLinear`` and ``FusedMLP`` (torch modules) load on first use and need torch.

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


#: The torch layers, imported on first use (they need torch).
_TORCH_LAYERS = {"FusedLinear": "._linear_torch", "FusedMLP": "._mlp_torch"}


def __getattr__(name):
    module = _TORCH_LAYERS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpulinalg.dense' has no attribute {name!r}")
    import importlib
    try:
        layer = getattr(importlib.import_module(module, __name__), name)
    except ImportError as exc:
        raise ImportError(f"gpulinalg.dense.{name} needs torch ({exc})") from exc
    globals()[name] = layer
    return layer
