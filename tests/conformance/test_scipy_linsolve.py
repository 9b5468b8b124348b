"""SciPy's own tests of ``spsolve``, ``splu``, ``factorized`` and ``spsolve_triangular``
(``scipy.sparse.linalg._dsolve.tests.test_linsolve``), run with gpulinalg's functions bound to
those names.

Not collected (they call none of the four): SciPy's ``_superlu`` internals
(``TestGstrsErrors``, ``test_gssv_badinput``), ``spilu`` (out of scope), ``is_sptriangular`` /
``spbandwidth``. The UMFPACK tests skip themselves without ``scikits.umfpack`` (gpulinalg never
uses UMFPACK: not applicable). ``GPULINALG_CONFORMANCE_BACKEND=gpu`` runs every swapped call
under ``gpulinalg.config_context(backend="gpu")``.
"""

import functools

import scipy.sparse.linalg as spla

from gpulinalg import sparse

from tests.conformance.test_scipy_cholesky import on_backend
from tests.support.swap import export, load

NOT_OURS = "calls none of spsolve, splu, factorized, spsolve_triangular (SciPy's own code)"

SKIP = {
    "TestLinsolve::test_gssv_badinput": NOT_OURS,
    "TestSplu::test_spilu_smoketest": NOT_OURS + ": spilu is out of scope",
    "TestSplu::test_spilu_drop_rule": NOT_OURS + ": spilu is out of scope",
    "TestSplu::test_spilu_nnz0": NOT_OURS + ": spilu is out of scope",
    "TestSplu::test_superlu_dlamch_i386_nan": NOT_OURS + ": spilu is out of scope",
    # not applicable rather than a divergence: the test checks sys.getrefcount of the object,
    # i.e. that SciPy's C code hands out arrays holding a reference to the SuperLU object
    # (no refcount bug in _superlu); a SparseLU is a Python object whose perm_r / perm_c are
    # the engine's arrays, with no C reference counting of its own to get wrong
    "TestSplu::test_lu_refcount": "tests the reference counting of SciPy's C extension "
                                  "(its perm_r / perm_c arrays keep the SuperLU object "
                                  "alive); a SparseLU hands out the engine's arrays, which "
                                  "do not refer to it: not applicable",
}

#: Documented divergences (tests.support.swap.differs): none.
DIFFERS: dict = {}

upstream = load("scipy.sparse.linalg._dsolve.tests.test_linsolve",
                {"spsolve": on_backend(sparse.spsolve), "splu": on_backend(sparse.splu),
                 "factorized": on_backend(sparse.factorized),
                 "spsolve_triangular": on_backend(sparse.spsolve_triangular)},
                divergences=DIFFERS, skip=SKIP)


def _ours(fn):
    """The upstream test with SciPy's ``splu`` in its parameters (bound when SciPy's module
    was executed, before the swap) replaced by ours."""
    @functools.wraps(fn)
    def test(self, splu_fun, rtol):
        return fn(self, upstream.splu if splu_fun is spla.splu else splu_fun, rtol)
    return test


upstream.TestSplu.test_natural_permc = _ours(upstream.TestSplu.test_natural_permc)

EXCLUDED = ("TestGstrsErrors", "test_is_sptriangular_and_spbandwidth")
globals().update({k: v for k, v in export(upstream).items() if k not in EXCLUDED})
