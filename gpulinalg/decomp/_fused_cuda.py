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
    conjugate transpose (``cho_solve``), and works out the conditioning rule of
    :mod:`._triangular_xp` and the finiteness flags of both inputs in the same pass.

Neither writes a per-matrix record: every block folds its figures into one small **summary**
(:func:`summary`, 3 words) by atomics, so the engine reads back 24 bytes whatever the stack:

* ``gl_small_potrf``: NaN/Inf flag; the first matrix (lowest index) whose minor failed and its
  code, packed as ``index << 32 | code``; the same for the first NaN/Inf pivot;
* ``gl_small_trsm``: flags (``a`` holds NaN/Inf: 1, ``b``: 2, a zero on the diagonal: 4) and
  the bound ``cond`` of the rule (``max`` over the stack of ``max(diag_bound, rhs_bound)``,
  NaN sticky, as :func:`._triangular_xp.judge` takes it), as the bits of a float64 (the bits
  of non-negative doubles order as the doubles, NaN above everything).

The summary lives in a per-thread buffer: the last block of a launch (a ticket counter) moves
the totals to the read-back slots and puts the identities back, so no launch is spent zeroing
it. The host work of a clean call is one read-back of 3 words and a few float operations.
Part of decomp's internal layer: CuPy arrays in, on the dispatcher's stream.
"""

import threading

import numpy as np

from .._runtime.kernels import raw_kernel
from ._finite_cuda import FINITE_PREAMBLE

__all__ = ["SIZES", "fits", "potrf", "trsm", "launch_args", "summary", "as_float", "NONE",
           "A_BAD", "B_BAD", "ZERO_DIAGONAL"]

#: The compiled orders: a stack of order ``n`` runs the smallest one that holds it.
SIZES = (8, 16, 32, 64)
#: Right-hand sides solved at a time (a chunk of columns in shared memory).
RHS_CHUNK = 16
#: Largest order per dtype: the matrix and a chunk of right-hand sides in 48 KiB of static
#: shared memory.
MAX_ORDER = {np.dtype(np.float32): 64, np.dtype(np.float64): 64,
             np.dtype(np.complex64): 64, np.dtype(np.complex128): 32}
#: "No matrix": the identity of the packed first-failure words of ``gl_small_potrf``.
NONE = (1 << 64) - 1
#: Flags of the ``gl_small_trsm`` summary.
A_BAD, B_BAD, ZERO_DIAGONAL = 1, 2, 4
#: Identities of summary words 1 and 2 (the slots the atomics fold into).
_IDENTITY = {"potrf": (NONE, NONE), "trsm": (0, NONE)}

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
#define GL_NONE 0xffffffffffffffffULL
// Fold one block's figures into the summary acc[0..2] (0: OR of flags; 1: max (max1) or min;
// 2: min); the last block to arrive (acc[3] counts them) moves the totals to acc[4..6] and puts
// the identities back for the next launch. Called by one thread per block, once.
__device__ void gl_summary(unsigned long long* acc, const unsigned long long flags,
                           const unsigned long long v1, const int max1,
                           const unsigned long long v2, const unsigned long long nblocks) {
    const unsigned long long id1 = max1 ? 0ULL : GL_NONE;
    if (flags) atomicOr(&acc[0], flags);
    if (v1 != id1) { if (max1) atomicMax(&acc[1], v1); else atomicMin(&acc[1], v1); }
    if (v2 != GL_NONE) atomicMin(&acc[2], v2);
    __threadfence();
    if (atomicAdd(&acc[3], 1ULL) == nblocks - 1) {
        __threadfence();
        acc[4] = atomicExch(&acc[0], 0ULL);
        acc[5] = atomicExch(&acc[1], id1);
        acc[6] = atomicExch(&acc[2], GL_NONE);
        atomicExch(&acc[3], 0ULL);
    }
}
// A non-negative double (or NaN) as bits that order as the values, NaN above +inf.
__device__ __forceinline__ unsigned long long gl_order_bits(const double v) {
    return isnan(v) ? 0x7ff8000000000000ULL : (unsigned long long)__double_as_longlong(fabs(v));
}
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
// a, w: (nb, n, n) with element strides (batch, row, column). summ: the summary (see the
// module docstring): bit 0 of word 0: some matrix holds NaN or Inf anywhere; word 1: the
// first matrix whose minor failed (b << 32 | code), word 2: the first NaN/Inf pivot.
extern "C" __global__ void gl_small_potrf(const T* __restrict__ a, T* __restrict__ w,
                                          unsigned long long* __restrict__ summ, const int n,
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
        const unsigned long long packed = ((unsigned long long)b << 32) | (unsigned int)code;
        gl_summary(summ, (unsigned long long)bad,
                   (code != 0 && code < nonfinite) ? packed : GL_NONE, 0,
                   code >= nonfinite ? packed : GL_NONE, (unsigned long long)nb);
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
// The rule of _triangular_xp per matrix, in float64: d = |m_ii| (1 with unit), s_c = max_i
// |b_ic|, x_c = max_i |x_ic|; diag = max d / (min d > 0 ? min d : 1), rhs_c = max d *
// (s_c > 0 ? x_c / s_c : 0) (squared: diag^2 and (max d)^2 * ratio); the block's bound
// max(diag, rhs_c...) (NaN sticky) and its flags go to the summary when summarize.
// x[i][c] holds the residual b_i - sum_j m_ij x_j until its own step (one barrier a step).
extern "C" __global__ void gl_small_trsm(const T* __restrict__ a, const T* __restrict__ bm,
                                         T* __restrict__ x,
                                         unsigned long long* __restrict__ summ,
                                         const int n, const int k,
                                         const long long sab, const long long sar,
                                         const long long sac, const long long sbb,
                                         const long long sbr, const long long sbc,
                                         const long long sxb, const long long sxr,
                                         const long long sxc, const int tr, const int cj,
                                         const int mode, const int unit, const int squared,
                                         const int summarize) {
    __shared__ T m[NB * LD];
    __shared__ T dinv[NB];
    __shared__ T xs[KB * NB];
    __shared__ double scale[KB], rhs[KB];
    __shared__ double sdmax, bound;
    __shared__ int bada, badb, zero;
    const long long b = blockIdx.x;
    const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
    const int t = ty * bx + tx;
    if (t == 0) { bada = 0; badb = 0; }
    __syncthreads();
    const T* src = a + b * sab;
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
        int z = -1;
        if (unit) {
            dmax = 1.0; dmin = 1.0;
        } else {
            for (int i = 0; i < n; ++i) {
                const double v = gl_mag(m[i * LD + i]);
                dmax = gl_max(dmax, v);
                dmin = gl_min(dmin, v);
                if (v == 0.0 && z < 0) z = i;
            }
        }
        double diag = dmax / (dmin > 0.0 ? dmin : 1.0);
        if (squared) diag = diag * diag;
        sdmax = dmax; bound = diag; zero = z;
    }
    for (int i = t; i < n; i += bx * by) dinv[i] = unit ? T(1) : T(1) / m[i * LD + i];
    mine = 0;
    for (int c0 = 0; c0 < k; c0 += KB) {
        const int kc = k - c0 < KB ? k - c0 : KB;
        __syncthreads();  // dinv, sdmax ready; the last chunk's xs fully written out
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
            scale[t] = mx;
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
            const double s = scale[t];
            const double ratio = s > 0.0 ? mx / s : 0.0;
            rhs[t] = squared ? (sdmax * sdmax) * ratio : sdmax * ratio;
        }
        __syncthreads();
        if (t == 0) {
            double bd = bound;
            for (int c = 0; c < kc; ++c) bd = gl_max(bd, rhs[c]);
            bound = bd;
        }
    }
    if (mine) badb = 1;
    __syncthreads();
    if (t == 0 && summarize) {
        const unsigned long long flags = (bada ? 1ULL : 0ULL) | (badb ? 2ULL : 0ULL)
                                         | (zero >= 0 ? 4ULL : 0ULL);
        gl_summary(summ, flags, gl_order_bits(bound), 1, GL_NONE, (unsigned long long)gridDim.x);
    }
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


def launch_args(name, x, n, size_of, *views):
    """``(kernel, grid, block, strides)`` of a launch of ``name`` (``"gl_small_potrf"`` or
    ``"gl_small_trsm"``) in the dtype of ``x`` for ``size_of`` matrices of order ``n``: the
    element strides of the ``(B, p, q)`` ``views`` flattened (what an engine keeps per layout,
    so that a repeat launches with its arrays and these)."""
    size = _order_class(n)
    source = _POTRF_SOURCE if name == "gl_small_potrf" else _TRSM_SOURCE
    kern = _kernel(name, source, x.dtype, size)
    strides = tuple(s for v in views for s in _strides(v))
    return kern, (size_of,), _block(size), strides


def potrf(a3, w, summ, lower, clean, nonfinite):
    """Factor every matrix of ``a3`` (``(B, n, n)``, any strides) into ``w`` (same shape, any
    strides, not overlapping ``a3``, or ``a3`` itself): the ``lower`` factor, or the upper one
    (``a = U^H U``) in the upper triangle; the other triangle zero (``clean``) or ``a3``'s.
    ``summ``: the buffer of :func:`summary` ``("potrf")``. One launch, no synchronization."""
    nb, n = a3.shape[0], a3.shape[-1]
    kern, grid, block, st = launch_args("gl_small_potrf", w, n, nb, a3, w)
    kern(grid, block, (a3, w, summ, np.int32(n), np.int64(nb), *st, np.int32(bool(lower)),
                       np.int32(bool(clean)), np.int32(nonfinite)))


def trsm(a3, b3, x, summ, tr, cj, mode, unit, squared, summarize):
    """Solve every matrix of a stack (see the kernel's comment): ``a3`` (B, n, n), ``b3`` and
    ``x`` (B, n, k), any strides (``b3`` may broadcast: stride 0); ``summ``: the buffer of
    :func:`summary` ``("trsm")``, written when ``summarize``. One launch, no synchronization."""
    nb, n, k = x.shape
    kern, grid, block, st = launch_args("gl_small_trsm", x, n, nb, a3, b3, x)
    kern(grid, block, (a3, b3, x, summ, np.int32(n), np.int32(k), *st, np.int32(bool(tr)),
                       np.int32(bool(cj)), np.int32(mode), np.int32(bool(unit)),
                       np.int32(bool(squared)), np.int32(bool(summarize))))


class _Buffers(threading.local):
    def __init__(self):
        self.by_key = {}


_buffers = _Buffers()


def summary(cupy, kind, device):
    """``(buffer, totals)``: the calling thread's summary buffer of ``kind`` (``"potrf"`` or
    ``"trsm"``) on ``device`` (8 uint64 words, made once with the identities in place) and
    the view of its 3 read-back words. A call reads the totals back before it returns, so one
    buffer per thread serves all its launches."""
    got = _buffers.by_key.get((kind, device))
    if got is None or got[0] is not cupy:
        id1, id2 = _IDENTITY[kind]
        buf = cupy.asarray(np.array([0, id1, id2, 0, 0, id1, id2, 0], dtype=np.uint64))
        got = (cupy, buf, buf[4:7])
        _buffers.by_key[(kind, device)] = got
    return got[1], got[2]


def as_float(word):
    """The float64 whose bits are the uint64 ``word`` (the bound of a ``trsm`` summary)."""
    return float(np.array([word], dtype=np.uint64).view(np.float64)[0])
