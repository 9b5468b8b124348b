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

from tests.support.swap import differs, export, load

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


def _scipy_at_least(major, minor):
    import scipy
    return tuple(int(x) for x in scipy.__version__.split(".")[:2]) >= (major, minor)


#: SciPy 1.18 added the tests listed in the DIFFERS_GPU tables (they do not exist in 1.17).
SCIPY_1_18 = _scipy_at_least(1, 18)


def gpu_divergence_fixture(table):
    """An autouse fixture applying, under ``GPULINALG_CONFORMANCE_BACKEND=gpu`` only, the
    documented divergences of ``table`` (``"Class::test": ({id glob, ...}, differs(...))``) to
    the matching parametrizations (:meth:`tests.support.swap.Divergence.apply`). Per
    parametrization, which ``swap.load``'s ``divergences`` cannot do: the same upstream test
    passes for its other parameters (the divergence would then fail them)."""
    import fnmatch

    import pytest

    @pytest.fixture(autouse=True)
    def _gpu_divergences(request):
        if BACKEND == "gpu":
            node = request.node
            owner = getattr(node.cls, "__name__", None)
            name = getattr(node, "originalname", node.name)
            key = f"{owner}::{name}" if owner else name
            spec = getattr(node, "callspec", None)
            globs, divergence = table.get(key, ((), None))
            if divergence and any(fnmatch.fnmatchcase(spec.id if spec else "", g)
                                  for g in globs):
                divergence.apply(node)
        yield
    return _gpu_divergences


_NOT_OVERWRITTEN = differs(
    "GPU: overwrite_a=True is honoured on the CPU only; a NumPy input is copied to the device "
    "and the result comes back in a new host array, so the input is never overwritten "
    "(docs/conformance/scipy_linalg.md)")

#: Documented divergences with the GPU backend only: the parametrizations that differ.
DIFFERS_GPU = {
    "TestCholesky::test_overwrite_args": (("*-float-True",), _NOT_OVERWRITTEN),
    "TestCholesky::test_overwrite_cleaning": (("*",), _NOT_OVERWRITTEN),
    "TestChoFactor::test_overwrite_args": (("*-float-True",), _NOT_OVERWRITTEN),
} if SCIPY_1_18 else {}

_gpu_divergences = gpu_divergence_fixture(DIFFERS_GPU)

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
