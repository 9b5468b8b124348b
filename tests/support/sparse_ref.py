"""Test matrices for gpulinalg.sparse: SPD, symmetric indefinite, unsymmetric, ill-pivoted."""

import numpy as np
import scipy.sparse as sp


def poisson2d(m, dtype=np.float64):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    eye = sp.identity(m)
    return (sp.kron(eye, t) + sp.kron(t, eye)).astype(dtype).tocsr()


def spd(n, rng, dtype=np.float64):
    """Random sparse SPD: symmetric random part plus a dominant diagonal."""
    r = sp.random(n, n, density=min(1.0, 4.0 / max(n, 1)), random_state=rng)
    a = r + r.T
    a = a + sp.diags(np.asarray(abs(a).sum(axis=1)).ravel() + 1.0)
    if np.dtype(dtype).kind == "c":
        im = sp.random(n, n, density=min(1.0, 3.0 / max(n, 1)), random_state=rng)
        a = a + 0.5j * (im - im.T)  # Hermitian; still diagonally dominant
    return sp.csr_matrix(a, dtype=dtype)


def sym_indefinite(n, rng, dtype=np.float64):
    """Random sparse symmetric indefinite, comfortably nonsingular (dominant signed diagonal)."""
    r = sp.random(n, n, density=min(1.0, 4.0 / max(n, 1)), random_state=rng)
    a = r + r.T
    signs = np.where(np.arange(n) % 3 == 0, -1.0, 1.0)
    a = a + sp.diags(signs * (np.asarray(abs(a).sum(axis=1)).ravel() + 1.0))
    return sp.csr_matrix(a, dtype=dtype)


def unsymmetric(n, rng, dtype=np.float64):
    r = sp.random(n, n, density=min(1.0, 5.0 / max(n, 1)), random_state=rng)
    a = r + sp.diags(np.asarray(abs(r).sum(axis=1)).ravel() + 1.0)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * sp.random(n, n, density=min(1.0, 2.0 / max(n, 1)), random_state=rng)
    return sp.csr_matrix(a, dtype=dtype)


def pendant(k, d=1e-9, spread=3.0):
    """Symmetric, ill conditioned (cond ~ 1e7), with tiny pivots a min-degree order takes first.

    A chain of nodes (diagonal 4) each carrying a pendant node of diagonal ``d``, scaled
    symmetrically by a spread of ``10**spread``: eliminating the pendants first (their degree
    is 1) without pivoting gives element growth ~1/d, so the first LDLᵀ solve has a backward
    error far above tolerance that refinement removes.
    """
    n = 2 * k
    rows, cols, vals = [], [], []
    for i in range(k):
        b, a = 2 * i, 2 * i + 1
        rows += [b, a, a, b]
        cols += [b, a, b, a]
        vals += [4.0, d, 1.0, 1.0]
        if i + 1 < k:
            rows += [b, 2 * i + 2]
            cols += [2 * i + 2, b]
            vals += [1.0, 1.0]
    a = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
    s = np.logspace(0, spread, n)
    np.random.default_rng(0).shuffle(s)
    d_ = sp.diags(s)
    return (d_ @ a @ d_).tocsr()


KINDS = {"spd": spd, "symmetric_indefinite": sym_indefinite, "unsymmetric": unsymmetric}


def berr(a, x, b):
    """Normwise backward error, float64 reference computation."""
    a = sp.csr_matrix(a)
    x = np.asarray(x)
    b = np.asarray(b)
    r = b - a @ x
    anorm = abs(a).sum(axis=1).max()
    return float(np.max(abs(r).max(axis=0) / (anorm * abs(x).max(axis=0) + abs(b).max(axis=0))))


def neumann1d(n, dtype=np.float64):
    """1-D Neumann Laplacian: tridiagonal, diagonal 1, 2, ..., 2, 1; singular (ones span its
    null space), symmetric with a positive diagonal, so ``auto`` tries Cholesky (issue 18)."""
    d = np.full(n, 2.0)
    d[0] = d[-1] = 1.0
    off = -np.ones(n - 1)
    return sp.diags([off, d, off], [-1, 0, 1], format="csr").astype(dtype)


def numerically_singular(n=20, seed=0):
    """Dense-equivalent n x n matrix (as CSR) whose last row is 0.3 row 3 + 0.7 row 7:
    cond ~ 1e16-1e19 in float64 (issue 18)."""
    a = np.random.default_rng(seed).standard_normal((n, n))
    a[-1] = 0.3 * a[3] + 0.7 * a[7]
    return sp.csr_matrix(a)


def graded(n, cond, seed=0):
    """Unsymmetric n x n CSR with 2-norm condition number ``cond`` (U diag(s) Vᵀ, s graded
    geometrically), for conditioning tests that must stay silent or must warn."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    s = np.logspace(0, -np.log10(cond), n)
    return sp.csr_matrix((u * s) @ v.T)
