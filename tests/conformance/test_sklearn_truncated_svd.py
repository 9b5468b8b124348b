"""scikit-learn's own TruncatedSVD tests (``sklearn/decomposition/tests/test_truncated_svd.py``)
run against ``gpulinalg.decomp.TruncatedSVD``: the upstream module is executed with
``TruncatedSVD`` bound to gpulinalg's class. The backend is the CPU;
``GPULINALG_CONFORMANCE_BACKEND=gpu`` runs every test under
``gpulinalg.config_context(backend="gpu")``."""

import os
import sys

import pytest

import gpulinalg

pytest.importorskip("sklearn")
sys.path.insert(0, os.path.dirname(__file__))
from tests.support.swap import export, load  # noqa: E402

from gpulinalg.decomp import TruncatedSVD  # noqa: E402

BACKEND = os.environ.get("GPULINALG_CONFORMANCE_BACKEND", "cpu")

upstream = load("sklearn.decomposition.tests.test_truncated_svd",
                {"TruncatedSVD": TruncatedSVD})
globals().update(export(upstream))


@pytest.fixture
def global_random_seed():
    """scikit-learn's conftest fixture (its default seed)."""
    return int(os.environ.get("SKLEARN_TESTS_GLOBAL_RANDOM_SEED", "42"))


@pytest.fixture(autouse=True)
def _backend():
    with gpulinalg.config_context(backend=BACKEND):
        yield


def test_the_class_under_test_is_gpulinalgs():
    assert upstream.TruncatedSVD is TruncatedSVD
    assert type(TruncatedSVD()).__module__.startswith("gpulinalg")
