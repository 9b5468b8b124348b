"""A pretend GPU for machines without one: a device provider (the protocol of
:class:`gpulinalg.testing.DeviceProvider`) that shows one device with the memory the test
asks for, and hands GPU functions their arguments as given (host arrays), so every branch of
the dispatcher runs on a CPU machine."""

import contextlib

from gpulinalg._runtime import device as _device
from gpulinalg.testing import use_provider

__all__ = ["FakeGPU", "fake_gpu"]


class FakeGPU:
    """One device with ``free``/``total`` bytes; GPU functions get host arrays."""

    def __init__(self, free=16 << 30, total=32 << 30, name="Fake GPU"):
        self.info = _device.GPUInfo(0, name, (9, 0), int(total))
        self.memory = (int(free), int(total))

    def before_run(self, op):
        pass

    def to_device(self, x):
        return x

    def stream(self):
        return contextlib.nullcontext()


@contextlib.contextmanager
def fake_gpu(free=16 << 30, total=32 << 30, name="Fake GPU"):
    """Make the calling thread see one GPU with ``free``/``total`` bytes; arrays stay NumPy.

    The GPU function is then called with NumPy arrays, so pair this with
    :func:`gpulinalg.testing.inject_fault` or with GPU functions that work on NumPy arrays.
    """
    with use_provider(FakeGPU(free, total, name)) as prov:
        yield prov.info
