"""The shared runtime: device discovery, streams and handles, budget, dispatch, arrays, errors.

It imports no other gpulinalg module, and no GPU package at import time.
"""

from .config import (Backend, Fallback, Settings, SparseGPUSolver, config, config_context,
                     get_config, set_config)
from .device import GPUInfo, gpu_available, gpus, memory_info
from .dispatch import RunRecord, last_run, note
from .errors import (FallbackWarning, GPUUnavailableError, IllConditionedWarning, LinAlgError,
                     NotPositiveDefiniteError, OutOfMemoryError, ResidualWarning,
                     SingularMatrixError)

__all__ = ["Backend", "Fallback", "Settings", "SparseGPUSolver", "config", "config_context",
           "get_config", "set_config", "GPUInfo", "gpu_available", "gpus", "memory_info",
           "RunRecord", "last_run", "note", "FallbackWarning", "GPUUnavailableError",
           "IllConditionedWarning", "LinAlgError", "NotPositiveDefiniteError", "OutOfMemoryError",
           "ResidualWarning", "SingularMatrixError"]
