"""Building blocks of the randomized low-rank methods, written once for NumPy and CuPy.

``xp`` is the array module (``numpy`` or ``cupy``); every helper keeps its arrays there. The
only host round trip of a GPU run is :func:`host_eigh` / :func:`host_svd` on an ``l x l``
matrix at the very end (``l = k + n_oversamples``).
"""

import numpy as np

from . import _ritz

__all__ = ["seed_of", "gaussian", "orthonormalize", "NORMALIZERS", "resolve_normalizer",
           "svd_flip", "hermitian",
           "high_precision", "to_host", "from_host"]

#: Normalizers between power iterations. ``CholQR``: mixed-precision shifted Cholesky QR
#: (Gram matrix in float64/complex128, one GEMM-shaped pass); ``QR``: Householder;
#: ``LU``: partial-pivoting LU (scikit-learn's choice); ``none``: plain power iteration.
NORMALIZERS = ("CholQR", "QR", "LU", "none")


def resolve_normalizer(xp, name):
    """``"auto"``: ``CholQR`` on the GPU (a few GEMMs and one fused kernel, no sync), ``LU``
    on the CPU (partial-pivoting LU, scikit-learn's choice: about half a Householder QR's
    work, which made a randomized PCA of a 179700 x 64 matrix 1.5x faster)."""
    if name != "auto":
        return name
    return "LU" if xp is np else "CholQR"

_MASK64 = (1 << 64) - 1


def seed_of(random_state):
    """A 64-bit seed from ``random_state`` (None, int, numpy Generator or RandomState).

    Equal integers give equal seeds, so the same ``random_state`` gives the same sketch on
    the CPU and on the GPU.

    Examples
    --------
    >>> seed_of(0) == seed_of(0), seed_of(0) == seed_of(1)
    (True, False)
    """
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63, dtype=np.int64))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return int(np.random.SeedSequence(int(random_state) & _MASK64)
                   .generate_state(1, np.uint64)[0])
    raise TypeError("random_state must be None, an int, a numpy.random.Generator or a "
                    f"numpy.random.RandomState, got {type(random_state).__name__}")


# splitmix64 of a counter, then Box-Muller (entries 2p and 2p+1 share the pair p): the same
# numbers from NumPy and from a CUDA kernel.
_GAUSS_PREAMBLE = r"""
__device__ __forceinline__ unsigned long long gl_mix(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
"""
_GAUSS_BODY = r"""
unsigned long long c = seed ^ (((unsigned long long)i >> 1) << 1);
double u1 = ((double)(gl_mix(c) >> 11) + 1.0) * 1.1102230246251565e-16;
double u2 = (double)(gl_mix(c + 1ull) >> 11) * 1.1102230246251565e-16;
double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
z = (T)((i & 1) ? r * sin(t) : r * cos(t));
"""
_gauss_kernel = None
_K = [np.uint64(k) for k in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)]


def _mix_np(z, tmp):
    """splitmix64's finalizer, in place on uint64 ``z`` (``tmp``: scratch of the same shape)."""
    z += _K[0]
    for shift, mult in ((30, _K[1]), (27, _K[2])):
        np.right_shift(z, np.uint64(shift), out=tmp)
        z ^= tmp
        z *= mult
    np.right_shift(z, np.uint64(31), out=tmp)
    z ^= tmp
    return z


def _uniform_np(c, tmp, plus_one):
    z = _mix_np(c, tmp)
    z >>= np.uint64(11)
    u = z.view(np.int64).astype(np.float64)  # < 2**53: exact, and faster than from uint64
    if plus_one:
        u += 1.0
    u *= 2.0**-53
    return u


def _gaussian_real(xp, shape, dtype, seed):
    global _gauss_kernel
    seed = np.uint64(seed & _MASK64)
    size = int(np.prod(shape))
    if xp is np:
        pairs = (size + 1) // 2
        c = np.arange(pairs, dtype=np.uint64)
        c <<= np.uint64(1)
        c ^= seed
        c1 = c + np.uint64(1)
        tmp = np.empty_like(c)
        with np.errstate(over="ignore"):
            r = _uniform_np(c, tmp, True)
            t = _uniform_np(c1, tmp, False)
        np.log(r, out=r)
        r *= -2.0
        np.sqrt(r, out=r)
        t *= 2 * np.pi
        z = np.empty((pairs, 2), np.float64)
        np.multiply(r, np.cos(t), out=z[:, 0])
        np.multiply(r, np.sin(t), out=z[:, 1])
        return z.reshape(-1)[:size].astype(dtype).reshape(shape)
    if _gauss_kernel is None:
        _gauss_kernel = xp.ElementwiseKernel("uint64 seed", "T z", _GAUSS_BODY, "gl_gaussian",
                                             preamble=_GAUSS_PREAMBLE)
    out = xp.empty(shape, dtype=dtype)
    _gauss_kernel(seed, out)
    return out


def gaussian(xp, shape, dtype, seed):
    """Standard normal ``shape`` array of ``dtype`` (complex: unit variance, circular).

    Examples
    --------
    >>> z = gaussian(np, (400, 50), np.float64, seed_of(1))
    >>> bool(abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02)
    True
    """
    dtype = np.dtype(dtype)
    if dtype.kind != "c":
        return _gaussian_real(xp, shape, dtype, seed)
    real = _gaussian_real(xp, (2, *shape), dtype.char.lower(), seed)
    return ((real[0] + 1j * real[1]) * np.sqrt(0.5)).astype(dtype)


def hermitian(x):
    """Conjugate transpose (a view for real arrays)."""
    return x.T.conj() if x.dtype.kind == "c" else x.T


def high_precision(dtype):
    """float64 or complex128: the precision Gram matrices are formed in."""
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def to_host(x):
    return x if isinstance(x, np.ndarray) else x.get()


def from_host(xp, x):
    return x if xp is np else xp.asarray(x)


def _solve_lower(xp, L, B):
    if xp is np:
        from scipy.linalg import solve_triangular
        return solve_triangular(L, B, lower=True, check_finite=False)
    from cupyx.scipy.linalg import solve_triangular
    return solve_triangular(L, B, lower=True)


def _cholesky(xp, G):
    """Lower Cholesky factor, or ``None`` when NumPy finds ``G`` not positive definite.

    CuPy does not check (no device sync): a failure leaves NaNs, found at the end of the run.
    """
    if xp is np:
        try:
            return np.linalg.cholesky(G)
        except np.linalg.LinAlgError:
            return None
    return xp.linalg.cholesky(G)


def _cholqr_pass(xp, y, shift_factor):
    """One Cholesky-QR pass with the Gram matrix in high precision and a diagonal shift.

    ``Q = Y R^-1`` spans ``range(Y)`` whatever the shift; the shift (``shift_factor`` times
    ``trace(Y^H Y)``, the shifted CholeskyQR of Fukaya et al. 2020) keeps ``R`` invertible for
    numerically rank-deficient ``Y`` and bounds ``cond(Q)``.
    """
    hi = high_precision(y.dtype)
    yd = xp.ascontiguousarray(y, dtype=hi)  # C order: NumPy's Gram of an F-ordered block is slow
    g = hermitian(yd) @ yd
    l = g.shape[0]
    if xp is not np:
        from ._cholinv import chol_inverse, max_order
        if l <= max_order(y.dtype):  # one fused kernel instead of ~12 library calls
            return y @ chol_inverse(g, shift_factor, y.dtype)
    eye = xp.eye(l, dtype=hi)
    scale = xp.trace(g).real * shift_factor + np.finfo(hi).tiny
    for attempt in range(3):
        L = _cholesky(xp, g + (scale * 1e3**attempt) * eye)
        if L is not None:
            break
    else:
        return xp.linalg.qr(y)[0]
    rinv = hermitian(_solve_lower(xp, L, eye))
    return y @ rinv.astype(y.dtype, copy=False)


def orthonormalize(xp, y, method="QR", *, passes=1):
    """A basis of ``range(y)`` (``m x l``, ``l <= m``) by ``method`` (see :data:`NORMALIZERS`).

    ``QR`` returns an orthonormal basis; ``CholQR`` one whose orthogonality is ``eps`` after
    two passes; ``LU`` and ``none`` merely well-scaled (for power iterations).
    """
    if method == "QR":
        return xp.linalg.qr(y)[0]
    if method == "none":
        return y
    if method == "LU":
        if xp is np:
            from scipy.linalg import lu
            return lu(y, permute_l=True, check_finite=False)[0]
        from cupyx.scipy.linalg import lu
        return lu(y, permute_l=True)[0]
    m, l = y.shape
    eps = np.finfo(high_precision(y.dtype)).eps
    for p in range(passes):
        factor = 11.0 * (m * l + l * (l + 1)) * eps if p == 0 else l * eps
        y = _cholqr_pass(xp, y, factor)
    return y


def svd_flip(xp, U, Vh, u_based=False, overwrite=False):
    """Make the largest-magnitude entry of each row of ``Vh`` (or column of ``U`` when
    ``u_based``) real and positive, keeping ``U @ diag(S) @ Vh`` unchanged.

    ``overwrite=True`` lets it scale ``U`` and ``Vh`` in place (device arrays of the caller's
    own: one kernel instead of three).

    Examples
    --------
    >>> U, Vh = np.array([[1.0, 0.0], [0.0, -1.0]]), np.array([[-3.0, 1.0], [1.0, 2.0]])
    >>> U2, Vh2 = svd_flip(np, U, Vh)
    >>> Vh2[0].tolist(), U2[:, 0].tolist(), np.allclose(U2 @ Vh2, U @ Vh)
    ([3.0, -1.0], [-1.0, -0.0], True)
    """
    rows = hermitian(U).conj() if u_based else Vh
    if rows.shape[0] == 0 or rows.shape[1] == 0:
        return U, Vh
    if xp is not np and rows.dtype in _ritz.TYPES and U.dtype == rows.dtype == Vh.dtype:
        if overwrite:  # one kernel: signs, and both factors scaled in place
            _ritz.flip_signs(rows, Vh if u_based else hermitian(U))
            return U, Vh
        sign = _ritz.flip_signs(rows)
        return U * sign[None, :], Vh * sign[:, None]
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
