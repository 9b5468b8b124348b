"""The CPU pieces of :class:`~gpulinalg.decomp.TruncatedSVD` that scikit-learn's estimator runs
through SciPy: ARPACK's ``svds`` (``algorithm="arpack"``) and the total variance of a sparse
matrix."""

import numpy as np

__all__ = ["arpack", "total_variance"]


def arpack(X, k, tol, random_state):
    """``(U, S, Vt)`` of the ``k`` largest singular values by SciPy's ``svds`` (PCA's ARPACK
    route, uncentred), descending, signs by scikit-learn's ``svd_flip`` on the rows of ``Vt``."""
    from sklearn.utils.extmath import svd_flip

    from ..lowrank._sketch_options import seed_of
    from ._pca_host import arpack as pca_arpack
    u, s, vt = pca_arpack(X, None, k, tol, seed_of(random_state))  # no centring
    u, vt = svd_flip(u[:, ::-1], vt[::-1], u_based_decision=False)
    return u, s[::-1], vt


def total_variance(X):
    """The sum of the columns' variances of ``X``, dense or sparse."""
    import scipy.sparse as sp
    if sp.issparse(X):
        from sklearn.utils.sparsefuncs import mean_variance_axis
        return mean_variance_axis(X, axis=0)[1].sum()
    return np.var(X, axis=0).sum()
