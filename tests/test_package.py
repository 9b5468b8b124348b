"""Import hygiene and errors of the public surface (the CLI: tests/test_cli.py)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import gpulinalg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code, **env):
    full_env = {**os.environ, "PYTHONPATH": ROOT, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env, cwd=ROOT, timeout=120)


def test_import_loads_no_gpu_package():
    out = _python("import sys, gpulinalg, gpulinalg.dense, gpulinalg.decomp, gpulinalg.sparse, "
                  "gpulinalg.gp; print(sorted(m for m in ('cupy', 'nvmath', 'torch') "
                  "if m in sys.modules))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_gpu_in_subprocess_runs_on_cpu():
    out = _python("import numpy as np, gpulinalg; from gpulinalg._runtime.dispatch import "
                  "Op, dispatch; dispatch(Op('t', None, np.sum, (np.ones(3),))); "
                  "r = gpulinalg.last_run(); print(r.backend, gpulinalg.gpu_available())",
                  CUDA_VISIBLE_DEVICES="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cpu", "False"]


def test_errors_taxonomy():
    assert issubclass(gpulinalg.LinAlgError, np.linalg.LinAlgError)
    err = gpulinalg.NotPositiveDefiniteError(3, batch_index=(1, 0))
    assert isinstance(err, gpulinalg.LinAlgError)
    assert err.minor == 3 and err.batch_index == (1, 0) and "order 3" in str(err)
    assert "(1, 0)" in str(err)
    assert issubclass(gpulinalg.FallbackWarning, Warning)
    assert issubclass(gpulinalg.ResidualWarning, Warning)


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        gpulinalg.nope  # noqa: B018
