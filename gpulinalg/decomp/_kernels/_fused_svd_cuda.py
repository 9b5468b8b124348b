"""Fused kernel for stacks of small SVDs: singular values (and vectors) of every matrix in one
launch.

On stacks of small matrices the library route is cuSOLVER's ``gesvdjBatched``, then a sign
kernel and a read-back of one ``info`` code per matrix. Here one thread block holds one matrix
(``m, n <= 64``; 32 for complex128) in shared memory and does the whole call on it:

``gl_small_svd``
    reads the matrix (coalesced along its axis of smaller stride) as ``W`` (``big x k``, the
    matrix or, when wide, its conjugate transpose), flags NaN or Inf (such a matrix gets NaN
    in all its results and no Jacobi), scales it by a power of two so that its largest entry
    is in [1/2, 1) (exact), and runs one-sided Jacobi (Hestenes) on W's columns: sweeps of
    ``k - 1`` rounds (the round-robin order, ``k / 2`` disjoint pairs at once, one barrier a
    round). Double types: float64 (complex128) throughout, a segment of ``MB`` lanes per pair,
    one row a lane. Single types: W, V and the rotations in single precision (half the shared
    memory, float32 FMAs), the Gram entries ``w_p^H w_p``, ``w_q^H w_q``, ``w_p^H w_q`` (exact
    products) and ``zeta`` in float64, the angle from ``zeta`` in float32; a segment of
    ``MB / 4`` lanes per pair, 4 consecutive rows a lane (one 16-byte shared load per column),
    so a warp handles 4 pairs (the angle's divisions and square roots shared by 4 times fewer
    warps). A pair is rotated when ``|w_p^H w_q| > tol ||w_p|| ||w_q||`` (``tol``:
    :func:`tolerance`), and the sweep loop stops
    after a sweep without a rotation or after ``max_sweeps`` (the matrix is then flagged not
    converged). The rotations are accumulated into V when vectors are asked for. Then
    ``s_j = ||w_j||`` (sorted descending, ties by index), ``u_j = w_j / s_j``; columns of
    ``s_j = 0`` and, for ``full_matrices``, the ``big - k`` further columns of the big side
    are completed to an orthonormal basis (one warp: the unit vector ``e_i`` of the row least
    covered by the basis so far, Gram-Schmidt twice). Signs as :func:`._svd_xp.flip_signs`
    (the largest-magnitude entry of each of the first ``k`` rows of Vh, in the dtype's
    precision, first one on ties, made real positive; U's column takes the same phase).

Every block folds its figures into one **summary** (3 words read back, as in
:mod:`._fused_cuda`): the OR of flags (:data:`NONFINITE`, :data:`NOT_CONVERGED`), the most
sweeps any matrix took, and the first matrix that did not converge (``b << 32 | sweeps``).
Part of decomp's internal layer: CuPy arrays in, on the dispatcher's stream.
"""

import numpy as np

from ..._runtime.kernels import kernel_source, raw_kernel
from .._checks import real_dtype
from .._gpu._cusolver_cuda import raise_not_converged
from .._gpu._finite_cuda import FINITE_PREAMBLE, raise_nonfinite
from .._results import SVDResult
from ._scalars_cuda import (KERNEL_TYPES, SCALAR_PREAMBLE, SUMMARY_PREAMBLE, size_class,
                            summary_buffer)

__all__ = ["SIZES", "MAX_ORDER", "TOL_FACTOR", "MAX_SWEEPS", "NONFINITE", "NOT_CONVERGED",
           "NONE", "fits", "launch_args", "svd", "summary", "tolerance"]

#: The compiled row classes: a stack whose larger dimension is ``big`` runs the smallest one.
SIZES = (8, 16, 32, 64)
#: Largest ``max(m, n)`` (complex128: :data:`MAX_ORDER_C128`, W and V in 48 KiB).
MAX_ORDER = 64
MAX_ORDER_C128 = 32
#: A pair of columns is rotated while ``|w_p^H w_q| > TOL_FACTOR eps ||w_p|| ||w_q||``.
TOL_FACTOR = 4.0
#: Sweeps before a matrix is declared not converged (gesvdj's default cap is 100).
MAX_SWEEPS = 100
#: Summary flags: some matrix held NaN or Inf; some matrix did not converge.
NONFINITE, NOT_CONVERGED = 1, 2
#: "No matrix": the identity of the packed first-failure word.
NONE = (1 << 64) - 1

#: dtype -> (element type ``T``, its real type ``R``).
_TYPES = dict(KERNEL_TYPES)
#: How the single types run: ``"single"`` (columns, V and the rotations in single precision,
#: the Gram entries and ``zeta`` in float64; 4 rows a lane). The benchmark's A/B rows also
#: time ``"wide"`` (float64 columns and rotations, 4 rows a lane) and ``"double"`` (the double
#: types' path: float64, 1 row a lane).
_SINGLE_MODE = "single"


def _layout(dtype):
    """``(T, C, R, D, rows a lane, single)``: element type, storage and rotation type, real
    type, type of the Gram entries, rows per lane in the sweeps, single-precision angle."""
    t, r = _TYPES[np.dtype(dtype)]
    wide = "complex<double>" if r != t else "double"
    mode = _SINGLE_MODE if r == "float" else "double"
    single = mode == "single"
    return t, t if single else wide, r, wide, 1 if mode == "double" else 4, single

_SOURCE = (FINITE_PREAMBLE + SCALAR_PREAMBLE + SUMMARY_PREAMBLE
           + kernel_source(__package__, "small_svd_helpers.cu"))

_KERNEL = kernel_source(__package__, "small_svd.cu")


def fits(n, dtype):
    """Whether a stack whose larger dimension is ``n`` has a fused SVD kernel in ``dtype``."""
    if np.dtype(dtype) not in _TYPES:
        return False
    return 0 < n <= (MAX_ORDER_C128 if np.dtype(dtype) == np.complex128 else MAX_ORDER)


def rows_per_lane(dtype, size):
    """Rows a lane holds in the sweeps for row class ``size``: the dtype's (:func:`_layout`)
    up to 32; 4 at 64 (a segment of 16 lanes a pair: 512 threads for 32 pairs)."""
    return 4 if size > 32 else _layout(dtype)[4]


def _spec(dtype, size):
    """``(types, options)`` of the kernel for ``dtype`` and row class ``size``."""
    t, c, r, d, _, single = _layout(dtype)
    rows = rows_per_lane(dtype, size)
    item = 8 * (1 + (r != t)) // (1 + single)
    wide_rows = rows > 1 and not single and size <= 32  # the A/B "wide" mode: 256 (ptxas)
    return {"T": t, "C": c, "R": r, "D": d}, (
        "--std=c++17", f"-DMB={size}", f"-DRPL={rows}", f"-DGS_SINGLE={int(single)}",
        f"-DGS_ALIGN={min(16, rows * item)}", f"-DMAX_THREADS={256 if wide_rows else 512}")


def _item(dtype):
    """Bytes of the kernel's storage type ``C``."""
    t, _, r, _, _, single = _layout(dtype)
    return 8 * (1 + (r != t)) // (1 + single)


def _kernel(dtype, size):
    types, options = _spec(dtype, size)
    most = size * 2 * size * _item(dtype)  # W and V at their widest
    return raw_kernel("gl_small_svd", _PRELUDE + _SOURCE + _KERNEL, types, options=options,
                      shared_bytes=most if most > 48 * 1024 else None)


def tolerance(dtype, big):
    """The rotation threshold: ``TOL_FACTOR`` eps of the dtype; in single precision (rotations
    rounded to float32) ``max(TOL_FACTOR, sqrt(big))`` eps, as LAPACK's ``sgesvj``
    (``sqrt(m)`` eps), so that the rounding of a rotation does not call for another."""
    eps = float(np.finfo(dtype).eps)
    if _layout(dtype)[5]:
        return max(TOL_FACTOR, float(np.sqrt(big))) * eps
    return TOL_FACTOR * eps


#: NaN of the element type; "zero" singular values (below it: the column is completed).
_PRELUDE = kernel_source(__package__, "small_svd_prelude.cu")


def launch_args(dtype, m, n, uc, vr):
    """``(kernel, block, shared bytes, wc)`` of a launch for ``m x n`` matrices: a segment of
    ``MB / rows`` lanes per pair of columns (``ceil(k / 2)`` pairs), W and V of the storage
    type in dynamic shared memory (``wc``: W's columns)."""
    size = size_class(max(m, n), SIZES, "SVD")
    k = min(m, n)
    kp = k + (k & 1)
    wc = max(kp, uc if m >= n else vr)
    threads = 32 * max(1, -(-(kp // 2) * (size // rows_per_lane(dtype, size)) // 32))
    return _kernel(dtype, size), (threads,), size * (wc + kp) * _item(dtype), wc


def _strides(x, used=True):
    """``x``'s strides in elements; three zeros for an output not written (``used`` false:
    ``x`` stands in for it, and the kernel takes three strides whatever ``x``'s rank)."""
    if not used:
        return (np.int64(0),) * 3
    return tuple(np.int64(s // x.itemsize) for s in x.strides)


def summary(cupy, device):
    """``(buffer, totals)``: the calling thread's summary buffer on ``device`` (identities: no
    sweep, no failed matrix) and the view of its 3 read-back words
    (:func:`._scalars_cuda.summary_buffer`)."""
    return summary_buffer(cupy, "svd", device, 0, NONE)


def svd(a, full_matrices, compute_uv, dtype, finite=False):
    """SVD of the CuPy stack ``a`` (..., m, n), ``max(m, n) <= 64``, in one launch and one
    read-back of the summary: ``SVDResult(U, S, Vh)`` with :func:`._svd_xp.flip_signs`'s
    signs, or ``S`` alone. ``finite``: raise SciPy's ``check_finite`` error when some matrix
    holds NaN or Inf (else those matrices get NaN results). Raises ``LinAlgError`` naming the
    first matrix that did not converge in :data:`MAX_SWEEPS` sweeps."""
    import cupy
    m, n = a.shape[-2:]
    k, big = min(m, n), max(m, n)
    batch = tuple(a.shape[:-2])
    nb = int(np.prod(batch, dtype=np.int64))
    a3 = (a if a.dtype == dtype else a.astype(dtype)).reshape(nb, m, n)
    s = cupy.empty((nb, k), dtype=real_dtype(dtype))
    uc = (m if full_matrices else k) if compute_uv else 0
    vr = (n if full_matrices else k) if compute_uv else 0
    u = cupy.empty((nb, uc, m), dtype=dtype).transpose(0, 2, 1) if uc else s
    vh = cupy.empty((nb, vr, n), dtype=dtype) if vr else s
    kern, block, shared, wc = launch_args(dtype, m, n, uc, vr)
    buf, totals = summary(cupy, a3.data.device_id)
    tol = tolerance(dtype, big)
    kern((nb,), block, (a3, u, s, vh, buf, np.int32(m), np.int32(n), np.int32(uc), np.int32(vr),
                        np.int32(wc), np.float64(tol), np.int32(MAX_SWEEPS), *_strides(a3),
                        *_strides(u, uc), _strides(s)[0], *_strides(vh, vr)),
         shared_mem=shared)
    flags, sweeps, first = (int(x) for x in totals.get())  # the only synchronization
    if flags & NONFINITE and finite:
        raise_nonfinite("a")
    if flags & NOT_CONVERGED:
        codes = np.zeros((first >> 32) + 1, dtype=np.int64)
        codes[-1] = first & 0xFFFFFFFF
        raise_not_converged(codes, "svd (fused Jacobi)")
    from ..._runtime import dispatch as _dispatch
    _dispatch.note(fused=True, sweeps=sweeps)
    s = s.reshape(batch + (k,))
    if not compute_uv:
        return s
    return SVDResult(u.reshape(batch + (m, uc)), s, vh.reshape(batch + (vr, n)))
