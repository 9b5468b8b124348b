"""SciPy's own tests of ``solve_triangular`` (the class ``TestSolveTriangular`` of
``scipy.linalg.tests.test_basic``), run with gpulinalg's function bound to that name. Only that
class is collected. docs/conformance/scipy_linalg.md lists what does not pass, and why.

``GPULINALG_CONFORMANCE_BACKEND=gpu`` (read here only, never by the package) runs every swapped
call under ``gpulinalg.config_context(backend="gpu")``; the default is ``cpu``.
"""

from gpulinalg import decomp

from tests.support.swap import export, load
# the one GPULINALG_CONFORMANCE_BACKEND switch
from tests.conformance.test_scipy_cholesky import on_backend

CLASSES = ("TestSolveTriangular",)

#: Documented divergences (tests.support.swap.differs): none.
DIFFERS: dict = {}

upstream = load("scipy.linalg.tests.test_basic",
                {"solve_triangular": on_backend(decomp.solve_triangular)}, divergences=DIFFERS)
globals().update({k: v for k, v in export(upstream).items() if k in CLASSES})
