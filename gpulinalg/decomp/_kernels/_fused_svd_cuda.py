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

from ..._runtime.kernels import raw_kernel
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

_SOURCE = FINITE_PREAMBLE + SCALAR_PREAMBLE + SUMMARY_PREAMBLE + r"""
#define LD MB
#define FULL 0xffffffffu
__device__ __forceinline__ double gs_abs2(double x) { return x * x; }
__device__ __forceinline__ double gs_abs2(complex<double> x) {
    return x.real() * x.real() + x.imag() * x.imag();
}
__device__ __forceinline__ double gs_abs2(float x) { return gs_abs2((double)x); }
__device__ __forceinline__ double gs_abs2(complex<float> x) {
    return gs_abs2(complex<double>(x.real(), x.imag()));
}
// conj(a) b in float64 (exact products for the single types).
__device__ __forceinline__ double gs_dot(double a, double b) { return a * b; }
__device__ __forceinline__ complex<double> gs_dot(complex<double> a, complex<double> b) {
    return conj(a) * b;
}
__device__ __forceinline__ double gs_dot(float a, float b) { return (double)a * (double)b; }
__device__ __forceinline__ complex<double> gs_dot(complex<float> a, complex<float> b) {
    return gs_dot(complex<double>(a.real(), a.imag()), complex<double>(b.real(), b.imag()));
}
// x / s and x * s of a column entry and a float64 scalar, rounded to the storage type once.
__device__ __forceinline__ double gs_div(double x, double s) { return x / s; }
__device__ __forceinline__ complex<double> gs_div(complex<double> x, double s) { return x / s; }
__device__ __forceinline__ float gs_div(float x, double s) { return (float)((double)x / s); }
__device__ __forceinline__ complex<float> gs_div(complex<float> x, double s) {
    return complex<float>((float)((double)x.real() / s), (float)((double)x.imag() / s));
}
__device__ __forceinline__ double gs_mul(double x, double s) { return x * s; }
__device__ __forceinline__ complex<double> gs_mul(complex<double> x, double s) { return x * s; }
__device__ __forceinline__ float gs_mul(float x, double s) { return (float)((double)x * s); }
__device__ __forceinline__ complex<float> gs_mul(complex<float> x, double s) {
    return complex<float>((float)((double)x.real() * s), (float)((double)x.imag() * s));
}
__device__ __forceinline__ float gs_narrow(double x) { return (float)x; }
__device__ __forceinline__ complex<float> gs_narrow(complex<double> x) {
    return complex<float>((float)x.real(), (float)x.imag());
}
// The phase x / |x| of a non-zero x (the sign, for real x).
__device__ __forceinline__ double gs_unit(double x, double g) { return x / g; }
__device__ __forceinline__ complex<double> gs_unit(complex<double> x, double g) { return x / g; }
__device__ __forceinline__ float gs_unit(float x, double g) { return gs_div(x, g); }
__device__ __forceinline__ complex<float> gs_unit(complex<float> x, double g) {
    return gs_div(x, g);
}
// Butterfly sum over segments of w lanes: the same bits in every lane of the segment.
__device__ __forceinline__ double gs_sum(double v, int w) {
    for (int h = w / 2; h > 0; h >>= 1) v += __shfl_xor_sync(FULL, v, h, w);
    return v;
}
__device__ __forceinline__ complex<double> gs_sum(complex<double> v, int w) {
    for (int h = w / 2; h > 0; h >>= 1) v += gl_xor(v, h, w);
    return v;
}
// Output element (i, c) of one of the results, for the store loop: U (what 0), Vh (what 1).
// tall: U = W[:, col(c)] ph(c), Vh = (V[:, perm(c)] ph(c))^H; wide: U = V[:, perm(c)] ph(c),
// Vh = (W[:, col(c)] ph(c))^H. col(c) = perm[c] for c < k, c beyond (completed columns).
__device__ __forceinline__ T gs_out(const C* w, const C* v, const int* perm, const C* ph,
                                    const int k, const int wide, const int what,
                                    const int i, const int c) {
    const int r = what ? i : c, x = what ? c : i;  // x: index into the vector of position r
    const bool wside = (what == 0) != (wide != 0);
    const int col = r < k ? perm[r] : r;
    const C val = (wside ? w[col * LD + x] : v[col * LD + x]) * (r < k ? ph[r] : C(1));
    return T(what ? gl_cj(val) : val);
}
// Write the rows x cols result `what` to dst (strides dr, dc), consecutive threads along the
// axis of smaller stride; NaN everywhere when nan.
__device__ __forceinline__ void gs_store(T* dst, const long long dr, const long long dc,
                                         const int rows, const int cols, const C* w,
                                         const C* v, const int* perm, const C* ph, const int k,
                                         const int wide, const int what, const bool nan,
                                         const int t, const int nt) {
    const bool colmajor = (dr < 0 ? -dr : dr) <= (dc < 0 ? -dc : dc);
    const int total = rows * cols;
    for (int e = t; e < total; e += nt) {
        const int i = colmajor ? e % rows : e / cols, c = colmajor ? e / rows : e % cols;
        dst[i * dr + c * dc] = nan ? T(nan_val()) : gs_out(w, v, perm, ph, k, wide, what, i, c);
    }
}
"""

_KERNEL = r"""
struct __align__(GS_ALIGN) gs_rows { C x[RPL]; };  // a lane's rows of one column
// One block per matrix b of a (m x n, max(m, n) <= MB; element strides sab, sar, sac).
// Results: s (k; strides ssb, 1), u (m x uc: uc = 0 (values only), k or m), vh (vr x n: k or
// n). Dynamic shared memory: W (LD x wc columns of C: wc = max(kp, big-side columns)) then V
// (LD x kp). Block: 32 * ceil(kp / 2 * LP / 32) threads (kp = k rounded up to even; a segment of
// LP = MB / RPL lanes per pair in the sweeps, RPL consecutive rows per lane).
extern "C" __global__ void __launch_bounds__(MAX_THREADS)
gl_small_svd(const T* __restrict__ a, T* __restrict__ u, R* __restrict__ s,
             T* __restrict__ vh, unsigned long long* __restrict__ summ,
             const int m, const int n, const int uc, const int vr, const int wc,
             const double tol, const int max_sweeps,
             const long long sab, const long long sar, const long long sac,
             const long long sub, const long long sur, const long long suc,
             const long long ssb, const long long svb, const long long svr,
             const long long svc) {
    extern __shared__ __align__(16) unsigned char gs_smem[];
    C* w = reinterpret_cast<C*>(gs_smem);
    __shared__ double sv[MB];
    __shared__ int perm[MB];
    __shared__ C ph[MB];
    __shared__ unsigned long long amax;
    const long long b = blockIdx.x;
    const int t = threadIdx.x, nt = blockDim.x, lane = t & 31, warp = t >> 5;
    const int wide = m < n, big = wide ? n : m, k = wide ? m : n, kp = k + (k & 1);
    const int vecs = uc > 0;
    C* v = w + LD * wc;
    for (int e = t; e < LD * (wc + kp); e += nt)  // zero W's padding, V = I
        w[e] = (e >= LD * wc && (e - LD * wc) % LD == (e - LD * wc) / LD) ? C(1) : C(0);
    if (t == 0) amax = 0ULL;
    __syncthreads();
    // Load: W = A (tall) or A^H (wide); the largest part and the finiteness, block-wide.
    const T* src = a + b * sab;
    const bool colmajor = (sar < 0 ? -sar : sar) <= (sac < 0 ? -sac : sac);
    double big_part = 0.0;
    int bad = 0;
    for (int e = t; e < m * n; e += nt) {
        const int i = colmajor ? e % m : e / n, c = colmajor ? e / m : e % n;
        const T x = src[i * sar + c * sac];
        bad |= !gl_fin(x);
        big_part = gl_max(big_part, gl_part(x));
        if (wide) w[i * LD + c] = C(gl_cj(x)); else w[c * LD + i] = C(x);
    }
    for (int h = 16; h > 0; h >>= 1) big_part = gl_max(big_part, __shfl_xor_sync(FULL, big_part, h));
    if (lane == 0 && isfinite(big_part)) atomicMax(&amax, (unsigned long long)__double_as_longlong(big_part));
    bad = __syncthreads_or(bad);
    if (bad) {  // NaN in every result of this matrix, no Jacobi
        for (int e = t; e < k; e += nt) s[b * ssb + e] = R(nan_val());
        if (vecs) {
            gs_store(u + b * sub, sur, suc, m, uc, w, v, perm, ph, k, wide, 0, true, t, nt);
            gs_store(vh + b * svb, svr, svc, vr, n, w, v, perm, ph, k, wide, 1, true, t, nt);
        }
        if (t == 0) gl_summary(summ, 1ULL, 0ULL, 1, GL_NONE, (unsigned long long)gridDim.x);
        return;  // the whole block
    }
    int ex = 0;
    const double top = __longlong_as_double((long long)amax);
    if (top > 0.0) frexp(top, &ex);
    const double down = ldexp(1.0, -ex);
    for (int e = t; e < LD * k; e += nt) w[e] = gs_mul(w[e], down);
    __syncthreads();
    // One-sided Jacobi: round r pairs (kp - 1, r) and ((r + j) % (kp - 1), (r - j) % (kp - 1));
    // segment jp of LP lanes takes pair jp, lane jl rows jl * RPL .. jl * RPL + RPL - 1.
    const int jp = t / LP, jl = t % LP, npairs = kp / 2;
    int sweep = 0, converged = 0;
    while (sweep < max_sweeps && !converged) {
        int rotated = 0;
        for (int r = 0; r < kp - 1; ++r) {
            int p = jp == 0 ? kp - 1 : (r + jp) % (kp - 1);
            int q = jp == 0 ? r : (r - jp + kp - 1) % (kp - 1);
            if (p > q) { const int x = p; p = q; q = x; }
            const bool valid = jp < npairs && q < k;  // the same in the whole segment
            gs_rows wp, wq, vp, vq;
            if (valid) {
                wp = *reinterpret_cast<const gs_rows*>(w + p * LD + jl * RPL);
                wq = *reinterpret_cast<const gs_rows*>(w + q * LD + jl * RPL);
                if (vecs) {
                    vp = *reinterpret_cast<const gs_rows*>(v + p * LD + jl * RPL);
                    vq = *reinterpret_cast<const gs_rows*>(v + q * LD + jl * RPL);
                }
            } else {
#pragma unroll
                for (int j = 0; j < RPL; ++j) wp.x[j] = wq.x[j] = C(0);
            }
            double app = gs_abs2(wp.x[0]), aqq = gs_abs2(wq.x[0]);
            D apq = gs_dot(wp.x[0], wq.x[0]);
#pragma unroll
            for (int j = 1; j < RPL; ++j) {
                app += gs_abs2(wp.x[j]);
                aqq += gs_abs2(wq.x[j]);
                apq += gs_dot(wp.x[j], wq.x[j]);
            }
            app = gs_sum(app, LP);
            aqq = gs_sum(aqq, LP);
            apq = gs_sum(apq, LP);
            const double g = gl_mag(apq);
            if (valid && g > tol * sqrt(app) * sqrt(aqq)) {
                const double zeta = (aqq - app) / (2.0 * g);
#if GS_SINGLE  // the angle from the float64 zeta, in single precision
                float tt;
                if (fabs(zeta) > 1e15) {
                    tt = (float)(0.5 / zeta);
                } else {
                    const float z = (float)zeta;
                    tt = copysignf(1.0f, z) / (fabsf(z) + sqrtf(1.0f + z * z));
                }
                const float cs = 1.0f / sqrtf(1.0f + tt * tt), sn = cs * tt;
                const C e = gs_narrow(gs_unit(apq, g));
#else
                const double tt = fabs(zeta) > 1e100 ? 0.5 / zeta
                    : copysign(1.0, zeta) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
                const double cs = 1.0 / sqrt(1.0 + tt * tt), sn = cs * tt;
                const C e = gs_unit(apq, g);
#endif
                const C se = sn * e, sc = sn * gl_cj(e);
                gs_rows o;
#pragma unroll
                for (int j = 0; j < RPL; ++j) o.x[j] = cs * wp.x[j] - sc * wq.x[j];
                *reinterpret_cast<gs_rows*>(w + p * LD + jl * RPL) = o;
#pragma unroll
                for (int j = 0; j < RPL; ++j) o.x[j] = se * wp.x[j] + cs * wq.x[j];
                *reinterpret_cast<gs_rows*>(w + q * LD + jl * RPL) = o;
                if (vecs) {
#pragma unroll
                    for (int j = 0; j < RPL; ++j) o.x[j] = cs * vp.x[j] - sc * vq.x[j];
                    *reinterpret_cast<gs_rows*>(v + p * LD + jl * RPL) = o;
#pragma unroll
                    for (int j = 0; j < RPL; ++j) o.x[j] = se * vp.x[j] + cs * vq.x[j];
                    *reinterpret_cast<gs_rows*>(v + q * LD + jl * RPL) = o;
                }
                rotated = 1;
            }
            __syncthreads();
        }
        ++sweep;
        converged = !__syncthreads_or(rotated);
    }
    // Singular values: segment pr (SL lanes, SR rows a lane) takes columns pr, pr + nseg, ...;
    // then the order.
    const int pr = t / SL, row = t % SL, nseg = nt / SL;
    for (int c0 = 0; c0 < k; c0 += nseg) {  // the same in the whole block
        const int c = c0 + pr;
        double part = 0.0;
#pragma unroll
        for (int j = 0; j < SR; ++j) part += (c < k) ? gs_abs2(w[c * LD + row + j * SL]) : 0.0;
        const double nrm = sqrt(gs_sum(part, SL));
        if (c < k && row == 0) sv[c] = nrm;
    }
    __syncthreads();
    if (t < k) {
        const double mine = sv[t];
        int rank = 0;
        for (int i = 0; i < k; ++i) rank += (sv[i] > mine || (sv[i] == mine && i < t));
        perm[rank] = t;
        s[b * ssb + rank] = R(ldexp(mine, ex));
    }
    if (t == 0) {
        const bool fail = !converged;
        gl_summary(summ, fail ? 2ULL : 0ULL, (unsigned long long)sweep, 1,
                   fail ? ((unsigned long long)b << 32 | (unsigned long long)sweep) : GL_NONE,
                   (unsigned long long)gridDim.x);
    }
    if (!vecs) return;  // the whole block
    for (int e = t; e < LD * k; e += nt) {  // u_j = w_j / s_j (zero where s_j is zero)
        const double sj = sv[e / LD];
        w[e] = sj > ZERO_S ? gs_div(w[e], sj) : C(0);
    }
    __syncthreads();
    const int wcols = wide ? (vr > k ? vr : k) : (uc > k ? uc : k);  // big-side columns asked
    int todo = wcols > k;
    for (int c = 0; c < k; ++c) todo |= !(sv[c] > ZERO_S);
    if (todo && warp == 0) {  // complete the big side to an orthonormal basis: one warp,
        // rows lane + 32 jr (jr < RW) a lane
        unsigned long long have = 0ULL;
        for (int c = 0; c < k; ++c) if (sv[c] > ZERO_S) have |= 1ULL << c;
        for (int c = 0; c < wcols; ++c) {
            if (c < k && sv[c] > ZERO_S) continue;
            double best = 1e300;
            int at = lane;
            for (int jr = 0; jr < RW; ++jr) {  // this lane's least covered row
                const int i = lane + 32 * jr;
                double rn = 0.0;
                for (int j = 0; j < wcols; ++j)
                    if ((have >> j) & 1ULL) rn += i < MB ? gs_abs2(w[j * LD + i]) : 0.0;
                if (i < big && (jr == 0 || rn < best)) { best = rn; at = i; }
            }
            for (int h = 16; h > 0; h >>= 1) {  // least covered row, lowest index on ties
                const double ob = __shfl_xor_sync(FULL, best, h);
                const int oa = __shfl_xor_sync(FULL, at, h);
                if (ob < best || (ob == best && oa < at)) { best = ob; at = oa; }
            }
            C x[RW];
#pragma unroll
            for (int jr = 0; jr < RW; ++jr) x[jr] = (lane + 32 * jr == at) ? C(1) : C(0);
            for (int j = 0; j < wcols; ++j) {  // x = (I - Q Q^H) e_at, then again
                if (!((have >> j) & 1ULL)) continue;
                const C qa = gl_cj(w[j * LD + at]);
#pragma unroll
                for (int jr = 0; jr < RW; ++jr) {
                    const int i = lane + 32 * jr;
                    x[jr] = x[jr] - (i < MB ? w[j * LD + i] : C(0)) * qa;
                }
            }
            for (int j = 0; j < wcols; ++j) {
                if (!((have >> j) & 1ULL)) continue;
                D dot = gs_dot(lane < MB ? w[j * LD + lane] : C(0), x[0]);
#pragma unroll
                for (int jr = 1; jr < RW; ++jr) {
                    const int i = lane + 32 * jr;
                    dot += gs_dot(i < MB ? w[j * LD + i] : C(0), x[jr]);
                }
                const C coef = C(GS_NARROW(gs_sum(dot, 32)));
#pragma unroll
                for (int jr = 0; jr < RW; ++jr) {
                    const int i = lane + 32 * jr;
                    x[jr] = x[jr] - (i < MB ? w[j * LD + i] : C(0)) * coef;
                }
            }
            double nn = 0.0;
#pragma unroll
            for (int jr = 0; jr < RW; ++jr) {
                if (lane + 32 * jr >= big) x[jr] = C(0);
                nn += gs_abs2(x[jr]);
            }
            const double nrm = sqrt(gs_sum(nn, 32));
#pragma unroll
            for (int jr = 0; jr < RW; ++jr)
                if (lane + 32 * jr < MB) w[c * LD + lane + 32 * jr] = gs_div(x[jr], nrm);
            have |= 1ULL << c;
            __syncwarp();
        }
    }
    __syncthreads();
    // Signs (flip_signs): per position c < k, the first largest |x_i| of the Vh-side vector
    // x (in T's precision) gives the phase conj(x_i) / |x_i|, applied to both sides.
    for (int c0 = 0; c0 < k; c0 += nseg) {  // the same in the whole block
        const int c = c0 + pr;
        const int len = wide ? big : k;
        const int col = c < k ? perm[c] : 0;
        C mine = C(0);  // this lane's first largest entry (rows row + SL j)
        double best = -1.0;
        int own = row;
#pragma unroll
        for (int j = 0; j < SR; ++j) {
            const int i = row + j * SL;
            const C x = (c < k && i < len) ? (wide ? w[col * LD + i] : v[col * LD + i]) : C(0);
            const double g = gl_mag(T(x));
            if (g > best) { best = g; own = i; mine = x; }
        }
        int at = own;
        for (int h = SL / 2; h > 0; h >>= 1) {
            const double ob = __shfl_xor_sync(FULL, best, h, SL);
            const int oa = __shfl_xor_sync(FULL, at, h, SL);
            if (ob > best || (ob == best && oa < at)) { best = ob; at = oa; }
        }
        if (c < k && own == at) {
            const double g = gl_mag(mine);
            ph[c] = g > 0.0 ? C(gl_cj(gs_unit(mine, g))) : C(1);
        }
    }
    __syncthreads();
    gs_store(u + b * sub, sur, suc, m, uc, w, v, perm, ph, k, wide, 0, false, t, nt);
    gs_store(vh + b * svb, svr, svc, vr, n, w, v, perm, ph, k, wide, 1, false, t, nt);
}
"""


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
_PRELUDE = r"""
#define ZERO_S 1e-280
#define LP (MB / RPL)
#define SL (MB < 32 ? MB : 32)
#define SR (MB / SL)
#define RW ((MB + 31) / 32)
#if GS_SINGLE
#define GS_NARROW(x) gs_narrow(x)
#else
#define GS_NARROW(x) (x)
#endif
__device__ __forceinline__ double nan_val() { return __longlong_as_double(0x7ff8000000000000LL); }
"""


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
