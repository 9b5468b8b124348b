"""SciPy's own tests of ``qr`` and ``svd`` (the classes ``TestQR``, ``TestSVD_GESDD`` and
``TestSVD_GESVD`` of ``scipy.linalg.tests.test_decomp``), run with gpulinalg's functions bound
to those names. Only those classes are collected. docs/conformance/scipy_linalg.md lists what
does not pass, and why.

``GPULINALG_CONFORMANCE_BACKEND=gpu`` (read here only, never by the package) runs every swapped
call under ``gpulinalg.config_context(backend="gpu")``; the default is ``cpu``.
"""

from gpulinalg import decomp

from _swap import export, load
from test_scipy_cholesky import on_backend  # the one GPULINALG_CONFORMANCE_BACKEND switch

CLASSES = ("TestQR", "TestSVD_GESDD", "TestSVD_GESVD")

XFAIL: dict = {}

upstream = load("scipy.linalg.tests.test_decomp",
                {"qr": on_backend(decomp.qr), "svd": on_backend(decomp.svd)}, xfail=XFAIL)
globals().update({k: v for k, v in export(upstream).items() if k in CLASSES})
