"""Test matrices with prescribed spectra and LAPACK-style accuracy ratios (DESIGN §4)."""

import numpy as np

from gpulinalg._runtime.arrays import to_host

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
REAL = [np.float32, np.float64]


def eps(dtype):
    return float(np.finfo(np.dtype(dtype)).eps)


def spectrum(kind, k, dtype):
    """Singular values: well conditioned, condition 1/eps, rank deficient, zero."""
    if kind == "well":
        return np.linspace(2.0, 1.0, k)
    if kind == "ill":
        return np.geomspace(1.0, eps(dtype), k) if k > 1 else np.ones(k)
    if kind == "rankdef":
        s = np.linspace(2.0, 1.0, k)
        s[k // 2:] = 0.0
        return s
    if kind == "zero":
        return np.zeros(k)
    raise ValueError(kind)


SPECTRA = ["well", "ill", "rankdef", "zero"]


def orthonormal(rng, m, k, dtype):
    x = rng.standard_normal((m, k))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal((m, k))
    q, _ = np.linalg.qr(x)
    return q


def with_singular_values(rng, m, n, s, dtype):
    """``U diag(s) V^H`` with random orthonormal U (m x k) and V (n x k), in ``dtype``."""
    k = min(m, n)
    u = orthonormal(rng, m, k, dtype)
    v = orthonormal(rng, n, k, dtype)
    return ((u * s[:k]) @ v.conj().T).astype(dtype)


def spd(rng, n, dtype, cond=100.0, batch=()):
    """Hermitian positive definite matrices with eigenvalues spread over ``[1/cond, 1]``."""
    out = np.empty(batch + (n, n), dtype=dtype)
    for idx in np.ndindex(*batch):
        q = orthonormal(rng, n, n, dtype)
        lam = np.geomspace(1.0, 1.0 / cond, n)
        a = (q * lam) @ q.conj().T
        out[idx] = (a + a.conj().T) / 2
    return out


def random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def layout(x, order, to):
    """``to(x)`` (``to``: a host-to-device copy) in layout ``order``: ``"C"``, ``"F"`` (each
    matrix column-major) or ``"strided"`` (every other column of a buffer twice as wide)."""
    if order == "F":
        return to(np.ascontiguousarray(x.swapaxes(-1, -2))).swapaxes(-1, -2)
    if order == "strided":
        big = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
        big[..., ::2] = x
        return to(big)[..., ::2]
    return to(x)


def host(x):
    return np.asarray(to_host(x))


def _norm(x):
    """1-norm of each matrix of a stack (max over the stack)."""
    x = host(x).astype(np.complex128 if np.iscomplexobj(host(x)) else np.float64)
    if x.size == 0:
        return 0.0
    return float(np.max(np.abs(x).sum(axis=-2).max(axis=-1)))


def ratio(residual, scale, n, dtype):
    """``residual / (n * scale * eps)`` with a zero ``scale`` read as 1."""
    return residual / (max(n, 1) * (scale if scale > 0 else 1.0) * eps(dtype))


def backward_ratio(a, rebuilt, dtype):
    a64 = host(a).astype(np.complex128)
    return ratio(_norm(a64 - host(rebuilt)), _norm(a64), max(a64.shape[-2:]), dtype)


def orthogonality_ratio(q, dtype, rows=False):
    """``||I - Q^H Q|| / (n eps)`` (columns), or of ``Q Q^H`` with ``rows=True``."""
    q = host(q).astype(np.complex128)
    g = q @ q.conj().swapaxes(-1, -2) if rows else q.conj().swapaxes(-1, -2) @ q
    k = g.shape[-1]
    return ratio(_norm(g - np.eye(k)), 1.0, max(q.shape[-2:]), dtype)


def solve_ratio(a, x, b, dtype):
    """``||b - A x|| / (||A|| ||x|| eps)``, to compare with ``30 n``."""
    a, x, b = (host(t).astype(np.complex128) for t in (a, x, b))
    vec = x.ndim == a.ndim - 1
    xx, bb = (x[..., None], b[..., None]) if vec else (x, b)
    r = bb - a @ xx
    return _norm(r) / (max(_norm(a) * _norm(xx), 1e-300) * eps(dtype))
