"""LU pieces written once for any array module: the determinant and its logarithm from a
factor, the ``P, L, U`` of :func:`gpulinalg.decomp.lu` from ``getrf``'s packed factor, the
permutation that pivots make, and a 1-norm estimate of ``A^-1`` through the factor's solves
(Hager and Higham, LAPACK ``?lacn2`` without its stopping test).

Pivots here are SciPy's: 0-based, ``piv[i]`` is the row swapped with row ``i`` at step ``i``.
"""

import numpy as np

from ..._runtime.arrays import to_host
from ..._runtime.validation import namespace
from ..triangular._triangular_xp import inv_norm1_estimate
from ._lu_pivots import row_permutation
from ._lu_rules import singular_error

__all__ = ["permutation", "swaps", "det_from_factor", "slogdet_from_factor", "assemble",
           "inv_norm1_estimate", "scalar_solve", "structured"]


def permutation(piv):
    """``perm`` (host int64, ``(..., m)``) with ``(P A)[..., i, :] == A[..., perm[i], :]`` for
    the row swaps ``piv`` (``(..., k)``, 0-based) applied in order to ``m`` rows; ``m`` is
    ``piv``'s length unless given by :func:`assemble` (:func:`._lu_pivots.row_permutation`)."""
    return row_permutation(np.asarray(to_host(piv)))


def swaps(piv, xp):
    """``(-1) ** (number of steps i with piv[i] != i)`` per matrix (the permutation's sign), in
    ``piv``'s package, float64."""
    idx = xp.arange(piv.shape[-1], dtype=piv.dtype)
    odd = xp.sum((piv != idx).astype(np.int64), axis=-1) % 2
    return 1.0 - 2.0 * odd.astype(np.float64)


def det_from_factor(lu, piv):
    """``det A`` (float64 or complex128, batch shape) from its packed LU factor and pivots."""
    xp = namespace(lu)
    d = xp.diagonal(lu, axis1=-2, axis2=-1)
    wide = np.complex128 if np.dtype(lu.dtype).kind == "c" else np.float64
    return xp.prod(d.astype(wide), axis=-1) * swaps(piv, xp)


def slogdet_from_factor(lu, piv, dtype):
    """NumPy's ``slogdet`` pair ``(sign, logabsdet)`` from the packed LU factor: ``sign`` in
    ``dtype`` (0 for a singular matrix), ``logabsdet`` in its real dtype (``-inf`` then)."""
    xp = namespace(lu)
    d = xp.diagonal(lu, axis1=-2, axis2=-1).astype(dtype, copy=False)
    mag = xp.abs(d)
    logabs = xp.sum(xp.log(mag), axis=-1)
    unit = d / xp.where(mag == 0, 1, mag).astype(dtype)
    sign = xp.prod(unit, axis=-1) * swaps(piv, xp).astype(dtype)
    singular = xp.any(mag == 0, axis=-1)
    sign = xp.where(singular, xp.zeros_like(sign), sign)
    return sign.astype(dtype, copy=False), logabs


def assemble(lu, piv, permute_l, p_indices, real_dtype):
    """SciPy's ``lu`` output from the packed factor ``lu`` (..., m, n) and pivots (..., k):
    ``(P, L, U)`` or, with ``permute_l``, ``(P L, U)``. ``P`` is a permutation matrix of
    ``real_dtype`` (``P[i, p[i]] = 1``) or, with ``p_indices``, the int32 row indices ``p``
    with ``A = L[p] @ U``."""
    xp = namespace(lu)
    m, n = lu.shape[-2:]
    k = min(m, n)
    low = xp.tril(lu[..., :, :k], -1) + xp.eye(m, k, dtype=lu.dtype)
    up = xp.triu(lu[..., :k, :])
    perm = row_permutation(np.asarray(to_host(piv)), m)
    p = np.argsort(perm, axis=-1).astype(np.int32)  # A = L[p] U
    if permute_l:
        idx = xp.asarray(np.broadcast_to(p[..., None], p.shape + (k,)).astype(np.int64))
        return xp.take_along_axis(low, idx, axis=-2), up
    if p_indices:
        return xp.asarray(p), low, up
    eye = np.eye(m, dtype=real_dtype)
    return xp.asarray(eye[p]), low, up


def scalar_solve(a, b, vec, dtype):
    """SciPy's solve with a single-entry ``a`` (any batch of ones): ``b / a``, broadcast;
    a zero raises (``ValueError`` never: any ``b`` shape goes, as in SciPy)."""
    a1 = a.reshape(()).astype(dtype)
    if bool(a1 == 0):
        raise singular_error([0], ())
    b2 = b[..., None] if vec else b
    x = b2.astype(dtype) / a1
    x = x.reshape((1,) * max(a.ndim - x.ndim, 0) + tuple(x.shape))
    return x[..., 0] if vec else x


def structured(a, kind, lower, xp):
    """The full matrix SciPy's solver of structure ``kind`` reads from ``a``: the named
    triangle mirrored (``"sym"``, ``"her"``), the three diagonals (``"tridiagonal"``), ``a``
    itself otherwise. For the GPU engine's LU of those structures."""
    if kind in ("sym", "her"):
        t = xp.tril(a) if lower else xp.triu(a)
        strict = xp.tril(a, -1) if lower else xp.triu(a, 1)
        other = strict.swapaxes(-1, -2)
        return t + (xp.conj(other) if kind == "her" else other)
    if kind == "tridiagonal":
        return xp.triu(xp.tril(a, 1), -1)
    return a
