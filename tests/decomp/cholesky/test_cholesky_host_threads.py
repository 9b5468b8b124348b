"""OpenBLAS's two-thread ``potrf`` segfaults past order 16384 (seen at 20000 in SciPy's and
NumPy's wheels of OpenBLAS 0.3.30): the CPU engine factors such matrices on one BLAS thread,
in a child process here so that a crash is a failed test, not a lost run."""

import os
import subprocess
import sys

import pytest

from gpulinalg.decomp.cholesky import _cholesky_host

pytest.importorskip("threadpoolctl", reason="the one-thread guard needs threadpoolctl")

CHILD = """
import numpy as np, gpulinalg
from gpulinalg.decomp import cholesky
n = {n}
x = np.random.default_rng(0).standard_normal((n, 1))
k = np.exp(-np.square(x - x.T))
k[np.diag_indices(n)] += 1e-2
with gpulinalg.config_context(backend="cpu"):
    try:
        c = cholesky(k, lower=True, overwrite_a=False, check_finite=False)
    except MemoryError as exc:
        print("memory", exc)
        raise SystemExit(0)
print("ok", abs(c[:50] @ c[:50].T - k[:50, :50]).max())
"""


def test_two_thread_potrf_past_the_limit_does_not_crash():
    n = _cholesky_host.TWO_THREAD_LIMIT + 3616  # 20000: where OpenBLAS's two threads crash
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    run = subprocess.run([sys.executable, "-c", CHILD.format(n=n)], env=env,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]  # -11: the segmentation fault
    word, value = run.stdout.split()[:2]
    if word == "memory":
        pytest.skip("this machine cannot hold a 20000 x 20000 float64 matrix twice")
    assert word == "ok" and float(value) < 1e-10


def test_the_guard_is_a_null_context_at_small_orders():
    import contextlib
    assert isinstance(_cholesky_host._potrf_threads(100), contextlib.nullcontext)
