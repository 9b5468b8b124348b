"""``gpulinalg demo`` steps of the sparse module: an SPD solve, then refactorize + solve."""

import time

import numpy as np

from .._demo import timed as _timed
from .._runtime import last_run


def _poisson2d(m):
    import scipy.sparse as sp
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    eye = sp.identity(m)
    return (sp.kron(eye, t) + sp.kron(t, eye)).tocsr()



def _where():
    rec = last_run()
    d = rec.details
    return f"{rec.backend}/{d.get('library', '?')} ({rec.reason})", rec.seconds


def step(small):
    """2-D Poisson SPD solve against SciPy's spsolve; then new values, refactorize, solve."""
    import scipy.sparse.linalg as spla

    from . import factorize, solve
    m = 100 if small else 700
    a = _poisson2d(m)
    b = np.random.default_rng(5).standard_normal(a.shape[0])
    solve(_poisson2d(8), np.ones(64))  # warm-up: libraries, handles
    x = solve(a, b)
    where, seconds = _where()
    ref, t_ref = _timed(lambda: spla.spsolve(a, b))
    rows = [dict(step=f"SPD solve, 2-D Poisson n={a.shape[0]}", where=where, seconds=seconds,
                 reference="scipy.sparse.linalg.spsolve", reference_seconds=t_ref,
                 check=bool(np.allclose(x, ref, rtol=1e-8, atol=1e-10)))]
    a2 = a.copy()
    a2.data = a2.data * 2.0
    with factorize(a) as fac:
        fac.solve(b)
        t0 = time.perf_counter()
        fac.refactorize(a2)
        y = fac.solve(b)
        seconds = time.perf_counter() - t0
        where = f"{fac.info['backend']}/{fac.info['library']}"
    ref2, t_ref2 = _timed(lambda: spla.splu(a2.tocsc()).solve(b))
    rows.append(dict(step="same pattern, new values: refactorize + solve", where=where,
                     seconds=seconds, reference="scipy splu + solve", reference_seconds=t_ref2,
                     check=bool(np.allclose(y, ref2, rtol=1e-8, atol=1e-10))))
    return rows
