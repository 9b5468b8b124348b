"""SciPy's own tests of ``solve``, ``inv``, ``det`` (``scipy.linalg.tests.test_basic``: the
classes ``TestSolve``, ``TestInv``, ``TestDet``) and of ``lu``, ``lu_factor``, ``lu_solve``
(``scipy.linalg.tests.test_decomp_lu``), run with gpulinalg's functions bound to those names.
docs/conformance/scipy_linalg.md lists what does not pass, and why.

``GPULINALG_CONFORMANCE_BACKEND=gpu`` (read here only, never by the package) runs every swapped
call under ``gpulinalg.config_context(backend="gpu")``; the default is ``cpu``.
"""

import pytest

from gpulinalg import decomp

from tests.conformance.test_scipy_cholesky import BACKEND, on_backend
from tests.support.swap import differs, export, load

SWAPPED = {name: on_backend(getattr(decomp, name))
           for name in ("solve", "inv", "det", "lu", "lu_factor", "lu_solve")}

#: The classes of test_basic that test the LU family (the module holds many others).
BASIC_CLASSES = ("TestSolve", "TestInv", "TestDet")

#: Documented divergences on every backend (tests.support.swap.differs): none.
DIFFERS_BASIC: dict = {}
DIFFERS_LU: dict = {}

_NOT_OVERWRITTEN = differs(
    "GPU: overwrite_a/overwrite_b are honoured on the CPU only; a NumPy input is copied to the "
    "device and the result comes back in a new host array, so the input is never overwritten "
    "(docs/conformance/scipy_linalg.md)")


def expects_in_place(node):
    """Whether SciPy's test ``node`` asserts that an input was overwritten in place (what a
    GPU run on NumPy input never does): its own rule, on its parameters."""
    name = getattr(node, "originalname", node.name)
    params = getattr(getattr(node, "callspec", None), "params", {})
    if name == "test_overwrite_args":
        a_in = params["overwrite_kw"].get("overwrite_a", False) and \
            params["a_dtype"] is not int and params["a_order"] == "F" and \
            params.get("assume_a") != "banded"  # SciPy 1.18: banded ignores overwrite_a
        b_in = params["overwrite_b_kw"].get("overwrite_b", False) and \
            params["b_dtype"] is not int and (params["b_order"] == "F" or params["b_ndim"] == 1)
        return bool(a_in or b_in)
    owner = getattr(node.cls, "__name__", "")
    if name == "test_overwrite_a" and owner == "TestInv":
        return bool(params["overwrite_kw"].get("overwrite_a", False))
    return name == "test_overwrite_a" and owner == "TestDet"


def differs_in_place(node):
    """Make ``node`` a documented divergence (SciPy's overwrite assertion must fail) when it
    :func:`expects_in_place`."""
    if expects_in_place(node):
        _NOT_OVERWRITTEN.apply(node)


#: Documented divergences on a real GPU only: cuSOLVER's rounding, where a test compares an
#: entry that is zero in exact arithmetic with ``rtol`` alone (assert_allclose fails).
DIFFERS_GPU = {
    ("TestLUFactor", name): differs("an entry of U that is zero in exact arithmetic (the 3 x 4 "
                                    "matrix has rank 2) is rounding noise: cuSOLVER's 3e-16 "
                                    "against LAPACK's -1.8e-15, compared with rtol=1e-7, "
                                    "atol=0")
    for name in ("test_hrectangular", "test_hrectangular_complex")}


@pytest.fixture(autouse=True)
def _gpu_divergences(request):
    if BACKEND == "gpu":
        differs_in_place(request.node)
        node = request.node
        divergence = DIFFERS_GPU.get((getattr(node.cls, "__name__", ""), node.name))
        if divergence:
            divergence.apply(node)
    yield


basic = load("scipy.linalg.tests.test_basic", SWAPPED, divergences=DIFFERS_BASIC)
lu_tests = load("scipy.linalg.tests.test_decomp_lu", SWAPPED, divergences=DIFFERS_LU)

globals().update({name: getattr(basic, name) for name in BASIC_CLASSES})
globals().update(export(lu_tests))
