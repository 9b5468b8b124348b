"""Shared fixtures: the ``gpu`` marker skips without a GPU; ``backend`` runs a test on both."""

import numpy as np
import pytest

import gpulinalg
from gpulinalg import testing
from gpulinalg._runtime import measured as _measured
from tests.support import fake_gpu as _fake


def pytest_addoption(parser):
    parser.addoption("--custom-kernels", choices=("on", "off"), default="on",
                     help="off: every test runs in config_context(custom_kernels=False), so "
                          "every operation takes its cuSOLVER/cuBLAS/CuPy route")


@pytest.fixture(autouse=True)
def _custom_kernels_option(request):
    """``--custom-kernels=off``: the whole test in ``config_context(custom_kernels=False)``;
    the tests of the kernels themselves (tests/decomp/_kernels, the ``kernels`` marker) skip
    (the differential tests compare both routes)."""
    if request.config.getoption("--custom-kernels") == "off":
        path = request.node.nodeid.replace("\\", "/")
        if (path.startswith("tests/decomp/_kernels/") and "differential" not in path) or \
                request.node.get_closest_marker("kernels"):
            pytest.skip("--custom-kernels=off: a test of the hand-written kernels")
        with gpulinalg.config_context(custom_kernels=False):
            yield
    else:
        yield


@pytest.fixture(autouse=True)
def _fresh_auto_measurements():
    """``backend="auto"``'s measured times (``_runtime.measured``) do not cross tests."""
    yield
    _measured.forget()


def pytest_collection_modifyitems(config, items):
    if gpulinalg.gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request):
    """Run the test body with ``gpulinalg.config_context(backend=...)`` for each backend."""
    with gpulinalg.config_context(backend=request.param):
        yield request.param


@pytest.fixture
def rng():
    return np.random.default_rng(20261130)


@pytest.fixture
def fake_gpu():
    """A pretend GPU for exercising the dispatcher's GPU branches on a CPU-only machine
    (installed through the device-provider protocol: tests/support/fake_gpu.py)."""
    with _fake.fake_gpu() as info:
        yield info
    testing.reset_gpu_state()


@pytest.fixture
def xp_gpu():
    """CuPy, for GPU tests (skips when CuPy cannot reach a GPU)."""
    if not gpulinalg.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    import cupy
    return cupy


@pytest.fixture(scope="module")
def client():
    """A 2-worker in-process Dask ``LocalCluster`` and its ``Client`` (skips without Dask)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c
