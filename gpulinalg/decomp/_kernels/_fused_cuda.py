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

import numpy as np

from ..._runtime.kernels import raw_kernel
from .._gpu._finite_cuda import FINITE_PREAMBLE, flag_nonfinite
from ._scalars_cuda import (KERNEL_TYPES, SCALAR_PREAMBLE, SUMMARY_PREAMBLE, size_class,
                            summary_buffer)

__all__ = ["SIZES", "TILE", "tile", "fits", "potrf", "trsm", "checks", "launch_args", "summary",
           "as_float", "strides_of", "flag_before", "COMMON", "NONE", "A_BAD", "B_BAD",
           "ZERO_DIAGONAL"]

#: The compiled orders per op: a stack of order ``n`` runs the smallest one that holds it.
SIZES = {"potrf": (8, 16, 32, 64, 128), "trsm": (8, 16, 32, 64)}
#: ``potrf``: the register tile of one thread per (order, dtype char): its side ``TS`` (the
#: block is ``(NB / TS)^2`` threads), or ``(TS, M)``: ask the compiler for ``M`` resident blocks
#: per multiprocessor (``__launch_bounds__``; fewer registers a thread). Set from the kernel
#: rows of ``benchmarks.decomp_batched`` (``--sections kernels``); see :func:`tile`.
TILE = {(size, kind): ts for size, ts in {8: 2, 16: 2, 32: 4, 64: 4, 128: 8}.items()
        for kind in "fdFD"}
# order 128 in float64: TS 4 (1024 threads, 64 registers) took 0.320 ms a call against TS 8's
# 0.363 at 512 x 128^2 on the H200 (kernel rows, 21:08 UTC); float32: TS 8 0.209, TS 4 0.230
TILE[(128, "d")] = 4
#: Largest order per op and dtype. ``potrf`` holds the matrix in registers (128^2 complex128
#: would spill); ``trsm`` holds it in 48 KiB of static shared memory.
MAX_ORDER = {
    "potrf": {np.dtype(np.float32): 128, np.dtype(np.float64): 128,
              np.dtype(np.complex64): 128, np.dtype(np.complex128): 64},
    "trsm": {np.dtype(np.float32): 64, np.dtype(np.float64): 64,
             np.dtype(np.complex64): 64, np.dtype(np.complex128): 32}}
#: "No matrix": the identity of the packed first-failure words of ``gl_small_potrf``.
NONE = (1 << 64) - 1
#: Flags of the ``gl_small_trsm`` summary.
A_BAD, B_BAD, ZERO_DIAGONAL = 1, 2, 4
#: Identities of summary words 1 and 2 (the slots the atomics fold into).
_IDENTITY = {"potrf": (NONE, NONE), "trsm": (0, NONE)}

_TYPES = KERNEL_TYPES

#: The preambles of the fused kernels (also of :mod:`._stream_trsm_cuda`'s).
COMMON = FINITE_PREAMBLE + SCALAR_PREAMBLE + SUMMARY_PREAMBLE + r"""
#define LD (NB + 1)
// A non-negative double (or NaN) as bits that order as the values, NaN above +inf.
__device__ __forceinline__ unsigned long long gl_order_bits(const double v) {
    return isnan(v) ? 0x7ff8000000000000ULL : (unsigned long long)__double_as_longlong(fabs(v));
}
"""

_POTRF_SOURCE = COMMON + r"""
// The block is G x G threads (G = NB / TS); thread (ti, tj) holds the TS x TS tile of rows
// ti*TS.. and columns tj*TS.. of the working matrix s (s = a with lower, else a^H, so that
// s's lower triangle is the one factored) in registers for the whole call: the matrix never
// sits in shared memory. Right-looking, the pivots d_k kept until a final scaling: step k
// reads column k of s from a shared buffer (double buffered: one barrier a step) and
// updates s_ij -= (s_ik / d_k) conj(s_jk) for j > k; the owners of column k + 1 publish it.
// Tiles above the diagonal keep a's entries of the other triangle (written back as they
// were, or zero); tiles left of the current tile column are final and skip the update.
// Consecutive threads run along a's axis of smaller stride (coalescing).
// a, w: (nb, n, n) with element strides (batch, row, column). summ: the summary (see the
// module docstring): bit 0 of word 0: some matrix holds NaN or Inf anywhere; word 1: the
// first matrix whose minor failed (b << 32 | code), word 2: the first NaN/Inf pivot.
#define G (NB / TS)
extern "C" __global__ void __launch_bounds__(G * G, MINB)
gl_small_potrf(const T* __restrict__ a, T* __restrict__ w,
               unsigned long long* __restrict__ summ, const int n,
               const long long nb, const long long sab,
               const long long sar, const long long sac,
               const long long swb, const long long swr,
               const long long swc, const int lower,
               const int clean, const int nonfinite) {
    __shared__ T col[2][NB];
    __shared__ R piv[NB];
    const long long b = blockIdx.x;
    const int t = threadIdx.x;
    const bool colmajor = (sar < 0 ? -sar : sar) < (sac < 0 ? -sac : sac);
    const bool fast_i = colmajor == (lower != 0);  // a's fast axis runs along s's rows
    const int ti = fast_i ? t % G : t / G, tj = fast_i ? t / G : t % G;
    const T* src = a + b * sab;
    T* dst = w + b * swb;
    T s[TS][TS];
    int mine = 0;
#pragma unroll
    for (int u = 0; u < TS; ++u) {
#pragma unroll
        for (int v = 0; v < TS; ++v) {
            const int i = ti * TS + u, j = tj * TS + v;
            s[u][v] = (i < n && j < n) ? (lower ? src[i * sar + j * sac] : src[j * sar + i * sac])
                                       : T(0);
        }
    }
#pragma unroll
    for (int u = 0; u < TS; ++u) {
#pragma unroll
        for (int v = 0; v < TS; ++v) {
            if (!gl_fin(s[u][v])) mine = 1;
            if (!lower && ti * TS + u >= tj * TS + v) s[u][v] = gl_cj(s[u][v]);
        }
    }
    if (tj == 0) {
#pragma unroll
        for (int u = 0; u < TS; ++u) {
            if (ti * TS + u < n) col[0][ti * TS + u] = s[u][0];
        }
    }
    const int bad = __syncthreads_or(mine);
    int code = 0;
    for (int k0 = 0; k0 < n && code == 0; k0 += TS) {
        const int tk = k0 / TS;
#pragma unroll
        for (int kk = 0; kk < TS; ++kk) {
            const int k = k0 + kk;
            if (k >= n) break;
            const T* c = col[k & 1];
            const R d = gl_re(c[k]);            // the same value in every thread: one branch
            if (!(d > R(0)) || !isfinite(d)) {
                code = isfinite(d) ? k + 1 : nonfinite + k;
                break;
            }
            if (t == 0) piv[k] = d;
            if (ti >= tj && tj >= tk) {  // tiles left of tile column tk are final: idle
                const R inv = R(1) / d;
                T ci[TS], cv[TS];
#pragma unroll
                for (int u = 0; u < TS; ++u) ci[u] = c[ti * TS + u] * inv;
#pragma unroll
                for (int v = 0; v < TS; ++v) cv[v] = gl_cj(c[tj * TS + v]);
#pragma unroll
                for (int v = 0; v < TS; ++v) {
                    if (tj * TS + v > k) {
#pragma unroll
                        for (int u = 0; u < TS; ++u) {
                            if (ti > tj || u >= v) s[u][v] -= ci[u] * cv[v];
                        }
                    }
                }
                // column k + 1 of s: tile column tn, entry vn of the tile
                const int tn = (kk + 1 == TS) ? tk + 1 : tk;
                if (tj == tn) {
#pragma unroll
                    for (int u = 0; u < TS; ++u) {
                        const int i = ti * TS + u;
                        if (i > k && i < n) col[(k + 1) & 1][i] = s[u][(kk + 1) % TS];
                    }
                }
            }
            __syncthreads();
        }
    }
    if (t == 0) {
        const unsigned long long packed = ((unsigned long long)b << 32) | (unsigned int)code;
        gl_summary(summ, (unsigned long long)bad,
                   (code != 0 && code < nonfinite) ? packed : GL_NONE, 0,
                   code >= nonfinite ? packed : GL_NONE, (unsigned long long)nb);
    }
    if (code != 0) return;  // the engine raises: nothing is written (in place: a is intact)
#pragma unroll
    for (int u = 0; u < TS; ++u) {
#pragma unroll
        for (int v = 0; v < TS; ++v) {
            const int i = ti * TS + u, j = tj * TS + v;  // s_ij: a_ij (lower) or a_ji
            if (i < n && j < n) {
                T val;
                if (i >= j) {
                    const R r = sqrt(piv[j]);
                    const T l = (i == j) ? T(r) : s[u][v] * (R(1) / r);
                    val = lower ? l : gl_cj(l);
                } else {  // the other triangle: zero, or a's entry (read by this thread)
                    val = clean ? T(0) : s[u][v];
                }
                if (lower) dst[i * swr + j * swc] = val; else dst[j * swr + i * swc] = val;
            }
        }
    }
}
"""

_TRSM_SOURCE = COMMON + r"""
// One block of W warps per matrix: m(i, j) = op(a)(i, j) for i >= j, the lower triangular
// matrix, in shared memory (tr: m(i, j) = a(j, i); cj: conjugated). mode 0: x = m^-1 b;
// mode 1: x = m^-H b; mode 2: x = m^-H m^-1 b (cho_solve with m = L). unit: unit diagonal.
// A right-hand side is solved by a segment of SEG = min(NB, 32) lanes, lane l holding rows
// l, l + SEG, ... in registers; a step broadcasts the solved entry by a shuffle, so the
// substitutions take no barrier. Warps take the columns in turn.
// The rule of _triangular_xp per matrix, in float64: d = |m_ii| (1 with unit), s_c = max_i
// |b_ic|, x_c = max_i |x_ic|; diag = max d / (min d > 0 ? min d : 1), rhs_c = max d *
// (s_c > 0 ? x_c / s_c : 0) (squared: diag^2 and (max d)^2 * ratio); the block's bound
// max(diag, rhs_c...) (NaN sticky) and its flags go to the summary. checks: bit 0: summarize;
// bit 1: read (and flag) the whole of a (SciPy's check_finite), else its triangle only.
#define SEG (NB < 32 ? NB : 32)
#define RPL (NB / SEG)
#define UNR 8
#define FULL 0xffffffffu
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
                                         const int checks) {
    __shared__ T m[NB * LD];
    __shared__ double wbound[32];
    const long long b = blockIdx.x;
    const int t = threadIdx.x, nt = blockDim.x;
    const int lane = t & 31, warp = t >> 5, nwarps = nt >> 5;
    const int whole = checks & 2;
    const T* src = a + b * sab;
    const bool colmajor = (sar < 0 ? -sar : sar) < (sac < 0 ? -sac : sac);
    int mine = 0;
    for (int e0 = t; e0 < NB * NB; e0 += UNR * nt) {
        T v[UNR];
#pragma unroll
        for (int u = 0; u < UNR; ++u) {  // all loads first: UNR in flight per thread
            const int e = e0 + u * nt;
            const int slow = e / NB, fast = e % NB;
            const int p = colmajor ? fast : slow, q = colmajor ? slow : fast;
            const bool used = tr ? q >= p : p >= q;
            v[u] = (e < NB * NB && p < n && q < n && (whole || used)) ? src[p * sar + q * sac]
                                                                       : T(0);
        }
#pragma unroll
        for (int u = 0; u < UNR; ++u) {
            const int e = e0 + u * nt;
            const int slow = e / NB, fast = e % NB;
            const int p = colmajor ? fast : slow, q = colmajor ? slow : fast;
            if (e < NB * NB && p < n && q < n) {
                if (!gl_fin(v[u])) mine = 1;  // entries not read are zero: finite
                const int i = tr ? q : p, j = tr ? p : q;
                if (i >= j) m[i * LD + j] = cj ? gl_cj(v[u]) : v[u];
            }
        }
    }
    const int abad = __syncthreads_or(mine);
    // the figures of the diagonal: every warp works out the same (no barrier)
    double dmax = 0.0, dmin = __longlong_as_double(0x7ff0000000000000LL);  // +inf
    int z = 0x7fffffff;
    for (int i = lane; i < n; i += 32) {
        const double v = gl_mag(m[i * LD + i]);
        dmax = gl_max(dmax, v);
        dmin = gl_min(dmin, v);
        if (v == 0.0 && i < z) z = i;
    }
    for (int h = 16; h > 0; h >>= 1) {
        dmax = gl_max(dmax, __shfl_xor_sync(FULL, dmax, h));
        dmin = gl_min(dmin, __shfl_xor_sync(FULL, dmin, h));
        const int zo = __shfl_xor_sync(FULL, z, h);
        z = zo < z ? zo : z;
    }
    if (unit) { dmax = 1.0; dmin = 1.0; z = 0x7fffffff; }
    const double diag1 = dmax / (dmin > 0.0 ? dmin : 1.0);
    const double diag = squared ? diag1 * diag1 : diag1;
    const double dm = squared ? dmax * dmax : dmax;
    const int sl = lane % SEG, seg = lane / SEG, segs = 32 / SEG;
    T dv[RPL];  // 1 / m_ii of the lane's rows
#pragma unroll
    for (int q = 0; q < RPL; ++q) {
        const int i = sl + q * SEG;
        dv[q] = (unit || i >= n) ? T(1) : T(1) / m[i * LD + i];
    }
    double bnd = 0.0;
    int minb = 0;
    for (int c0 = warp * segs; c0 < k; c0 += nwarps * segs) {  // the same in the whole warp
        const int c = c0 + seg;
        const bool on = c < k;
        T xr[RPL];
        double sc = 0.0;
#pragma unroll
        for (int q = 0; q < RPL; ++q) {
            const int i = sl + q * SEG;
            xr[q] = T(0);
            if (on && i < n) {
                xr[q] = bm[b * sbb + i * sbr + c * sbc];
                if (!gl_fin(xr[q])) minb = 1;
                sc = gl_max(sc, gl_mag(xr[q]));
            }
        }
        if (mode != 1) {  // forward: m x = r; x_j = r_j / m_jj, then r_i -= m_ij x_j (i > j)
#pragma unroll
            for (int q0 = 0; q0 < RPL; ++q0) {
#pragma unroll
                for (int jj = 0; jj < SEG; ++jj) {
                    const int j = q0 * SEG + jj;
                    if (j < n) {
                        const T xj = gl_shfl(xr[q0] * dv[q0], jj, SEG);
                        if (sl == jj) xr[q0] = xj;
#pragma unroll
                        for (int q = q0; q < RPL; ++q) {
                            const int i = sl + q * SEG;
                            if (i > j && i < n) xr[q] -= m[i * LD + j] * xj;
                        }
                    }
                }
            }
        }
        if (mode != 0) {  // backward: m^H x = r, row i of m^H is column i of m conjugated
#pragma unroll
            for (int q0 = RPL - 1; q0 >= 0; --q0) {
#pragma unroll
                for (int jj = SEG - 1; jj >= 0; --jj) {
                    const int j = q0 * SEG + jj;
                    if (j < n) {
                        const T xj = gl_shfl(xr[q0] * gl_cj(dv[q0]), jj, SEG);
                        if (sl == jj) xr[q0] = xj;
#pragma unroll
                        for (int q = 0; q <= q0; ++q) {
                            const int i = sl + q * SEG;
                            if (i < j) xr[q] -= gl_cj(m[j * LD + i]) * xj;
                        }
                    }
                }
            }
        }
        double mx = 0.0;
#pragma unroll
        for (int q = 0; q < RPL; ++q) {
            const int i = sl + q * SEG;
            if (on && i < n) {
                x[b * sxb + i * sxr + c * sxc] = xr[q];
                mx = gl_max(mx, gl_mag(xr[q]));
            }
        }
        for (int h = SEG / 2; h > 0; h >>= 1) {
            sc = gl_max(sc, __shfl_xor_sync(FULL, sc, h, SEG));
            mx = gl_max(mx, __shfl_xor_sync(FULL, mx, h, SEG));
        }
        if (on) bnd = gl_max(bnd, dm * (sc > 0.0 ? mx / sc : 0.0));
    }
    for (int h = 16; h > 0; h >>= 1) bnd = gl_max(bnd, __shfl_xor_sync(FULL, bnd, h));
    if (lane == 0) wbound[warp] = bnd;
    const int bbad = __syncthreads_or(minb);
    if (t == 0 && (checks & 1)) {
        double bd = diag;
        for (int q = 0; q < nwarps; ++q) bd = gl_max(bd, wbound[q]);
        const unsigned long long flags = (abad ? 1ULL : 0ULL) | (bbad ? 2ULL : 0ULL)
                                         | (z != 0x7fffffff ? 4ULL : 0ULL);
        gl_summary(summ, flags, gl_order_bits(bd), 1, GL_NONE, (unsigned long long)gridDim.x);
    }
}
"""


def fits(n, dtype, op="trsm"):
    """Whether a stack of order ``n`` and ``dtype`` has a fused kernel for ``op`` (``"potrf"``
    or ``"trsm"``)."""
    return 0 < n <= MAX_ORDER[op].get(np.dtype(dtype), 0)


def tile(size, dtype):
    """``(TS, M)`` of the ``potrf`` kernel of order class ``size`` in ``dtype``: the side of a
    thread's register tile and the resident blocks per multiprocessor asked of the compiler
    (``TILE``; ``M`` 1 where it names the side alone)."""
    got = TILE[(size, np.dtype(dtype).char)]
    return (got, 1) if isinstance(got, int) else tuple(got)


def _block(op, size, k=1, dtype=None):
    """Threads of a block: ``G * G`` for ``potrf`` (a tile each), ``32 * W`` for ``trsm`` (a
    warp takes ``32 / min(size, 32)`` right-hand sides at a time; at least one warp per 1024
    entries of the matrix, for the load; at most 8)."""
    if op == "potrf":
        return ((size // tile(size, dtype)[0]) ** 2,)
    per_warp = 32 // min(size, 32)
    return (32 * max(1, min(8, max(-(-k // per_warp), size * size // 1024))),)


def _kernel(name, dtype, size):
    t, r = _TYPES[np.dtype(dtype)]
    if name == "gl_small_potrf":
        ts, minb = tile(size, dtype)
        source, extra = _POTRF_SOURCE, (f"-DTS={ts}", f"-DMINB={minb}")
    else:
        source, extra = _TRSM_SOURCE, ("-DTS=1",)
    return raw_kernel(name, source, {"T": t, "R": r},
                      options=("--std=c++17", f"-DNB={size}", *extra))


def strides_of(x):
    item = x.itemsize
    return tuple(np.int64(s // item) for s in x.strides)


def launch_args(name, x, n, size_of, *views):
    """``(kernel, grid, block, strides)`` of a launch of ``name`` (``"gl_small_potrf"`` or
    ``"gl_small_trsm"``) in the dtype of ``x`` for ``size_of`` matrices of order ``n``
    (``x``: the factor, or the ``(B, n, k)`` solution): the element strides of the
    ``(B, p, q)`` ``views`` flattened (what an engine keeps per layout, so that a repeat
    launches with its arrays and these)."""
    op = "potrf" if name == "gl_small_potrf" else "trsm"
    size = size_class(n, SIZES[op], op)
    kern = _kernel(name, x.dtype, size)
    strides = tuple(s for v in views for s in strides_of(v))
    return kern, (size_of,), _block(op, size, x.shape[-1], x.dtype), strides


def potrf(a3, w, summ, lower, clean, nonfinite):
    """Factor every matrix of ``a3`` (``(B, n, n)``, any strides) into ``w`` (same shape, any
    strides, not overlapping ``a3``, or ``a3`` itself): the ``lower`` factor, or the upper one
    (``a = U^H U``) in the upper triangle; the other triangle zero (``clean``) or ``a3``'s.
    ``summ``: the buffer of :func:`summary` ``("potrf")``. One launch, no synchronization."""
    nb, n = a3.shape[0], a3.shape[-1]
    kern, grid, block, st = launch_args("gl_small_potrf", w, n, nb, a3, w)
    kern(grid, block, (a3, w, summ, np.int32(n), np.int64(nb), *st, np.int32(bool(lower)),
                       np.int32(bool(clean)), np.int32(nonfinite)))


def checks(summarize, finite):
    """The ``checks`` argument of ``gl_small_trsm``: bit 0 ``summarize`` (fold the flags and
    the bound into the summary), bit 1 ``finite`` (read and flag the whole of ``a``, SciPy's
    ``check_finite``; else its triangle only)."""
    return _CHECKS[(1 if summarize else 0) | (2 if finite else 0)]


#: The four ``checks`` arguments, made once (a NumPy scalar costs a microsecond per call).
_CHECKS = tuple(np.int32(v) for v in range(4))


def trsm(a3, b3, x, summ, tr, cj, mode, unit, squared, summarize, finite=False):
    """Solve every matrix of a stack (see the kernel's comment): ``a3`` (B, n, n), ``b3`` and
    ``x`` (B, n, k), any strides (``b3`` may broadcast: stride 0); ``summ``: the buffer of
    :func:`summary` ``("trsm")``, written when ``summarize``; ``finite``: flag NaN or Inf
    anywhere in ``a3`` (else in its triangle only). One launch, no synchronization."""
    nb, n, k = x.shape
    kern, grid, block, st = launch_args("gl_small_trsm", x, n, nb, a3, b3, x)
    kern(grid, block, (a3, b3, x, summ, np.int32(n), np.int32(k), *st, np.int32(bool(tr)),
                       np.int32(bool(cj)), np.int32(mode), np.int32(bool(unit)),
                       np.int32(bool(squared)), checks(summarize, finite)))


def summary(cupy, kind, device, stream=None):
    """``(buffer, totals)``: the calling thread's summary buffer of ``kind`` (``"potrf"`` or
    ``"trsm"``) on ``device`` for the stream ``stream`` (a pointer; default: the current one)
    and the read-back of its 3 words (:func:`._scalars_cuda.summary_buffer`)."""
    return summary_buffer(cupy, kind, device, *_IDENTITY[kind], stream)


def flag_before(a, summ):
    """SciPy's ``check_finite`` of all of ``a`` into the summary ``summ`` before a launch of a
    kernel that reads one triangle only (the streamed ones): the flat finiteness kernel sets
    the accumulating flags word to 1 (a solve's ``A_BAD``, a factorization's NaN/Inf flag)
    when ``a`` holds NaN or Inf. The launch before left that word 0; the kernel's blocks OR
    their flags in after."""
    flag_nonfinite(a, summ[0:1])


def as_float(word):
    """The float64 whose bits are the uint64 ``word`` (the bound of a ``trsm`` summary)."""
    return float(np.array([word], dtype=np.uint64).view(np.float64)[0])
