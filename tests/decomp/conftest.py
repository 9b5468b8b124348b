"""Fixtures of decomp's tests: ``emu`` runs the GPU engines on the emulated CUDA libraries."""

import pytest

from tests.support.cusolver_emulator import emulated_gpu


@pytest.fixture
def emu(monkeypatch):
    """decomp's GPU engines on NumPy through the emulated cuSOLVER/cuBLAS/NVRTC (no GPU needed)."""
    with emulated_gpu(monkeypatch):
        yield
