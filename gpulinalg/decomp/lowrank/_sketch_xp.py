"""Building blocks of the randomized low-rank methods, written once for any array module.

Every helper takes an :class:`~gpulinalg.decomp.lowrank._lowrank_engine.Engine` (``engine.xp`` is
NumPy or CuPy) and keeps its arrays there; what differs per backend (the Gaussian generator, the
Cholesky of the CPU that checks and the GPU's that does not, the fused kernels) is a field of
the engine. The only host round trip of a GPU run is the ``l x l`` Rayleigh-Ritz step at the
very end (``l = k + n_oversamples``).
"""

import numpy as np

from ._sketch_options import _MASK64
from .._checks import hermitian

__all__ = ["gaussian", "orthonormalize", "svd_flip", "flip_by_phase", "hermitian",
           "high_precision"]


def gaussian(engine, shape, dtype, seed):
    """Standard normal ``shape`` array of ``dtype`` (complex: unit variance, circular).

    Examples
    --------
    >>> from gpulinalg.decomp.lowrank._sketch_host import ENGINE as host
    >>> from gpulinalg.decomp.lowrank._sketch_options import seed_of
    >>> z = gaussian(host, (400, 50), np.float64, seed_of(1))
    >>> bool(abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02)
    True
    """
    dtype = np.dtype(dtype)
    seed &= _MASK64
    if dtype.kind != "c":
        return engine.gaussian_real(shape, dtype, seed)
    real = engine.gaussian_real((2, *shape), dtype.char.lower(), seed)
    return ((real[0] + 1j * real[1]) * np.sqrt(0.5)).astype(dtype)


def high_precision(dtype):
    """float64 or complex128: the precision Gram matrices are formed in."""
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def _cholqr_pass(engine, y, shift_factor):
    """One Cholesky-QR pass with the Gram matrix in high precision and a diagonal shift.

    ``Q = Y R^-1`` spans ``range(Y)`` whatever the shift; the shift (``shift_factor`` times
    ``trace(Y^H Y)``, the shifted CholeskyQR of Fukaya et al. 2020) keeps ``R`` invertible for
    numerically rank-deficient ``Y`` and bounds ``cond(Q)``.
    """
    xp = engine.xp
    hi = high_precision(y.dtype)
    yd = xp.ascontiguousarray(y, dtype=hi)  # C order: NumPy's Gram of an F-ordered block is slow
    g = hermitian(yd) @ yd
    l = g.shape[0]
    rinv = engine.chol_inverse(g, shift_factor, y.dtype)  # one fused kernel, where there is one
    if rinv is not None:
        return y @ rinv
    eye = xp.eye(l, dtype=hi)
    scale = xp.trace(g).real * shift_factor + np.finfo(hi).tiny
    for attempt in range(3):
        L = engine.cholesky(g + (scale * 1e3**attempt) * eye)
        if L is not None:
            break
    else:
        return xp.linalg.qr(y)[0]
    rinv = hermitian(engine.solve_lower(L, eye))
    return y @ rinv.astype(y.dtype, copy=False)


def orthonormalize(engine, y, method="QR", *, passes=1):
    """A basis of ``range(y)`` (``m x l``, ``l <= m``) by ``method`` (see
    :data:`~gpulinalg.decomp.lowrank._sketch_options.NORMALIZERS`).

    ``QR`` returns an orthonormal basis; ``CholQR`` one whose orthogonality is ``eps`` after
    two passes; ``LU`` and ``none`` merely well-scaled (for power iterations).
    """
    if method == "QR":
        return engine.xp.linalg.qr(y)[0]
    if method == "none":
        return y
    if method == "LU":
        return engine.lu(y)
    m, l = y.shape
    eps = np.finfo(high_precision(y.dtype)).eps
    for p in range(passes):
        factor = 11.0 * (m * l + l * (l + 1)) * eps if p == 0 else l * eps
        y = _cholqr_pass(engine, y, factor)
    return y


def svd_flip(engine, U, Vh, u_based=False, overwrite=False):
    """Make the largest-magnitude entry of each row of ``Vh`` (or column of ``U`` when
    ``u_based``) real and positive, keeping ``U @ diag(S) @ Vh`` unchanged.

    ``overwrite=True`` lets it scale ``U`` and ``Vh`` in place (device arrays of the caller's
    own: one kernel instead of three).

    Examples
    --------
    >>> from gpulinalg.decomp.lowrank._sketch_host import ENGINE as host
    >>> U, Vh = np.array([[1.0, 0.0], [0.0, -1.0]]), np.array([[-3.0, 1.0], [1.0, 2.0]])
    >>> U2, Vh2 = svd_flip(host, U, Vh)
    >>> Vh2[0].tolist(), U2[:, 0].tolist(), np.allclose(U2 @ Vh2, U @ Vh)
    ([3.0, -1.0], [-1.0, -0.0], True)
    """
    rows = hermitian(U).conj() if u_based else Vh
    if rows.shape[0] == 0 or rows.shape[1] == 0:
        return U, Vh
    fused = engine.flip_signs(U, Vh, rows, u_based, overwrite)
    if fused is not None:
        return fused
    return _flip_rows(engine.xp, U, Vh, rows, u_based)


def flip_by_phase(xp, U, Vh, u_based=False):
    """:func:`svd_flip` by ``xp`` array operations only (for factors known to be in ``xp``'s
    memory, such as the host-side factors of a streamed run)."""
    rows = hermitian(U).conj() if u_based else Vh
    if rows.shape[0] == 0 or rows.shape[1] == 0:
        return U, Vh
    return _flip_rows(xp, U, Vh, rows, u_based)


def _flip_rows(xp, U, Vh, rows, u_based):
    idx = xp.argmax(xp.abs(rows), axis=1)
    piv = rows[xp.arange(rows.shape[0]), idx]
    if piv.dtype.kind != "c":
        phase = xp.where(piv < 0, -1, 1).astype(U.dtype)  # zero rows keep their sign
    else:
        mag = xp.abs(piv)
        phase = xp.where(mag > 0, piv / xp.where(mag > 0, mag, 1), 1).astype(U.dtype)
    if u_based:
        return U * phase.conj()[None, :], Vh * phase[:, None]
    return U * phase[None, :], Vh * phase.conj()[:, None]
