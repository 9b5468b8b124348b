"""``gpulinalg demo`` steps of the decomp module: one row per small function in ``STEPS``."""

import time

import numpy as np

from .._demo import timed as _timed
from .._runtime import last_run



def _row(name, ref_name, t_ref, check):
    rec = last_run()
    return dict(step=name, where=f"{rec.backend} ({rec.reason})", seconds=rec.seconds,
                reference=ref_name, reference_seconds=t_ref, check=bool(check))


def svd_step(small):
    """Full SVD of a tall matrix (QR first, then the SVD of R) against SciPy."""
    import scipy.linalg

    from . import svd
    m, n = (2000, 200) if small else (20000, 2000)
    a = np.random.default_rng(1).standard_normal((m, n))
    svd(a[:64, :8], full_matrices=False)  # warm-up: handles, kernels
    _, s, _ = svd(a, full_matrices=False)  # economy size: a full U would be m x m
    rec_row = _row(f"SVD {m}x{n} fp64", "scipy.linalg.svd", 0.0, True)
    (_, s_ref, _), t_ref = _timed(lambda: scipy.linalg.svd(a, full_matrices=False))
    rec_row.update(reference_seconds=t_ref, check=bool(np.allclose(s, s_ref, rtol=1e-10)))
    return rec_row


def qr_step(small):
    """Reduced QR of a tall matrix against SciPy."""
    import scipy.linalg

    from . import qr
    m, n = (2000, 200) if small else (20000, 2000)
    a = np.random.default_rng(2).standard_normal((m, n))
    qr(a[:64, :8], mode="economic")  # warm-up
    q, r = qr(a, mode="economic")
    row = _row(f"QR {m}x{n} fp64", "scipy.linalg.qr", 0.0, True)
    (_, r_ref), t_ref = _timed(lambda: scipy.linalg.qr(a, mode="economic"))
    ok = np.allclose(q @ r, a) and np.allclose(np.abs(r), np.abs(r_ref), atol=1e-8)
    row.update(reference_seconds=t_ref, check=bool(ok))
    return row


def cholesky_step(small):
    """Cholesky factor, solve and log-determinant (what a Gaussian process needs)."""
    import scipy.linalg

    from . import cho_factor, cho_solve, logdet_cholesky
    n = 1000 if small else 8000
    x = np.random.default_rng(3).standard_normal((n, n))
    a = x @ x.T / n + np.eye(n)
    b = np.ones(n)
    cho_solve(cho_factor(a[:8, :8]), b[:8])  # warm-up
    t0 = time.perf_counter()
    cf = cho_factor(a)
    where = last_run()
    sol = cho_solve(cf, b)
    logdet = logdet_cholesky(cf)
    seconds = time.perf_counter() - t0

    def ref():
        c = scipy.linalg.cho_factor(a)
        return scipy.linalg.cho_solve(c, b), 2 * np.log(np.diag(c[0])).sum()
    (sol_ref, logdet_ref), t_ref = _timed(ref)
    ok = np.allclose(sol, sol_ref) and np.isclose(logdet, logdet_ref)
    return dict(step=f"Cholesky + solve + logdet n={n}", where=f"{where.backend} "
                f"({where.reason})", seconds=seconds, reference="scipy cho_factor/cho_solve",
                reference_seconds=t_ref, check=bool(ok))


def pca_step(small):
    """PCA of the handwritten digits (scikit-learn's ``load_digits``, jittered copies when not
    ``small``) against scikit-learn's PCA: same explained variances, same components."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA as SkPCA

    from ._pca_api import PCA
    X = load_digits().data.astype(np.float32)
    if not small:
        rng = np.random.default_rng(4)
        X = np.concatenate([X + rng.normal(0, 0.5, X.shape).astype(np.float32)
                            for _ in range(100)])
    PCA(4, svd_solver="randomized", random_state=0).fit(X[:256])  # warm-up
    ours = PCA(16, svd_solver="randomized", random_state=0).fit(X)
    row = _row(f"PCA {X.shape[0]}x{X.shape[1]} fp32, 16 components", "sklearn PCA", 0.0, True)
    ref, t_ref = _timed(lambda: SkPCA(16, svd_solver="randomized", random_state=0).fit(X))
    ok = np.allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-2) and \
        np.allclose(np.abs(ours.components_[:8]), np.abs(ref.components_[:8]), atol=1e-2)
    row.update(reference_seconds=t_ref, check=bool(ok))
    return row


#: The rows of this module's demo step, in order; other families append their own functions.
STEPS = [qr_step, svd_step, cholesky_step, pca_step]


def step(small):
    """Rows ``{"step", "where", "seconds", "reference", "reference_seconds", "check"}``."""
    return [fn(small) for fn in STEPS]
