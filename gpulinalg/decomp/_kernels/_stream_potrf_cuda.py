"""The streamed Cholesky factorization: stacks of medium matrices, one thread block per matrix,
in one launch. Not yet run on a GPU: no row of the route table takes it (its tests force it).

``gl_small_potrf`` (:mod:`._fused_cuda`) holds its matrix in registers, so it stops at order
128. Above, cuSOLVER ``potrfBatched`` launches a chain of kernels per call (46 over
64 x 256^2) whose host time, not its arithmetic, sets the call's time. ``gl_stream_potrf``
factors each matrix left-looking in panels of 32 columns, the factor itself (in ``w``, L2
resident for these sizes) serving as its working storage:

1. the panel's columns below the diagonal get ``C = S - L[:, :k0] L[k0:k0+32, :k0]^H``, a
   product tiled through shared memory (64 rows by 32 columns at a time);
2. one warp factors the panel's 32 x 32 diagonal block in shared memory and stops the block
   at the first pivot that is not positive (or not finite), with ``potrf``'s codes;
3. every thread solves one row below the block against it (``L = C L_kk^-H``).

Its arguments, codes and summary are ``gl_small_potrf``'s, so the engine's plans serve both;
SciPy's ``check_finite`` of the whole matrix is flagged into the summary by the flat
finiteness kernel before the launch. It never factors in place: a failed matrix's factor is
left half written. Part of decomp's internal layer: CuPy arrays in, on the dispatcher's
stream.
"""

import numpy as np

from ..._runtime.kernels import raw_kernel
from ._fused_cuda import COMMON, flag_before, strides_of
from ._scalars_cuda import KERNEL_TYPES

__all__ = ["fits", "launch_args", "potrf", "MAX_ORDER"]

#: Largest order (the product's work grows as n^3 in one block; past this the library's
#: multi-block routines are the better bet), and the dtypes: the tiles of complex128 would not
#: fit in static shared memory.
MAX_ORDER = 1024
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64))
_THREADS = 256

_SOURCE = COMMON + r"""
// s = a (lower) or a^H (upper): its lower triangle is factored, s = L L^H. L(i, j) lives in w
// at (i, j) (lower) or, conjugated, at (j, i) (upper): the layout of gl_small_potrf's output.
#define GP 32
#define RC 64
#define NT 256
__device__ __forceinline__ T gl_s(const T* a, int i, int j, long long sr, long long sc,
                                  int lower) {
    return lower ? a[i * sr + j * sc] : gl_cj(a[j * sr + i * sc]);
}
__device__ __forceinline__ T gl_lget(const T* w, int i, int j, long long sr, long long sc,
                                     int lower) {
    return lower ? w[i * sr + j * sc] : gl_cj(w[j * sr + i * sc]);
}
__device__ __forceinline__ void gl_lset(T* w, int i, int j, long long sr, long long sc,
                                        int lower, T v) {
    if (lower) w[i * sr + j * sc] = v; else w[j * sr + i * sc] = gl_cj(v);
}
extern "C" __global__ void __launch_bounds__(NT)
gl_stream_potrf(const T* __restrict__ a, T* __restrict__ w,
                unsigned long long* __restrict__ summ, const int n,
                const long long nb, const long long sab, const long long sar,
                const long long sac, const long long swb, const long long swr,
                const long long swc, const int lower, const int clean,
                const int nonfinite) {
    __shared__ T lj[GP][GP + 1];   // conj(L(k0 + jj, t0 + tt))
    __shared__ T li[RC][GP + 1];   // L(r0 + rr, t0 + tt)
    __shared__ T dg[GP][GP + 1];   // the diagonal block, factored in place
    __shared__ int scode;
    const long long b = blockIdx.x;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const T* src = a + b * sab;
    T* dst = w + b * swb;
    // L(i, j) = w[i * lr + j * lc] (conjugated when !lower); its faster axis decides how a tile
    // is read: consecutive threads along the axis of the smaller stride
    const long long lr = lower ? swr : swc, lc = lower ? swc : swr;
    const bool jfast = llabs(lc) < llabs(lr);
    if (t == 0) scode = 0;
    int code = 0;
    for (int k0 = 0; k0 < n; k0 += GP) {
        const int pw = min(GP, n - k0);
        // 1. C(i, k0 + jj) = s(i, k0 + jj) - sum_{t < k0} L(i, t) conj(L(k0 + jj, t)), i >= k0 + jj
        for (int r0 = k0; r0 < n; r0 += RC) {
            T acc[RC / 8];
#pragma unroll
            for (int q = 0; q < RC / 8; ++q) acc[q] = T(0);
            for (int t0 = 0; t0 < k0; t0 += GP) {
                const int tl = min(GP, k0 - t0);
                for (int e = t; e < GP * GP; e += NT) {
                    const int x = e & (GP - 1), y = e / GP;
                    const int jj = jfast ? y : x, tt = jfast ? x : y;
                    lj[jj][tt] = (jj < pw && tt < tl)
                        ? gl_cj(gl_lget(dst, k0 + jj, t0 + tt, swr, swc, lower)) : T(0);
                }
                for (int e = t; e < RC * GP; e += NT) {
                    const int rr = jfast ? e / GP : e % RC, tt = jfast ? (e & (GP - 1)) : e / RC;
                    li[rr][tt] = (r0 + rr < n && tt < tl)
                        ? gl_lget(dst, r0 + rr, t0 + tt, swr, swc, lower) : T(0);
                }
                __syncthreads();
                for (int tt = 0; tt < tl; ++tt) {
                    const T v = lj[lane][tt];
#pragma unroll
                    for (int q = 0; q < RC / 8; ++q) acc[q] += li[warp + 8 * q][tt] * v;
                }
                __syncthreads();
            }
#pragma unroll
            for (int q = 0; q < RC / 8; ++q) {
                const int i = r0 + warp + 8 * q, j = k0 + lane;
                if (i < n && lane < pw && i >= j)
                    gl_lset(dst, i, j, swr, swc, lower, gl_s(src, i, j, sar, sac, lower) - acc[q]);
            }
        }
        __syncthreads();
        // 2. the diagonal block: one warp, the rows on the lanes
        if (warp == 0) {
            const int r = lane;
            for (int c = 0; c < GP; ++c)
                dg[r][c] = (r < pw && c <= r) ? gl_lget(dst, k0 + r, k0 + c, swr, swc, lower)
                                              : T(0);
            __syncwarp();
            for (int j = 0; j < pw; ++j) {
                const R d = gl_re(dg[j][j]);  // the same value in every lane: one branch
                if (!(d > R(0)) || !isfinite(d)) {
                    code = isfinite(d) ? k0 + j + 1 : nonfinite + k0 + j;
                    break;
                }
                const R l = sqrt(d);
                __syncwarp();
                if (r == j) dg[j][j] = T(l);
                if (r > j && r < pw) dg[r][j] = dg[r][j] * (R(1) / l);
                __syncwarp();
                if (r > j && r < pw) {
                    const T lr = dg[r][j];
                    for (int c = j + 1; c <= r; ++c) dg[r][c] -= lr * gl_cj(dg[c][j]);
                }
                __syncwarp();
            }
            if (lane == 0) scode = code;
            if (code == 0 && r < pw) {
                for (int c = 0; c <= r; ++c) gl_lset(dst, k0 + r, k0 + c, swr, swc, lower, dg[r][c]);
            }
        }
        __syncthreads();
        code = scode;
        if (code != 0) break;
        // 3. the rows below the block: L(i, k0:k0+pw) L_kk^H = C(i, k0:k0+pw)
        for (int i = k0 + pw + t; i < n; i += NT) {
            T x[GP];
#pragma unroll
            for (int jj = 0; jj < GP; ++jj)
                x[jj] = jj < pw ? gl_lget(dst, i, k0 + jj, swr, swc, lower) : T(0);
#pragma unroll
            for (int jj = 0; jj < GP; ++jj) {
                if (jj < pw) {
                    T v = x[jj];
#pragma unroll
                    for (int tt = 0; tt < jj; ++tt) v -= x[tt] * gl_cj(dg[jj][tt]);
                    x[jj] = v * (R(1) / gl_re(dg[jj][jj]));
                }
            }
#pragma unroll
            for (int jj = 0; jj < GP; ++jj)
                if (jj < pw) gl_lset(dst, i, k0 + jj, swr, swc, lower, x[jj]);
        }
        __syncthreads();
    }
    if (t == 0) {
        const unsigned long long packed = ((unsigned long long)b << 32) | (unsigned int)code;
        gl_summary(summ, 0ULL, (code != 0 && code < nonfinite) ? packed : GL_NONE, 0,
                   code >= nonfinite ? packed : GL_NONE, (unsigned long long)nb);
    }
    if (code != 0) return;  // the engine raises
    // the other triangle of w: zero (cholesky) or a's entries (cho_factor), in w's memory order
    const bool wcol = llabs(swr) < llabs(swc);
    const int nn = n * n;
    for (int e = t; e < nn; e += NT) {
        const int slow = e / n, fast = e - slow * n;
        const int p = wcol ? fast : slow, q = wcol ? slow : fast;
        if (lower ? q > p : p > q) dst[p * swr + q * swc] = clean ? T(0) : src[p * sar + q * sac];
    }
}
"""


def fits(n, dtype):
    """Whether a stack of order ``n`` in ``dtype`` can run the streamed factorization."""
    return 0 < n <= MAX_ORDER and np.dtype(dtype) in _DTYPES


def launch_args(w, n, nb, *views):
    """``(kernel, grid, block, strides)`` of a launch for ``nb`` matrices of order ``n`` into
    the factor ``w``, as :func:`._fused_cuda.launch_args` gives them for ``gl_small_potrf``."""
    t, r = KERNEL_TYPES[np.dtype(w.dtype)]
    kern = raw_kernel("gl_stream_potrf", _SOURCE, {"T": t, "R": r}, options=("--std=c++17",))
    strides = tuple(s for v in views for s in strides_of(v))
    return kern, (nb,), (_THREADS,), strides


def potrf(a3, w, summ, lower, clean, nonfinite, finite=False):
    """:func:`._fused_cuda.potrf`'s factorization (same arguments and summary; ``w`` must not
    be ``a3``) by the streamed kernel, after the flat finiteness check of ``a3`` when
    ``finite``. No synchronization."""
    nb, n = a3.shape[0], a3.shape[-1]
    if finite:
        flag_before(a3, summ)
    kern, grid, block, st = launch_args(w, n, nb, a3, w)
    kern(grid, block, (a3, w, summ, np.int32(n), np.int64(nb), *st, np.int32(bool(lower)),
                       np.int32(bool(clean)), np.int32(nonfinite)))
