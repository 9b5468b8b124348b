"""``gpulinalg demo`` steps of the sparse module: an SPD solve, then refactorize + solve."""

import numpy as np

from .._demo import compare


def _poisson2d(m):
    import scipy.sparse as sp
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    eye = sp.identity(m)
    return (sp.kron(eye, t) + sp.kron(t, eye)).tocsr()


def _close(x, ref):
    return bool(np.allclose(x, ref, rtol=1e-8, atol=1e-10))


def step(small):
    """2-D Poisson SPD solve against SciPy's spsolve; then new values, refactorize, solve
    (SciPy has no refactorization: its row factors from scratch)."""
    import scipy.sparse.linalg as spla

    from . import factorize, solve
    m = 100 if small else 700
    a = _poisson2d(m)
    a_csc = a.tocsc()
    b = np.random.default_rng(5).standard_normal(a.shape[0])
    rows = [compare(f"SPD solve, 2-D Poisson n={a.shape[0]}", lambda: solve(a, b),
                    lambda: spla.spsolve(a_csc, b), "scipy spsolve", _close)]
    a2 = a.copy()
    a2.data = a2.data * 2.0
    a2_csc = a2.tocsc()
    with factorize(a) as fac:
        fac.solve(b)  # the analysis, once

        def refactor_solve():
            fac.refactorize(a2)
            return fac.solve(b)
        rows.append(compare(
            "refactorize (same pattern) + solve", refactor_solve,
            lambda: spla.splu(a2_csc).solve(b), "scipy splu + solve", _close,
            place=lambda: f"{fac.info['backend']}/{fac.info['library']}"))
    return rows
