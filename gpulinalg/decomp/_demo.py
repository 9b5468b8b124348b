"""``gpulinalg demo`` steps of the decomp module: one row per small function in ``STEPS``."""

import numpy as np

from .._demo import compare, rows_of


def qr_step(small):
    """Reduced QR of a tall matrix against SciPy."""
    import scipy.linalg

    from . import qr
    m, n = (2000, 200) if small else (20000, 2000)
    a = np.random.default_rng(2).standard_normal((m, n))

    def check(got, ref):
        q, r = got
        return np.allclose(q @ r, a) and np.allclose(np.abs(np.diag(r)),
                                                     np.abs(np.diag(ref[1])), rtol=1e-8)
    return compare(f"QR {m}x{n} fp64", lambda: qr(a, mode="economic"),
                   lambda: scipy.linalg.qr(a, mode="economic"), "scipy.linalg.qr", check)


def svd_step(small):
    """Thin SVD of a tall matrix (QR first, then the SVD of R) against SciPy."""
    import scipy.linalg

    from . import svd
    m, n = (2000, 200) if small else (20000, 2000)
    a = np.random.default_rng(1).standard_normal((m, n))

    def check(got, ref):
        u, s, vh = got
        return np.allclose(s, ref[1], rtol=1e-10) and np.allclose((u * s) @ vh, a)
    return compare(f"SVD {m}x{n} fp64", lambda: svd(a, full_matrices=False),
                   lambda: scipy.linalg.svd(a, full_matrices=False), "scipy.linalg.svd", check)


def cholesky_step(small):
    """Cholesky factor, solve and log-determinant (what a Gaussian process needs)."""
    import scipy.linalg

    from .. import last_run
    from .._demo import where
    from . import cho_factor, cho_solve, logdet_cholesky
    n = 1000 if small else 8000
    x = np.random.default_rng(3).standard_normal((n, n))
    a = x @ x.T / n + np.eye(n)
    b = np.ones(n)

    factor = []  # where the factorization ran: the solve and logdet follow the factor's package

    def ours():
        cf = cho_factor(a, lower=True)
        factor[:] = [last_run()]
        return cho_solve(cf, b), logdet_cholesky(cf)

    def ref():
        c = scipy.linalg.cho_factor(a, lower=True)
        return scipy.linalg.cho_solve(c, b), 2 * np.log(np.diag(c[0])).sum()
    return compare(f"Cholesky + solve + logdet n={n} fp64", ours, ref,
                   "scipy cho_factor",
                   lambda got, r: np.allclose(got[0], r[0]) and np.isclose(got[1], r[1]),
                   place=lambda: where(factor[0]))


def pca_step(small):
    """PCA of the handwritten digits (scikit-learn's ``load_digits``, jittered copies when not
    ``small``) against scikit-learn's PCA: same explained variances, same components."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA as SkPCA

    from . import PCA
    X = load_digits().data.astype(np.float32)
    if not small:
        rng = np.random.default_rng(4)
        X = np.concatenate([X + rng.normal(0, 0.5, X.shape).astype(np.float32)
                            for _ in range(100)])

    def check(ours, ref):
        return np.allclose(ours.explained_variance_, ref.explained_variance_, rtol=1e-2) and \
            np.allclose(np.abs(ours.components_[:8]), np.abs(ref.components_[:8]), atol=1e-2)
    return compare(f"PCA {X.shape[0]}x{X.shape[1]} fp32, 16 components",
                   lambda: PCA(16, svd_solver="randomized", random_state=0).fit(X),
                   lambda: SkPCA(16, svd_solver="randomized", random_state=0).fit(X),
                   "sklearn PCA", check, own_cpu_engine=True)


#: The rows of this module's demo step, in order; other families append their own functions.
STEPS = [qr_step, svd_step, cholesky_step, pca_step]


def step(small):
    """Rows ``{"step", "where", "seconds", "reference", "reference_seconds", "check", ...}``."""
    return rows_of(STEPS, small)
