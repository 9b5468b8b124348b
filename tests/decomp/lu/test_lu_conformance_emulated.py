"""SciPy's tests of the LU family (tests/conformance/test_scipy_lu_solve.py's selection) run on
the GPU engine (:mod:`gpulinalg.decomp.lu._lu_cuda`) over the emulated cuSOLVER/cuBLAS: a
device provider hands the engine emulated device arrays (tests/support/cusolver_emulator.py),
under ``backend="gpu"``. No GPU needed; the real libraries run in the ``gpu``-marked tests."""

import pytest

import gpulinalg
from gpulinalg import decomp, testing

from tests.conformance.test_scipy_lu_solve import differs_in_place
from tests.decomp.lu.conftest import EmulatedDevice
from tests.support.cusolver_emulator import emulated_gpu
from tests.support.swap import load


@pytest.fixture(autouse=True)
def _on_emulated_gpu(request, monkeypatch):
    differs_in_place(request.node)  # a NumPy input is copied to the device: never overwritten
    with emulated_gpu(monkeypatch), testing.use_provider(EmulatedDevice()), \
            gpulinalg.config_context(backend="gpu"):
        yield
    testing.reset_gpu_state()


def _gpu(fn):
    def run(*args, **kwargs):
        with gpulinalg.config_context(backend="gpu"):
            out = fn(*args, **kwargs)
        assert gpulinalg.last_run().backend in ("gpu", "none"), gpulinalg.last_run()
        return out
    run.__name__ = fn.__name__
    return run


SWAPPED = {name: _gpu(getattr(decomp, name))
           for name in ("solve", "inv", "det", "lu", "lu_factor", "lu_solve")}

basic = load("scipy.linalg.tests.test_basic", SWAPPED)
lu_tests = load("scipy.linalg.tests.test_decomp_lu", SWAPPED)

TestSolve, TestInv, TestDet = basic.TestSolve, basic.TestInv, basic.TestDet
TestLU, TestLUFactor, TestLUSolve = lu_tests.TestLU, lu_tests.TestLUFactor, lu_tests.TestLUSolve
