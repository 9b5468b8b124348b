"""SuperLU running out of host memory is reported as running out of memory (an
``OutOfMemoryError``, a ``MemoryError``, naming the factorization and the bytes), never as a
singular matrix nor as SciPy's ``SystemError: gstrf was called with invalid arguments``."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import gpulinalg
from gpulinalg import sparse

#: The child: a 3-D Laplacian (SPD, regular) whose SuperLU fill-in needs more than the address
#: space left under RLIMIT_AS (the process's own size plus 256 MiB).
_CHILD = textwrap.dedent("""
    import os, resource, sys
    import numpy as np, scipy.sparse as sp
    import gpulinalg
    from gpulinalg import sparse
    m = 32
    t = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    i = sp.identity(m)
    a = (sp.kron(sp.kron(t, i), i) + sp.kron(sp.kron(i, t), i) + sp.kron(sp.kron(i, i), t)).tocsr()
    b = np.ones(a.shape[0])
    sparse.spsolve(a[:8, :8], b[:8])  # every lazy import done before the cap
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = size + (256 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        getattr(sparse, sys.argv[1])(a, b) if sys.argv[1] != "factorize" else sparse.factorize(a)
    except BaseException as exc:
        print("RAISED", type(exc).__name__, isinstance(exc, MemoryError), "|", exc)
    else:
        print("SOLVED")
""")


def _rlimit_as():
    try:
        import resource
        return resource.RLIMIT_AS
    except (ImportError, AttributeError):
        return None


@pytest.mark.skipif(_rlimit_as() is None or not sys.platform.startswith("linux"),
                    reason="needs resource.setrlimit(RLIMIT_AS) and /proc (Linux)")
@pytest.mark.parametrize("call", ["spsolve", "solve", "factorize"])
def test_superlu_out_of_memory_under_a_cap_is_a_memory_error(call):
    run = subprocess.run([sys.executable, "-c", _CHILD, call], capture_output=True, text=True,
                         timeout=300, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    out = run.stdout.strip().splitlines()
    assert run.returncode == 0 and out, run.stderr[-2000:]
    last = out[-1]
    if last == "SOLVED":
        pytest.skip("the fill-in fitted under the cap on this machine")
    assert last.startswith("RAISED OutOfMemoryError True"), last
    assert "SuperLU ran out of host memory" in last and "32768 x 32768" in last
    assert " B " in last and "singular" not in last.split("|")[1].split(".")[0]


class _Raises:
    def __init__(self, exc):
        self.exc = exc

    def __call__(self, *args, **kwargs):
        raise self.exc


def _lap(n=30):
    t = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
    return sp.csr_matrix(t)


@pytest.mark.parametrize("exc", [
    MemoryError(),  # gstrf's info > n
    SystemError("gstrf was called with invalid arguments"),  # info wrapped below 0
    RuntimeError("SUPERLU_MALLOC fails for buf in intMalloc()"),  # SuperLU's own abort
], ids=["info-above-n", "info-wrapped", "abort"])
@pytest.mark.parametrize("call", ["spsolve", "solve", "factorize", "splu"])
def test_every_superlu_out_of_memory_form_is_an_out_of_memory_error(monkeypatch, exc, call):
    monkeypatch.setattr(spla, "splu", _Raises(exc))
    a = _lap()
    with gpulinalg.config_context(backend="cpu"):
        with pytest.raises(gpulinalg.OutOfMemoryError, match="SuperLU ran out of host memory") \
                as info:
            if call in ("factorize", "splu"):
                getattr(sparse, call)(a)
            else:
                getattr(sparse, call)(a, np.ones(30))
    assert isinstance(info.value, MemoryError)
    assert not isinstance(info.value, np.linalg.LinAlgError)
    assert "30 x 30" in str(info.value) and "B" in str(info.value)
    assert info.value.__cause__ is exc
    assert "OutOfMemoryError: sparse" in gpulinalg.last_run().details["raised"]
    assert info.value.where == "host" and info.value.needed > 0


def test_an_exactly_singular_factor_is_still_singular():
    a = sp.csr_matrix(np.array([[1.0, 2.0], [2.0, 4.0]]))
    with gpulinalg.config_context(backend="cpu"):
        with pytest.raises(gpulinalg.SingularMatrixError):
            sparse.factorize(a, method="lu")
