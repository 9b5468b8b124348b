"""The CPU engine of the low-rank methods (NumPy/SciPy): :data:`ENGINE`.

Its Gaussian generator computes, in NumPy, the numbers the CUDA kernel of ``_sketch_cuda``
computes on the GPU (splitmix64 of a counter, then Box-Muller; entries ``2p`` and ``2p + 1``
share the pair ``p``), so a seed gives the same sketch on both.
"""

import numpy as np

from ._lowrank_engine import Engine
from .._tiles._tiles_xp import complex_gaussian

__all__ = ["ENGINE", "gaussian_real"]

_K = [np.uint64(k) for k in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)]


def _mix(z, tmp):
    """splitmix64's finalizer, in place on uint64 ``z`` (``tmp``: scratch of the same shape)."""
    z += _K[0]
    for shift, mult in ((30, _K[1]), (27, _K[2])):
        np.right_shift(z, np.uint64(shift), out=tmp)
        z ^= tmp
        z *= mult
    np.right_shift(z, np.uint64(31), out=tmp)
    z ^= tmp
    return z


def _uniform(z, tmp, u, plus_one):
    """Uniform doubles into ``u`` from the counters ``z`` (consumed)."""
    _mix(z, tmp)
    z >>= np.uint64(11)
    np.copyto(u, z.view(np.int64), casting="unsafe")  # < 2**53: exact, faster than from uint64
    if plus_one:
        u += 1.0
    u *= 2.0**-53


#: Pairs of numbers made per block (the scratch stays in the CPU's cache).
BLOCK_PAIRS = 1 << 14


def gaussian_real(shape, dtype, seed):
    """Standard normal ``shape`` array of the real ``dtype`` from the 64-bit ``seed``."""
    seed = np.uint64(seed)
    size = int(np.prod(shape))
    pairs = (size + 1) // 2
    out = np.empty((pairs, 2), dtype)
    b = max(min(BLOCK_PAIRS, pairs), 1)
    even = np.arange(b, dtype=np.uint64)
    even <<= np.uint64(1)
    c, tmp = np.empty(b, np.uint64), np.empty(b, np.uint64)
    r, t, w = np.empty(b), np.empty(b), np.empty(b)
    with np.errstate(over="ignore"):
        for start in range(0, pairs, b):
            n = min(b, pairs - start)
            for u, step, plus_one in ((r, 0, True), (t, 1, False)):
                np.add(even[:n], np.uint64(2 * start), out=c[:n])
                c[:n] ^= seed
                c[:n] += np.uint64(step)
                _uniform(c[:n], tmp[:n], u[:n], plus_one)
            rn, tn, wn = r[:n], t[:n], w[:n]
            np.log(rn, out=rn)
            rn *= -2.0
            np.sqrt(rn, out=rn)
            tn *= 2 * np.pi
            # the products are rounded once, from float64, as the CUDA kernel rounds them
            np.multiply(rn, np.cos(tn, out=wn), out=out[start:start + n, 0], casting="same_kind")
            np.multiply(rn, np.sin(tn, out=wn), out=out[start:start + n, 1], casting="same_kind")
    return out.reshape(-1)[:size].reshape(shape)


def _same(x):
    return x


def _svd(a):
    from scipy.linalg import svd
    return svd(a, full_matrices=False, check_finite=False)


def _cholesky(g):
    try:
        return np.linalg.cholesky(g)
    except np.linalg.LinAlgError:
        return None


def _solve_lower(L, B):
    from scipy.linalg import solve_triangular
    return solve_triangular(L, B, lower=True, check_finite=False)


def _lu(y):
    from scipy.linalg import lu
    return lu(y, permute_l=True, check_finite=False)[0]


def _no_kernel(*args):
    return None


#: Entries squared in float64 at a time by :func:`sum_squares` (a cache-sized panel).
SQUARES_PANEL_ENTRIES = 1 << 18


def sum_squares(x):
    """The sum of the float64 squares of the 2-D ``x``'s entries, in row panels: no float64
    copy of the whole matrix."""
    rows = max(1, SQUARES_PANEL_ENTRIES // max(x.shape[1], 1))
    total = 0.0
    for start in range(0, x.shape[0], rows):
        panel = x[start:start + rows].astype(np.float64)
        panel *= panel
        total += panel.sum()
    return np.float64(total)


#: The CPU engine.
ENGINE = Engine(xp=np, auto_normalizer="LU", gaussian_real=gaussian_real, to_host=_same,
                from_host=_same, svd=_svd, cholesky=_cholesky, solve_lower=_solve_lower, lu=_lu,
                chol_inverse=_no_kernel, flip_signs=_no_kernel, lift=_no_kernel,
                contiguous_products=True, sum_squares=sum_squares)


def tile_gaussian(shape, dtype, seed):
    """Dask tile task: standard normal block (complex: circular, unit variance) from the 64-bit
    ``seed``."""
    return complex_gaussian(gaussian_real, shape, dtype, seed)
