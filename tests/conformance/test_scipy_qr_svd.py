"""SciPy's own tests of ``qr`` and ``svd`` (the classes ``TestQR``, ``TestSVD_GESDD`` and
``TestSVD_GESVD`` of ``scipy.linalg.tests.test_decomp``), run with gpulinalg's functions bound
to those names. Only those classes are collected. docs/conformance/scipy_linalg.md lists what
does not pass, and why.

``GPULINALG_CONFORMANCE_BACKEND=gpu`` (read here only, never by the package) runs every swapped
call under ``gpulinalg.config_context(backend="gpu")``; the default is ``cpu``.
"""

from gpulinalg import decomp

from tests.support.swap import export, load
# the one GPULINALG_CONFORMANCE_BACKEND switch
from tests.conformance.test_scipy_cholesky import on_backend
from tests.conformance.test_scipy_cholesky import (_NOT_OVERWRITTEN, SCIPY_1_18,
                                                  gpu_divergence_fixture)

CLASSES = ("TestQR", "TestSVD_GESDD", "TestSVD_GESVD")

#: Documented divergences on every backend (tests.support.swap.differs): none.
DIFFERS: dict = {}

_SVD_OVERWRITE = (("*-True-2-F-float", "*-True-2-F-complex"), _NOT_OVERWRITTEN)

#: Documented divergences with the GPU backend only, per parametrization (SciPy >= 1.18).
DIFFERS_GPU = {
    "TestSVD_GESDD::test_overwrite": _SVD_OVERWRITE,
    "TestSVD_GESVD::test_overwrite": _SVD_OVERWRITE,
    "TestQR::test_overwrite_args": (("shape0-F-False-*-float-True",
                                     "shape1-F-False-*-float-True"), _NOT_OVERWRITTEN),
} if SCIPY_1_18 else {}

_gpu_divergences = gpu_divergence_fixture(DIFFERS_GPU)

upstream = load("scipy.linalg.tests.test_decomp",
                {"qr": on_backend(decomp.qr), "svd": on_backend(decomp.svd)},
                divergences=DIFFERS)
globals().update({k: v for k, v in export(upstream).items() if k in CLASSES})
