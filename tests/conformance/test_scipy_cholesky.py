"""SciPy's own tests of ``cholesky``, ``cho_factor`` and ``cho_solve``
(``scipy.linalg.tests.test_decomp_cholesky``), run with gpulinalg's functions bound to those
names. The banded routines (``cholesky_banded``, ``cho_solve_banded``) are SciPy's own and not
swapped. docs/conformance/scipy_linalg.md lists what does not pass, and why.

``GPULINALG_CONFORMANCE_BACKEND=gpu`` (read here only, never by the package) runs every swapped
call under ``gpulinalg.config_context(backend="gpu")``; the default is ``cpu``.
"""

import functools
import warnings
import os

import gpulinalg
from gpulinalg import decomp

from _swap import export, load

BACKEND = os.environ.get("GPULINALG_CONFORMANCE_BACKEND", "cpu")


def on_backend(fn):
    """``fn`` run under ``config_context(backend=BACKEND)``."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with gpulinalg.config_context(backend=BACKEND), warnings.catch_warnings():
            # routing is checked elsewhere: options without a GPU routine (pivoted QR) run on
            # the CPU with a FallbackWarning under backend="gpu"; the results are compared here
            warnings.simplefilter("ignore", gpulinalg.FallbackWarning)
            return fn(*args, **kwargs)
    return run


SKIP = {
    # SciPy's conftest skips `xslow` tests unless SCIPY_XSLOW=1; this runner does not know the
    # mark, so it would run: a 47000^2 float64 identity (17.7 GB) through potrf. On a 2-core
    # machine the multi-threaded OpenBLAS 0.3.30 dpotrf then segfaults (n >= 16000 already;
    # scipy.linalg.cholesky itself crashes the same way, OPENBLAS_NUM_THREADS=1 does not):
    # the interpreter crash seen when this module first ran.
    "TestCholesky::test_int_overflow": "xslow in SciPy (17.7 GB input); multi-threaded "
                                       "OpenBLAS dpotrf segfaults at this size on 2 cores",
}

upstream = load("scipy.linalg.tests.test_decomp_cholesky",
                {"cholesky": on_backend(decomp.cholesky),
                 "cho_factor": on_backend(decomp.cho_factor),
                 "cho_solve": on_backend(decomp.cho_solve)},
                skip=SKIP)
globals().update(export(upstream))
