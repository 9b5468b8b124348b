"""SciPy's own tests of ``eigh``, ``eigvalsh`` (``scipy.linalg.tests.test_decomp``: ``TestEigh``,
which tests ``eigvalsh`` too; SciPy 1.17 has no ``TestEigvalsh``) and ``lstsq``, ``pinv``
(``scipy.linalg.tests.test_basic``: ``TestLstsq``, ``TestPinv``), run with gpulinalg's functions
bound to those names. The other classes of those modules test SciPy's own functions and are not
collected here.

``GPULINALG_CONFORMANCE_BACKEND=gpu`` (read by :mod:`.test_scipy_cholesky`) runs every swapped
call under ``gpulinalg.config_context(backend="gpu")``.
"""

from gpulinalg import decomp

from tests.conformance.test_scipy_cholesky import on_backend
from tests.support.swap import differs, load

SKIP_DECOMP: dict = {}
#: Documented divergences (tests.support.swap.differs): the upstream test must raise ``raises``.
DIFFERS_DECOMP = {
    # assert_raises(ValueError, eigh, a) lets our TypeError through: the body raises it
    "TestEigh::test_eigh_of_sparse": differs(
        "a SciPy sparse matrix raises TypeError (the wrong kind of input: DESIGN's taxonomy, "
        "as every decomp function), SciPy's eigh raises ValueError", raises=TypeError),
}
SKIP_BASIC: dict = {}
DIFFERS_BASIC: dict = {}

_decomp = load("scipy.linalg.tests.test_decomp",
               {"eigh": on_backend(decomp.eigh), "eigvalsh": on_backend(decomp.eigvalsh)},
               divergences=DIFFERS_DECOMP, skip=SKIP_DECOMP)
_basic = load("scipy.linalg.tests.test_basic",
              {"lstsq": on_backend(decomp.lstsq), "pinv": on_backend(decomp.pinv)},
              divergences=DIFFERS_BASIC, skip=SKIP_BASIC)

TestEigh = _decomp.TestEigh
TestLstsq = _basic.TestLstsq
TestPinv = _basic.TestPinv
