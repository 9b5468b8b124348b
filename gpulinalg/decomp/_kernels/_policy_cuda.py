"""Whether a route may take one of gpulinalg's hand-written CUDA kernels: the one switch.

A kernel of :mod:`gpulinalg.decomp._kernels` (or gp's fused likelihood) is on where the user
has not turned the kernels off (``config_context(custom_kernels=False)``) and the current
device's compute capability is one the route rows were measured on (:data:`MEASURED`);
everywhere else every operation takes its cuSOLVER / cuBLAS / CuPy route. For GPU functions
(CuPy is imported only when the setting is on).
"""

from ..._runtime.config import get_config

__all__ = ["MEASURED", "enabled", "compute_capability"]

#: The compute capabilities the kernels' route rows were measured on (H100 and H200: sm_90).
MEASURED = frozenset({(9, 0)})


def compute_capability() -> tuple[int, int]:
    """``(major, minor)`` of the current CUDA device."""
    import cupy
    text = str(cupy.cuda.Device().compute_capability)  # "90": CuPy keeps it per device
    return int(text[:-1]), int(text[-1])


def enabled() -> bool:
    """Whether routes may take the hand-written kernels now (see the module docstring)."""
    return get_config().custom_kernels and compute_capability() in MEASURED
