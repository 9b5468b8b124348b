"""scikit-learn's own PCA tests (``sklearn/decomposition/tests/test_pca.py``) run against
``gpulinalg.decomp.PCA``.

The upstream module is executed with ``PCA`` bound to gpulinalg's class; the tests that cannot
pass are strict xfails whose reasons docs/conformance/sklearn_pca.md repeats. The backend is
the CPU; ``GPULINALG_CONFORMANCE_BACKEND=gpu`` runs every test under
``gpulinalg.config_context(backend="gpu")`` (the H200 run; read by this test module only).
"""

import os
import sys

import numpy as np
import pytest

import gpulinalg

pytest.importorskip("sklearn")
sys.path.insert(0, os.path.dirname(__file__))
from tests.support.swap import export, load  # noqa: E402

from gpulinalg.decomp import PCA  # noqa: E402

BACKEND = os.environ.get("GPULINALG_CONFORMANCE_BACKEND", "cpu")

#: Tests whose parameters were built from scikit-learn's own PCA when the module was executed
#: (``PCA(...)`` instances in ``parametrize``): they exercise scikit-learn, not gpulinalg.
NOT_APPLICABLE = {
    "test_pca_array_api_compliance": "its estimators are scikit-learn PCA instances made at "
                                     "import time (array-API dispatch of scikit-learn itself)",
    "test_pca_mle_array_api_compliance": "its estimator is a scikit-learn PCA instance made at "
                                         "import time",
    "test_array_api_error_and_warnings_on_unsupported_params":
        "scikit-learn's array-API dispatch messages (gpulinalg takes CuPy/torch natively)",
}

XFAIL: dict = {}

upstream = load("sklearn.decomposition.tests.test_pca", {"PCA": PCA}, xfail=XFAIL,
                skip=NOT_APPLICABLE)
globals().update(export(upstream))


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
