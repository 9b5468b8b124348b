"""``overwrite_*`` never writes memory the caller cannot write: read-only arrays and read-only
memmaps come back untouched (and a memmap must not crash the process), on both backends."""

import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpulinalg import decomp

A = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
B = np.array([1.0, 2.0, 3.0])


def _frozen(x):
    x = np.array(x)
    x.flags.writeable = False
    return x


CALLS = {
    "solve_triangular": lambda a, b: decomp.solve_triangular(np.triu(A), b, overwrite_b=True),
    "cho_solve": lambda a, b: decomp.cho_solve(decomp.cho_factor(A), b, overwrite_b=True),
    "cholesky": lambda a, b: decomp.cholesky(a, overwrite_a=True),
    "cho_factor": lambda a, b: decomp.cho_factor(a, overwrite_a=True),
    "qr": lambda a, b: decomp.qr(a, overwrite_a=True),
    "svd": lambda a, b: decomp.svd(a, overwrite_a=True),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_read_only_inputs_are_not_written(backend, name):
    a, b = _frozen(A), _frozen(B)
    expected = CALLS[name](A.copy(), B.copy())
    got = CALLS[name](a, b)
    np.testing.assert_array_equal(a, A)
    np.testing.assert_array_equal(b, B)
    for e, g in zip(np.atleast_1d(expected) if isinstance(expected, np.ndarray) else expected,
                    np.atleast_1d(got) if isinstance(got, np.ndarray) else got):
        if isinstance(e, np.ndarray):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


MEMMAP = textwrap.dedent("""
    import sys, numpy as np, gpulinalg
    from gpulinalg import decomp
    gpulinalg.set_config(backend=sys.argv[2])
    path = sys.argv[1]
    np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]]).tofile(path)
    a = np.memmap(path, dtype=float, mode="r", shape=(3, 3))
    b = np.memmap(path, dtype=float, mode="r", shape=(3,))
    before = (np.array(a), np.array(b))
    decomp.solve_triangular(np.triu(np.array(a)), b, overwrite_b=True)
    decomp.cho_solve(decomp.cho_factor(np.array(a)), b, overwrite_b=True)
    decomp.cholesky(a, overwrite_a=True); decomp.qr(a, overwrite_a=True)
    decomp.svd(a, overwrite_a=True)
    assert np.array_equal(before[0], a) and np.array_equal(before[1], b)
    print("ok")
""")


def test_read_only_memmaps_neither_crash_nor_change(backend, tmp_path):
    proc = subprocess.run([sys.executable, "-c", MEMMAP, str(tmp_path / "m.dat"), backend],
                          capture_output=True, text=True, timeout=300,
                          cwd=pathlib.Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip().endswith("ok")
