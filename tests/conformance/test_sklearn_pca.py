"""scikit-learn's own PCA tests (``sklearn/decomposition/tests/test_pca.py``) run against
``gpulinalg.decomp.PCA``.

The upstream module is executed with ``PCA`` bound to gpulinalg's class; a test that cannot pass
would be a documented divergence (``DIFFERS``, tests.support.swap.differs: none) whose reason
docs/conformance/sklearn_pca.md repeats. The backend is
the CPU; ``GPULINALG_CONFORMANCE_BACKEND=gpu`` runs every test under
``gpulinalg.config_context(backend="gpu")`` (the H200 run; read by this test module only).

The two array-API tests build their ``estimator`` parameters (``PCA(...)`` instances) when the
upstream module is executed, before the name is rebound: :func:`_on_gpulinalg` re-creates each
as gpulinalg's ``PCA`` with the same parameters, so the upstream checks
(``check_array_api_input_and_values``, ``check_array_api_get_precision`` and the ``mle``
variant) run against gpulinalg for every namespace/device/dtype scikit-learn yields. Those that
are not gpulinalg's array kinds or devices are listed in :data:`NOT_APPLICABLE_NAMESPACES`;
CuPy and torch-CUDA carry ``@pytest.mark.gpu``.
"""

import os
import sys
import types

import numpy as np
import pytest

import gpulinalg

pytest.importorskip("sklearn")
sys.path.insert(0, os.path.dirname(__file__))
from tests.support.swap import export, load  # noqa: E402

from gpulinalg.decomp import PCA  # noqa: E402

BACKEND = os.environ.get("GPULINALG_CONFORMANCE_BACKEND", "cpu")

#: Upstream tests that do not exercise gpulinalg (skipped with the reason).
NOT_APPLICABLE = {
    "test_array_api_error_and_warnings_on_unsupported_params":
        "scikit-learn's array-API dispatch messages (arpack and LU refused for array-API "
        "input); gpulinalg takes NumPy, CuPy and torch arrays with every solver instead",
}

#: ``(array_namespace, device_name)`` parametrizations of the array-API tests that are not
#: gpulinalg's array kinds (NumPy, CuPy, torch) or devices (CPU, NVIDIA CUDA); ``None`` is any
#: device. Skipped with the reason.
NOT_APPLICABLE_NAMESPACES = {
    ("array_api_strict", None):
        "array_api_strict is not one of gpulinalg's array kinds (NumPy, CuPy, torch): its "
        "arrays are read through NumPy and results come back as NumPy arrays, while the "
        "check wants them in array_api_strict's namespace",
    ("dpnp", None): "dpnp (Intel GPUs) is not one of gpulinalg's array kinds",
    ("torch", "mps"): "torch on Apple MPS: gpulinalg's devices are the CPU and NVIDIA CUDA",
    ("torch", "xpu"): "torch on Intel XPU: gpulinalg's devices are the CPU and NVIDIA CUDA",
}

#: Parametrizations that need an NVIDIA GPU (marked ``gpu``; skipped without one).
GPU_NAMESPACES = {("cupy", None), ("torch", "cuda")}

#: Documented divergences (tests.support.swap.differs): none.
DIFFERS: dict = {}

upstream = load("sklearn.decomposition.tests.test_pca", {"PCA": PCA}, divergences=DIFFERS,
                skip=NOT_APPLICABLE)
globals().update(export(upstream))


def _namespace_param(values):
    namespace, device, _ = values
    for key in ((namespace, device), (namespace, None)):
        if key in NOT_APPLICABLE_NAMESPACES:
            return pytest.param(*values, marks=pytest.mark.skip(
                reason=NOT_APPLICABLE_NAMESPACES[key]))
        if key in GPU_NAMESPACES:
            return pytest.param(*values, marks=[pytest.mark.gpu, pytest.mark.skipif(
                not gpulinalg.gpu_available(), reason="needs an NVIDIA GPU")])
    return pytest.param(*values)


def _on_gpulinalg(func):
    """``func`` (an upstream array-API test) with its ``estimator`` parameters re-made as
    gpulinalg's ``PCA`` (same parameters) and its namespaces marked as above."""
    new = types.FunctionType(func.__code__, func.__globals__, func.__name__,
                             func.__defaults__, func.__closure__)
    marks = []
    for m in func.pytestmark:
        if m.name == "parametrize" and m.args[0] == "estimator":
            ours = [PCA(**est.get_params()) for est in m.args[1]]
            assert all(type(est) is PCA for est in ours)
            m = pytest.mark.parametrize("estimator", ours, **m.kwargs).mark
        elif m.name == "parametrize" and m.args[0].startswith("array_namespace"):
            m = pytest.mark.parametrize(
                m.args[0], [_namespace_param(v) for v in m.args[1]], **m.kwargs).mark
        marks.append(m)
    new.pytestmark = marks
    return new


test_pca_array_api_compliance = _on_gpulinalg(upstream.test_pca_array_api_compliance)
test_pca_mle_array_api_compliance = _on_gpulinalg(upstream.test_pca_mle_array_api_compliance)


@pytest.fixture(autouse=True)
def _scipy_array_api_variable(request, monkeypatch):
    """scikit-learn's ``config_context(array_api_dispatch=True)`` and its test helper
    ``_array_api_for_tests`` refuse to run unless ``SCIPY_ARRAY_API=1`` is in the environment:
    scikit-learn's own array-API code calls SciPy on non-NumPy arrays, which needs SciPy's
    array-API mode switched on before SciPy's import. gpulinalg's ``PCA`` never hands the
    array-API input to SciPy (it reads torch and CuPy arrays itself), so the variable is set
    for the array-API tests only, leaving SciPy as every other test sees it. A run with
    ``SCIPY_ARRAY_API=1`` exported before Python starts gives the same results."""
    if "array_api" in request.node.name:
        monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    yield


@pytest.fixture
def global_random_seed():
    """scikit-learn's conftest fixture (its default seed)."""
    return int(os.environ.get("SKLEARN_TESTS_GLOBAL_RANDOM_SEED", "42"))


@pytest.fixture(params=[np.float64, np.float32], ids=["float64", "float32"])
def global_dtype(request):
    """scikit-learn's conftest fixture, with float32 always on."""
    return request.param


@pytest.fixture(autouse=True)
def _backend():
    with gpulinalg.config_context(backend=BACKEND):
        yield


def test_array_api_strict_input_read_through_numpy():
    """What :data:`NOT_APPLICABLE_NAMESPACES` says of array_api_strict: its arrays are fitted
    (read through NumPy, as scikit-learn reads them without array-API dispatch) and the
    results are NumPy arrays equal to the NumPy fit's."""
    xp = pytest.importorskip("array_api_strict")
    X = upstream.iris.data
    for solver in ("full", "covariance_eigh", "randomized", "arpack"):
        est = PCA(n_components=2, svd_solver=solver, random_state=0)
        t = est.fit_transform(xp.asarray(X))
        assert type(t) is np.ndarray and type(est.components_) is np.ndarray
        np.testing.assert_allclose(t, PCA(n_components=2, svd_solver=solver, random_state=0)
                                   .fit_transform(X), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(est.transform(xp.asarray(X)), t, rtol=1e-12, atol=1e-12)
