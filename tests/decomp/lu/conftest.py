"""Fixtures of the LU family's tests: ``backend`` adds ``"emulated"`` to the root's ``cpu`` and
``gpu``: the GPU engine on the emulated cuSOLVER/cuBLAS behind a pretend device."""

import contextlib

import numpy as np
import pytest

import gpulinalg
from gpulinalg import testing
from gpulinalg._runtime import device as _device

from tests.support.cusolver_emulator import dev, emulated_gpu


class EmulatedDevice:
    """A device provider whose GPU functions receive emulated CuPy arrays."""

    info = _device.GPUInfo(0, "Emulated GPU", (9, 0), 32 << 30)
    memory = (16 << 30, 32 << 30)

    def before_run(self, op):
        pass

    def to_device(self, x):
        return dev(x) if isinstance(x, np.ndarray) else x

    def stream(self):
        return contextlib.nullcontext()


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu), "emulated"])
def backend(request, monkeypatch):
    """The test body under ``config_context(backend=...)``; ``"emulated"``: ``backend="gpu"``
    on :class:`EmulatedDevice`."""
    if request.param != "emulated":
        with gpulinalg.config_context(backend=request.param):
            yield request.param
        return
    with emulated_gpu(monkeypatch), testing.use_provider(EmulatedDevice()), \
            gpulinalg.config_context(backend="gpu"):
        yield "emulated"
    testing.reset_gpu_state()
