"""The GPU engine of the low-rank methods (CuPy, and the kernels of ``_cholinv_cuda`` and
``_ritz_cuda``): :func:`engine`.

The Gaussian sketch is one ``ElementwiseKernel``: splitmix64 of a counter, then Box-Muller
(entries ``2p`` and ``2p + 1`` share the pair ``p``), the numbers ``_sketch_host`` computes in
NumPy.
"""

import numpy as np

from ..._runtime.kernels import elementwise_kernel, kernel_source
from .._gpu._blas_cuda import gram as _gram
from .._kernels import _cholinv_cuda, _policy_cuda, _ritz_cuda
from ._lowrank_engine import Engine
from ..._runtime.streams import op_stream
from .._tiles._tiles_xp import complex_gaussian

__all__ = ["engine", "gaussian_real"]

_GAUSS_PREAMBLE = kernel_source(__package__, "gaussian_preamble.cu")
_GAUSS_BODY = r"""
unsigned long long c = seed ^ (((unsigned long long)i >> 1) << 1);
double u1 = ((double)(gl_mix(c) >> 11) + 1.0) * 1.1102230246251565e-16;
double u2 = (double)(gl_mix(c + 1ull) >> 11) * 1.1102230246251565e-16;
double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
z = (T)((i & 1) ? r * sin(t) : r * cos(t));
"""


def gaussian_real(shape, dtype, seed):
    """Standard normal ``shape`` CuPy array of the real ``dtype`` from the 64-bit ``seed``."""
    import cupy
    out = cupy.empty(shape, dtype=dtype)
    elementwise_kernel("uint64 seed", "T z", _GAUSS_BODY, "gl_gaussian",
                       preamble=_GAUSS_PREAMBLE)(np.uint64(seed), out)
    return out


def _get(x):
    return x.get()


def _svd(a):
    import cupy
    return cupy.linalg.svd(a, full_matrices=False)


def _cholesky(g):
    import cupy
    return cupy.linalg.cholesky(g)  # no check (no sync): a failure leaves NaNs


def _solve_lower(L, B):
    from cupyx.scipy.linalg import solve_triangular
    return solve_triangular(L, B, lower=True)


def _lu(y):
    from cupyx.scipy.linalg import lu
    return lu(y, permute_l=True)[0]


def _chol_inverse(g, shift_factor, dtype):
    """One fused kernel instead of ~12 library calls, where the factor fits in shared memory
    (``None``: the library calls)."""
    if _policy_cuda.enabled() and g.shape[0] <= _cholinv_cuda.max_order(dtype):
        return _cholinv_cuda.chol_inverse(g, shift_factor, dtype)
    return None


def _flip_signs(U, Vh, rows, u_based, overwrite):
    """The sign kernel for real factors of one dtype (``None`` for the others, and where
    the kernels are off)."""
    if _policy_cuda.enabled() and rows.dtype in _ritz_cuda.TYPES and \
            U.dtype == rows.dtype == Vh.dtype:
        if overwrite:  # one kernel: signs, and both factors scaled in place
            _ritz_cuda.flip_signs(rows, Vh if u_based else U.T)
            return U, Vh
        sign = _ritz_cuda.flip_signs(rows)
        return U * sign[None, :], Vh * sign[:, None]
    return None


def _lift(q, btd, packed, k):
    """The one-kernel lift for real ``q`` when ``[W; W / sigma; sigma]`` fits and the kernels
    are on (else ``None``)."""
    if _policy_cuda.enabled() and q.dtype in _ritz_cuda.TYPES and \
            packed.nbytes <= _ritz_cuda.MAX_W_BYTES:
        import cupy
        return _ritz_cuda.lift(cupy.ascontiguousarray(q), btd, packed, k)
    return None


_made = (None, None)  # (the cupy module it was made for, the engine)


def engine():
    """The GPU :class:`~gpulinalg.decomp.lowrank._lowrank_engine.Engine` (made once per ``cupy``
    module)."""
    global _made
    import cupy
    made_for, eng = _made
    if made_for is not cupy:
        eng = Engine(xp=cupy, auto_normalizer="CholQR", gaussian_real=gaussian_real,
                     to_host=_get, from_host=cupy.asarray, svd=_svd, cholesky=_cholesky,
                     solve_lower=_solve_lower, lu=_lu, chol_inverse=_chol_inverse,
                     flip_signs=_flip_signs, lift=_lift, gram=_gram)
        _made = (cupy, eng)
    return eng


def tile_gaussian(shape, dtype, seed):
    """Dask tile task: standard normal CuPy block (complex: circular, unit variance) from the 64-bit
    ``seed``: the numbers :func:`._sketch_host.tile_gaussian` gives for the same seed."""
    with op_stream():
        return complex_gaussian(gaussian_real, shape, dtype, seed)
