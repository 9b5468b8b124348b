"""``backend="cpu"`` never touches CUDA: the dense factorizations import no CuPy and ask
cuSOLVER nothing (their workspace estimates are made only when the dispatcher considers the
GPU)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import gpulinalg
from tests.support import fake_gpu as fakes
from gpulinalg.decomp.cholesky import _cholesky_api
from gpulinalg.decomp.qr import _qr_api
from gpulinalg.decomp.svd import _svd_api
from gpulinalg.decomp import (cho_factor, cho_solve, cholesky, logdet_cholesky, qr,
                              solve_triangular, svd)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPD = "np.array([[4.0, 2.0], [2.0, 3.0]])"
CALLS = {
    "qr": "d.qr(np.ones((3, 2)))",
    "svd": "d.svd(np.ones((3, 2)))",
    "cholesky": f"d.cholesky({SPD})",
    "cho_factor": f"d.cho_factor({SPD})",
    "cho_solve": f"d.cho_solve(d.cho_factor({SPD}), np.ones(2))",
    "solve_triangular": "d.solve_triangular(np.eye(2), np.ones(2))",
    "logdet_cholesky": f"d.logdet_cholesky(d.cho_factor({SPD}))",
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_backend_cpu_imports_no_cupy(name):
    code = ("import sys, numpy as np, gpulinalg; import gpulinalg.decomp as d; "
            f"gpulinalg.set_config(backend='cpu'); {CALLS[name]}; "
            "print(gpulinalg.last_run().backend, 'cupy' in sys.modules, "
            "'nvmath' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cpu", "False", "False"]


def _refuse(*args, **kwargs):
    raise AssertionError("workspace estimate asked for a CPU run")


@pytest.mark.parametrize("backend", ["cpu", "auto"])
def test_no_workspace_query_unless_the_gpu_is_considered(monkeypatch, rng, backend):
    for module in (_cholesky_api, _qr_api, _svd_api):
        monkeypatch.setattr(module, "workspace_bytes", _refuse)
    a = rng.standard_normal((6, 4))
    spd = a.T @ a + 4 * np.eye(4)
    with gpulinalg.config(backend=backend):  # "auto" without a GPU: no estimate either
        qr(a)
        svd(a)
        c = cholesky(spd)
        cf = cho_factor(spd)
        cho_solve(cf, np.ones(4))
        logdet_cholesky(cf)
        solve_triangular(c, np.ones(4), lower=True)
    assert gpulinalg.last_run().backend == "cpu"


def test_workspace_estimate_made_when_the_gpu_is_considered(monkeypatch, rng):
    asked = []
    monkeypatch.setattr(_qr_api, "workspace_bytes", lambda *a: asked.append(a[0]) or 1 << 50)
    with fakes.fake_gpu(), gpulinalg.config(backend="gpu"):
        with pytest.warns(gpulinalg.FallbackWarning, match="available"):
            qr(rng.standard_normal((6, 4)))  # the huge estimate routes to the CPU
    assert asked == ["geqrf", "orgqr"]
    assert gpulinalg.last_run().fell_back
