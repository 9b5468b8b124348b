"""gpulinalg: SciPy-shaped linear algebra on NVIDIA GPUs, with a SciPy fallback.

Submodules ``dense``, ``decomp``, ``sparse``, ``gp`` and ``testing`` (helpers for testing code
against gpulinalg's fallbacks) load on first use; importing ``gpulinalg`` imports neither CuPy,
nvmath-python nor torch.
"""

import importlib
import logging

from ._runtime import (Backend, Fallback, FallbackWarning, GPUInfo, GPUUnavailableError,
                       IllConditionedWarning, LinAlgError, NotPositiveDefiniteError,
                       OutOfMemoryError, ResidualWarning, RunRecord, Settings, SingularMatrixError,
                       SparseGPUSolver, config, config_context, get_config, gpu_available, gpus,
                       last_run, memory_info, set_config)

__version__ = "0.1.0"

logging.getLogger("gpulinalg").addHandler(logging.NullHandler())

_SUBMODULES = ("dense", "decomp", "sparse", "gp", "distributed", "testing")

__all__ = [
    "__version__", "config", "config_context", "set_config", "get_config", "last_run",
    "gpu_available", "gpus", "memory_info",
    "Backend", "Fallback", "SparseGPUSolver", "Settings", "RunRecord", "GPUInfo",
    "LinAlgError", "NotPositiveDefiniteError", "SingularMatrixError", "GPUUnavailableError",
    "OutOfMemoryError", "FallbackWarning", "ResidualWarning", "IllConditionedWarning",
    *_SUBMODULES,
]


def __getattr__(name):
    if name in _SUBMODULES:
        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'gpulinalg' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES))
