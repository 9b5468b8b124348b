"""Fused kernels for stacks of small matrices: a whole Cholesky call, or a whole triangular
solve, in one launch per stack.

On stacks of small matrices (order <= 64) the batched library routines are latency bound and
every extra launch shows: the working copy, ``potrfBatched``, the scan of the factor's
diagonal, the finiteness flag, the pointer arrays, two ``trsmBatched`` calls and the reductions
of the conditioning rule cost several times the arithmetic. Here one thread block holds one
matrix in shared memory and does everything on it in one pass over the input:

``gl_small_potrf``
    reads the triangle ``potrf`` would read, flags NaN or Inf anywhere in the matrix (SciPy's
    ``check_finite``), factors it (right-looking, the pivots kept until a final scaling), and
    writes the factor with the other triangle zero (``cholesky``) or ``a``'s entries
    (``cho_factor``). Its codes are ``potrf``'s (``k + 1``: leading minor ``k + 1`` not
    positive) plus :data:`._cholesky_cuda.NONFINITE` ``+ k`` for a pivot that is NaN or Inf.
``gl_small_trsm``
    solves with a triangular matrix (``solve_triangular``) or with a Cholesky factor and its
    conjugate transpose (``cho_solve``), and writes the figures of the conditioning rule of
    :mod:`._triangular_xp` and the finiteness flags of both inputs in the same pass.

Both write one small per-matrix record that the engine reads back once: the call's only
synchronization. Part of decomp's internal layer: CuPy arrays in, on the dispatcher's stream.
"""

import numpy as np

from .._runtime.kernels import raw_kernel
from ._finite_cuda import FINITE_PREAMBLE

__all__ = ["SIZES", "fits", "potrf", "trsm", "FIG_HEAD"]

#: The compiled orders: a stack of order ``n`` runs the smallest one that holds it.
SIZES = (8, 16, 32, 64)
#: Right-hand sides solved at a time (a chunk of columns in shared memory).
RHS_CHUNK = 16
#: Largest order per dtype: the matrix and a chunk of right-hand sides in 48 KiB of static
#: shared memory.
MAX_ORDER = {np.dtype(np.float32): 64, np.dtype(np.float64): 64,
             np.dtype(np.complex64): 64, np.dtype(np.complex128): 32}
#: Leading entries of a ``gl_small_trsm`` record: max|a_ii|, min|a_ii|, first i with
#: a_ii == 0 (-1: none), a holds NaN/Inf, b holds NaN/Inf; then k maxima of |b| per column
#: and k maxima of |x| per column.
FIG_HEAD = 5

_TYPES = {np.dtype(np.float32): ("float", "float"), np.dtype(np.float64): ("double", "double"),
          np.dtype(np.complex64): ("complex<float>", "float"),
          np.dtype(np.complex128): ("complex<double>", "double")}

_COMMON = FINITE_PREAMBLE + r"""
__device__ __forceinline__ float gl_re(float x) { return x; }
__device__ __forceinline__ double gl_re(double x) { return x; }
__device__ __forceinline__ float gl_re(complex<float> x) { return x.real(); }
__device__ __forceinline__ double gl_re(complex<double> x) { return x.real(); }
__device__ __forceinline__ float gl_cj(float x) { return x; }
__device__ __forceinline__ double gl_cj(double x) { return x; }
__device__ __forceinline__ complex<float> gl_cj(complex<float> x) { return conj(x); }
__device__ __forceinline__ complex<double> gl_cj(complex<double> x) { return conj(x); }
__device__ __forceinline__ double gl_mag(float x) { return fabs((double)x); }
__device__ __forceinline__ double gl_mag(double x) { return fabs(x); }
__device__ __forceinline__ double gl_mag(complex<float> x) { return (double)abs(x); }
__device__ __forceinline__ double gl_mag(complex<double> x) { return abs(x); }
// NaN sticks, as in NumPy's max and min (and the figures kernel of _triangular_cuda).
__device__ __forceinline__ double gl_max(double a, double b) { return (isnan(a) || a >= b) ? a : b; }
__device__ __forceinline__ double gl_min(double a, double b) { return (isnan(a) || a <= b) ? a : b; }
#define LD (NB + 1)
// Entry e of a sweep over an n x n matrix with element strides (sr, sc): consecutive e (the
// lanes of a warp) run along the axis of the smaller stride, so loads and stores coalesce in
// either layout.
__device__ __forceinline__ void gl_entry(const int e, const int n, const long long sr,
                                         const long long sc, int& p, int& q) {
    const int slow = e / n, fast = e - slow * n;
    const bool colmajor = (sr < 0 ? -sr : sr) < (sc < 0 ? -sc : sc);
    p = colmajor ? fast : slow;
    q = colmajor ? slow : fast;
}
"""

_POTRF_SOURCE = _COMMON + r"""
// One block per matrix; in the update, threads (tx, ty) of a (bx, by) block sweep rows by ty
// and columns by tx.
// a, w: (nb, n, n) with element strides (batch, row, column). info[b]: the code of matrix b;
// info[nb + b]: 1 when matrix b holds NaN or Inf anywhere.
extern "C" __global__ void gl_small_potrf(const T* __restrict__ a, T* __restrict__ w,
                                          int* __restrict__ info, const int n,
                                          const long long nb, const long long sab,
                                          const long long sar, const long long sac,
                                          const long long swb, const long long swr,
                                          const long long swc, const int lower,
                                          const int clean, const int nonfinite) {
    __shared__ T s[NB * LD];
    __shared__ int bad;
    const long long b = blockIdx.x;
    const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
    if (tx == 0 && ty == 0) bad = 0;
    __syncthreads();
    const T* src = a + b * sab;
    T* dst = w + b * swb;
    const int t = ty * bx + tx, nt = bx * by;
    int mine = 0;
    for (int e = t; e < n * n; e += nt) {
        int p, q;
        gl_entry(e, n, sar, sac, p, q);
        const T v = src[p * sar + q * sac];
        if (!gl_fin(v)) mine = 1;
        if (lower ? (p >= q) : (p <= q)) {      // the triangle potrf reads
            if (lower) s[p * LD + q] = v; else s[q * LD + p] = gl_cj(v);
        }
    }
    if (mine) bad = 1;
    __syncthreads();
    // s[i][k] (i > k) holds l_ik * sqrt(d_k) until the final scaling; s[k][k] holds d_k.
    int code = 0;
    for (int k = 0; k < n; ++k) {
        const R d = gl_re(s[k * LD + k]);       // the same value in every thread: one branch
        if (!(d > R(0)) || !isfinite(d)) {
            code = isfinite(d) ? k + 1 : nonfinite + k;
            break;
        }
        const R inv = R(1) / d;
        for (int i = k + 1 + ty; i < n; i += by) {
            const T lik = s[i * LD + k] * inv;
            for (int j = k + 1 + tx; j <= i; j += bx) {
                s[i * LD + j] -= lik * gl_cj(s[j * LD + k]);
            }
        }
        __syncthreads();
    }
    if (tx == 0 && ty == 0) {
        info[b] = code;
        info[nb + b] = bad;
    }
    if (code != 0) return;  // the engine raises: nothing is written (in place: a is intact)
    for (int e = t; e < n * n; e += nt) {
        int p, q;
        gl_entry(e, n, swr, swc, p, q);
        if (lower ? (p >= q) : (p <= q)) {
            const int i = lower ? p : q, j = lower ? q : p;  // l_ij, i >= j
            const R r = sqrt(gl_re(s[j * LD + j]));
            const T v = (i == j) ? T(r) : s[i * LD + j] * (R(1) / r);
            dst[p * swr + q * swc] = lower ? v : gl_cj(v);
        } else {  // the other triangle: zero, or a's entries (the same thread read them)
            dst[p * swr + q * swc] = clean ? T(0) : src[p * sar + q * sac];
        }
    }
}
"""

_TRSM_SOURCE = _COMMON + r"""
// One block per matrix: m(i, j) = op(a)(i, j) for i >= j, the lower triangular matrix
// loaded in shared memory (tr: m(i, j) = a(j, i); cj: conjugated). mode 0: x = m^-1 b;
// mode 1: x = m^-H b; mode 2: x = m^-H m^-1 b (cho_solve with m = L). unit: unit diagonal.
// fig (per matrix, FIG_HEAD + 2k doubles): max|a_ii|, min|a_ii|, first zero a_ii (-1: none),
// a holds NaN/Inf, b holds NaN/Inf, max_i |b_ic| (k), max_i |x_ic| (k).
// x[i][c] holds the residual b_i - sum_j m_ij x_j until its own step (one barrier a step).
extern "C" __global__ void gl_small_trsm(const T* __restrict__ a, const T* __restrict__ bm,
                                         T* __restrict__ x, double* __restrict__ fig,
                                         const int n, const int k,
                                         const long long sab, const long long sar,
                                         const long long sac, const long long sbb,
                                         const long long sbr, const long long sbc,
                                         const long long sxb, const long long sxr,
                                         const long long sxc, const int tr, const int cj,
                                         const int mode, const int unit) {
    __shared__ T m[NB * LD];
    __shared__ T dinv[NB];
    __shared__ T xs[KB * NB];
    __shared__ int bada, badb;
    const long long b = blockIdx.x;
    const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
    const int t = ty * bx + tx;
    if (t == 0) { bada = 0; badb = 0; }
    __syncthreads();
    const T* src = a + b * sab;
    double* f = fig + b * (5 + 2 * (long long)k);
    int mine = 0;
    for (int e = t; e < n * n; e += bx * by) {
        int p, q;
        gl_entry(e, n, sar, sac, p, q);
        const T v = src[p * sar + q * sac];
        if (!gl_fin(v)) mine = 1;
        const int i = tr ? q : p, j = tr ? p : q;
        if (i >= j) m[i * LD + j] = cj ? gl_cj(v) : v;
    }
    if (mine) bada = 1;
    __syncthreads();
    if (t == 0) {
        double dmax = 0.0, dmin = __longlong_as_double(0x7ff0000000000000LL);  // +inf
        int zero = -1;
        for (int i = 0; i < n; ++i) {
            const double v = gl_mag(m[i * LD + i]);
            dmax = gl_max(dmax, v);
            dmin = gl_min(dmin, v);
            if (v == 0.0 && zero < 0) zero = i;
        }
        f[0] = dmax; f[1] = dmin; f[2] = (double)zero; f[3] = (double)bada;
    }
    for (int i = t; i < n; i += bx * by) dinv[i] = unit ? T(1) : T(1) / m[i * LD + i];
    mine = 0;
    for (int c0 = 0; c0 < k; c0 += KB) {
        const int kc = k - c0 < KB ? k - c0 : KB;
        __syncthreads();  // dinv ready; the last chunk's xs fully written out
        for (int c = ty; c < kc; c += by) {
            for (int i = tx; i < n; i += bx) {
                const T v = bm[b * sbb + i * sbr + (c0 + c) * sbc];
                if (!gl_fin(v)) mine = 1;
                xs[c * NB + i] = v;
            }
        }
        __syncthreads();
        if (t < kc) {
            double mx = 0.0;
            for (int i = 0; i < n; ++i) mx = gl_max(mx, gl_mag(xs[t * NB + i]));
            f[5 + c0 + t] = mx;
        }
        __syncthreads();  // the maxima of b read before the solve writes over it
        if (mode != 1) {  // forward: m x = r
            for (int j = 0; j < n; ++j) {
                for (int c = ty; c < kc; c += by) {
                    const T xj = xs[c * NB + j] * dinv[j];
                    for (int i = j + 1 + tx; i < n; i += bx) xs[c * NB + i] -= m[i * LD + j] * xj;
                }
                __syncthreads();
            }
            for (int c = ty; c < kc; c += by) {
                for (int i = tx; i < n; i += bx) xs[c * NB + i] *= dinv[i];
            }
            __syncthreads();
        }
        if (mode != 0) {  // backward: m^H x = r, row i of m^H is column i of m conjugated
            for (int j = n - 1; j >= 0; --j) {
                for (int c = ty; c < kc; c += by) {
                    const T xj = xs[c * NB + j] * gl_cj(dinv[j]);
                    for (int i = tx; i < j; i += bx) xs[c * NB + i] -= gl_cj(m[j * LD + i]) * xj;
                }
                __syncthreads();
            }
            for (int c = ty; c < kc; c += by) {
                for (int i = tx; i < n; i += bx) xs[c * NB + i] *= gl_cj(dinv[i]);
            }
            __syncthreads();
        }
        for (int c = ty; c < kc; c += by) {
            for (int i = tx; i < n; i += bx) x[b * sxb + i * sxr + (c0 + c) * sxc] = xs[c * NB + i];
        }
        if (t < kc) {
            double mx = 0.0;
            for (int i = 0; i < n; ++i) mx = gl_max(mx, gl_mag(xs[t * NB + i]));
            f[5 + k + c0 + t] = mx;
        }
    }
    if (mine) badb = 1;
    __syncthreads();
    if (t == 0) f[4] = (double)badb;
}
"""


def fits(n, dtype):
    """Whether a stack of order ``n`` and ``dtype`` has a fused kernel."""
    return 0 < n <= MAX_ORDER.get(np.dtype(dtype), 0)


def _order_class(n):
    for size in SIZES:
        if n <= size:
            return size
    raise ValueError(f"no fused kernel for order {n}")


def _block(nb_class):
    """Threads ``(bx, by)``: columns by ``bx`` (a warp's width or the order), rows by ``by``."""
    bx = min(32, nb_class)
    return bx, max(1, min(nb_class, 256 // bx))


def _kernel(name, source, dtype, size):
    t, r = _TYPES[np.dtype(dtype)]
    return raw_kernel(name, source, {"T": t, "R": r},
                      options=("--std=c++17", f"-DNB={size}", f"-DKB={RHS_CHUNK}"))


def _strides(x):
    item = x.itemsize
    return tuple(np.int64(s // item) for s in x.strides)


def potrf(a3, w, info, lower, clean, nonfinite):
    """Factor every matrix of ``a3`` (``(B, n, n)``, any strides) into ``w`` (same shape, any
    strides, not overlapping ``a3``): the ``lower`` factor, or the upper one (``a = U^H U``)
    in the upper triangle; the other triangle zero (``clean``) or ``a3``'s. ``info`` (int32,
    ``2 B``): codes (0, ``k + 1``, or ``nonfinite + k``) and per-matrix NaN/Inf flags. One
    launch, no synchronization."""
    nb, n = a3.shape[0], a3.shape[-1]
    size = _order_class(n)
    kern = _kernel("gl_small_potrf", _POTRF_SOURCE, w.dtype, size)
    kern((nb,), _block(size), (a3, w, info, np.int32(n), np.int64(nb), *_strides(a3),
                               *_strides(w), np.int32(bool(lower)), np.int32(bool(clean)),
                               np.int32(nonfinite)))


def trsm(a3, b3, x, fig, tr, cj, mode, unit):
    """Solve every matrix of a stack (see the kernel's comment): ``a3`` (B, n, n), ``b3`` and
    ``x`` (B, n, k), any strides (``b3`` may broadcast: stride 0); ``fig`` float64
    (B, FIG_HEAD + 2 k). One launch, no synchronization."""
    nb, n, k = x.shape
    size = _order_class(n)
    kern = _kernel("gl_small_trsm", _TRSM_SOURCE, x.dtype, size)
    kern((nb,), _block(size), (a3, b3, x, fig, np.int32(n), np.int32(k), *_strides(a3),
                               *_strides(b3), *_strides(x), np.int32(bool(tr)),
                               np.int32(bool(cj)), np.int32(mode), np.int32(bool(unit))))
