"""Fused kernel for stacks of small SVDs: singular values (and vectors) of every matrix in one
launch.

On stacks of small matrices the library route is cuSOLVER's ``gesvdjBatched``, then a sign
kernel and a read-back of one ``info`` code per matrix. Here one thread block holds one matrix
(``m, n <= 32``) in shared memory and does the whole call on it:

``gl_small_svd``
    reads the matrix (coalesced along its axis of smaller stride) as ``W`` (``big x k``, the
    matrix or, when wide, its conjugate transpose), flags NaN or Inf (such a matrix gets NaN
    in all its results and no Jacobi), scales it by a power of two so that its largest entry
    is in [1/2, 1) (exact), and runs one-sided Jacobi (Hestenes) on W's columns in float64
    (complex128 for the complex types) whatever the dtype: sweeps of ``k - 1`` rounds (the
    round-robin order, ``k / 2`` disjoint pairs at once, one segment of ``MB`` lanes per pair,
    one row per lane, one barrier a round); a pair is rotated when ``|w_p^H w_q| > tol
    ||w_p|| ||w_q||`` (``tol``: ``TOL_FACTOR`` eps of the dtype), and the sweep loop stops
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

import threading

import numpy as np

from .._runtime.kernels import raw_kernel
from ._checks import real_dtype
from ._cusolver_cuda import raise_not_converged
from ._finite_cuda import raise_nonfinite
from ._results import SVDResult
from ._scalars_cuda import KERNEL_TYPES, SCALAR_PREAMBLE

__all__ = ["SIZES", "MAX_ORDER", "TOL_FACTOR", "MAX_SWEEPS", "NONFINITE", "NOT_CONVERGED",
           "NONE", "fits", "launch_args", "svd", "summary"]

#: The compiled row classes: a stack whose larger dimension is ``big`` runs the smallest one.
SIZES = (8, 16, 32)
#: Largest ``max(m, n)``.
MAX_ORDER = 32
#: A pair of columns is rotated while ``|w_p^H w_q| > TOL_FACTOR eps ||w_p|| ||w_q||``.
TOL_FACTOR = 4.0
#: Sweeps before a matrix is declared not converged (gesvdj's default cap is 100).
MAX_SWEEPS = 100
#: Summary flags: some matrix held NaN or Inf; some matrix did not converge.
NONFINITE, NOT_CONVERGED = 1, 2
#: "No matrix": the identity of the packed first-failure word.
NONE = (1 << 64) - 1

#: dtype -> (element type ``T``, compute type ``C``, its real type ``R``).
_TYPES = {d: (t, "complex<double>" if r != t else "double", r) for d, (t, r) in KERNEL_TYPES.items()}

_SOURCE = SCALAR_PREAMBLE + r"""
#define LD MB
#define FULL 0xffffffffu
#define GS_NONE 0xffffffffffffffffULL
__device__ __forceinline__ double gs_abs2(double x) { return x * x; }
__device__ __forceinline__ double gs_abs2(complex<double> x) {
    return x.real() * x.real() + x.imag() * x.imag();
}
__device__ __forceinline__ double gs_part(float x) { return fabs((double)x); }
__device__ __forceinline__ double gs_part(double x) { return fabs(x); }
__device__ __forceinline__ double gs_part(complex<float> x) {
    return gl_max(fabs((double)x.real()), fabs((double)x.imag()));
}
__device__ __forceinline__ double gs_part(complex<double> x) {
    return gl_max(fabs(x.real()), fabs(x.imag()));
}
__device__ __forceinline__ bool gs_finite(float x) { return isfinite(x); }
__device__ __forceinline__ bool gs_finite(double x) { return isfinite(x); }
__device__ __forceinline__ bool gs_finite(complex<float> x) {
    return isfinite(x.real()) && isfinite(x.imag());
}
__device__ __forceinline__ bool gs_finite(complex<double> x) {
    return isfinite(x.real()) && isfinite(x.imag());
}
// The phase x / |x| of a non-zero x (the sign, for real x).
__device__ __forceinline__ double gs_unit(double x, double g) { return x / g; }
__device__ __forceinline__ complex<double> gs_unit(complex<double> x, double g) { return x / g; }
// Butterfly sum over segments of w lanes: the same bits in every lane of the segment.
__device__ __forceinline__ double gs_sum(double v, int w) {
    for (int h = w / 2; h > 0; h >>= 1) v += __shfl_xor_sync(FULL, v, h, w);
    return v;
}
__device__ __forceinline__ complex<double> gs_sum(complex<double> v, int w) {
    for (int h = w / 2; h > 0; h >>= 1) v += gl_xor(v, h, w);
    return v;
}
// The summary acc[0..2] (0: OR of flags; 1: max of sweeps; 2: min of the packed first
// failure); the last block (acc[3] counts them) moves the totals to acc[4..6] and puts the
// identities back for the next launch. One thread per block, once.
__device__ void gs_summary(unsigned long long* acc, const unsigned long long flags,
                           const unsigned long long sweeps, const unsigned long long first,
                           const unsigned long long nblocks) {
    if (flags) atomicOr(&acc[0], flags);
    if (sweeps) atomicMax(&acc[1], sweeps);
    if (first != GS_NONE) atomicMin(&acc[2], first);
    __threadfence();
    if (atomicAdd(&acc[3], 1ULL) == nblocks - 1) {
        __threadfence();
        acc[4] = atomicExch(&acc[0], 0ULL);
        acc[5] = atomicExch(&acc[1], 0ULL);
        acc[6] = atomicExch(&acc[2], GS_NONE);
        atomicExch(&acc[3], 0ULL);
    }
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
// One block per matrix b of a (m x n, max(m, n) <= MB; element strides sab, sar, sac).
// Results: s (k; strides ssb, 1), u (m x uc: uc = 0 (values only), k or m), vh (vr x n: k or
// n). Dynamic shared memory: W (LD x wc columns of C: wc = max(kp, big-side columns)) then V
// (LD x kp). Block: 32 * ceil(kp / 2 * MB / 32) threads (kp = k rounded up to even).
extern "C" __global__ void __launch_bounds__(512)
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
        bad |= !gs_finite(x);
        big_part = gl_max(big_part, gs_part(x));
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
        if (t == 0) gs_summary(summ, 1ULL, 0ULL, GS_NONE, (unsigned long long)gridDim.x);
        return;  // the whole block
    }
    int ex = 0;
    const double top = __longlong_as_double((long long)amax);
    if (top > 0.0) frexp(top, &ex);
    const double down = ldexp(1.0, -ex);
    for (int e = t; e < LD * k; e += nt) w[e] = w[e] * down;
    __syncthreads();
    // One-sided Jacobi: round r pairs (kp - 1, r) and ((r + j) % (kp - 1), (r - j) % (kp - 1))
    const int pr = t / MB, row = t % MB, npairs = kp / 2;
    int sweep = 0, converged = 0;
    while (sweep < max_sweeps && !converged) {
        int rotated = 0;
        for (int r = 0; r < kp - 1; ++r) {
            int p = pr == 0 ? kp - 1 : (r + pr) % (kp - 1);
            int q = pr == 0 ? r : (r - pr + kp - 1) % (kp - 1);
            if (p > q) { const int x = p; p = q; q = x; }
            const bool valid = pr < npairs && q < k;  // the same in the whole segment
            C wp = C(0), wq = C(0), vp = C(0), vq = C(0);
            if (valid) {
                wp = w[p * LD + row];
                wq = w[q * LD + row];
                if (vecs) { vp = v[p * LD + row]; vq = v[q * LD + row]; }
            }
            const double app = gs_sum(gs_abs2(wp), MB), aqq = gs_sum(gs_abs2(wq), MB);
            const C apq = gs_sum(C(gl_cj(wp) * wq), MB);
            const double g = gl_mag(apq);
            if (valid && g > tol * sqrt(app) * sqrt(aqq)) {
                const double zeta = (aqq - app) / (2.0 * g);
                const double tt = fabs(zeta) > 1e100 ? 0.5 / zeta
                    : copysign(1.0, zeta) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
                const double cs = 1.0 / sqrt(1.0 + tt * tt), sn = cs * tt;
                const C e = gs_unit(apq, g);
                const C se = sn * e, sc = sn * gl_cj(e);
                w[p * LD + row] = cs * wp - sc * wq;
                w[q * LD + row] = se * wp + cs * wq;
                if (vecs) {
                    v[p * LD + row] = cs * vp - sc * vq;
                    v[q * LD + row] = se * vp + cs * vq;
                }
                rotated = 1;
            }
            __syncthreads();
        }
        ++sweep;
        converged = !__syncthreads_or(rotated);
    }
    // Singular values: segment pr takes columns pr, pr + nseg, ...; then the descending order.
    const int nseg = nt / MB;
    for (int c0 = 0; c0 < k; c0 += nseg) {  // the same in the whole block
        const int c = c0 + pr;
        const C x = (c < k) ? w[c * LD + row] : C(0);
        const double nrm = sqrt(gs_sum(gs_abs2(x), MB));
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
        gs_summary(summ, fail ? 2ULL : 0ULL, (unsigned long long)sweep,
                   fail ? ((unsigned long long)b << 32 | (unsigned long long)sweep) : GS_NONE,
                   (unsigned long long)gridDim.x);
    }
    if (!vecs) return;  // the whole block
    for (int e = t; e < LD * k; e += nt) {  // u_j = w_j / s_j (zero where s_j is zero)
        const double sj = sv[e / LD];
        w[e] = sj > ZERO_S ? w[e] / sj : C(0);
    }
    __syncthreads();
    const int wcols = wide ? (vr > k ? vr : k) : (uc > k ? uc : k);  // big-side columns asked
    int todo = wcols > k;
    for (int c = 0; c < k; ++c) todo |= !(sv[c] > ZERO_S);
    if (todo && warp == 0) {  // complete the big side to an orthonormal basis: one warp
        unsigned int have = 0u;
        for (int c = 0; c < k; ++c) if (sv[c] > ZERO_S) have |= 1u << c;
        for (int c = 0; c < wcols; ++c) {
            if (c < k && sv[c] > ZERO_S) continue;
            double rn = 0.0;
            for (int j = 0; j < wcols; ++j)
                if ((have >> j) & 1u) rn += lane < MB ? gs_abs2(w[j * LD + lane]) : 0.0;
            double best = lane < big ? rn : 1e300;
            int at = lane;
            for (int h = 16; h > 0; h >>= 1) {  // least covered row, lowest index on ties
                const double ob = __shfl_xor_sync(FULL, best, h);
                const int oa = __shfl_xor_sync(FULL, at, h);
                if (ob < best || (ob == best && oa < at)) { best = ob; at = oa; }
            }
            C x = (lane == at) ? C(1) : C(0);
            for (int j = 0; j < wcols; ++j) {  // x = (I - Q Q^H) e_at, then again
                if (!((have >> j) & 1u)) continue;
                const C qi = lane < MB ? w[j * LD + lane] : C(0);
                x = x - qi * gl_cj(w[j * LD + at]);
            }
            for (int j = 0; j < wcols; ++j) {
                if (!((have >> j) & 1u)) continue;
                const C qi = lane < MB ? w[j * LD + lane] : C(0);
                x = x - qi * gs_sum(C(gl_cj(qi) * x), 32);
            }
            if (lane >= big) x = C(0);
            const double nrm = sqrt(gs_sum(gs_abs2(x), 32));
            if (lane < MB) w[c * LD + lane] = x / nrm;
            have |= 1u << c;
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
        const C x = (c < k && row < len) ? (wide ? w[col * LD + row] : v[col * LD + row]) : C(0);
        double best = gl_mag(T(x));
        int at = row;
        for (int h = MB / 2; h > 0; h >>= 1) {
            const double ob = __shfl_xor_sync(FULL, best, h, MB);
            const int oa = __shfl_xor_sync(FULL, at, h, MB);
            if (ob > best || (ob == best && oa < at)) { best = ob; at = oa; }
        }
        if (c < k && row == at) {
            const double g = gl_mag(x);
            ph[c] = g > 0.0 ? C(gl_cj(gs_unit(x, g))) : C(1);
        }
    }
    __syncthreads();
    gs_store(u + b * sub, sur, suc, m, uc, w, v, perm, ph, k, wide, 0, false, t, nt);
    gs_store(vh + b * svb, svr, svc, vr, n, w, v, perm, ph, k, wide, 1, false, t, nt);
}
"""


def fits(n, dtype):
    """Whether a stack whose larger dimension is ``n`` has a fused SVD kernel in ``dtype``."""
    return 0 < n <= MAX_ORDER and np.dtype(dtype) in _TYPES


def _row_class(big):
    for size in SIZES:
        if big <= size:
            return size
    raise ValueError(f"no fused SVD kernel for order {big}")


def _kernel(dtype, size):
    t, c, r = _TYPES[np.dtype(dtype)]
    return raw_kernel("gl_small_svd", _PRELUDE + _SOURCE + _KERNEL, {"T": t, "C": c, "R": r},
                      options=("--std=c++17", f"-DMB={size}"))


#: NaN of the element type; "zero" singular values (below it: the column is completed).
_PRELUDE = r"""
#define ZERO_S 1e-280
__device__ __forceinline__ double nan_val() { return __longlong_as_double(0x7ff8000000000000LL); }
"""


def launch_args(dtype, m, n, uc, vr):
    """``(kernel, block, shared bytes, wc)`` of a launch for ``m x n`` matrices: a segment of
    ``MB`` lanes per pair of columns (``ceil(k / 2)`` pairs), W and V of the compute type in
    dynamic shared memory (``wc``: W's columns)."""
    size = _row_class(max(m, n))
    k = min(m, n)
    kp = k + (k & 1)
    wc = max(kp, uc if m >= n else vr)
    threads = 32 * max(1, -(-(kp // 2) * size // 32))
    item = 16 if np.dtype(dtype).kind == "c" else 8
    return _kernel(dtype, size), (threads,), size * (wc + kp) * item, wc


def _strides(x, used=True):
    """``x``'s strides in elements; three zeros for an output not written (``used`` false:
    ``x`` stands in for it, and the kernel takes three strides whatever ``x``'s rank)."""
    if not used:
        return (np.int64(0),) * 3
    return tuple(np.int64(s // x.itemsize) for s in x.strides)


class _Buffers(threading.local):
    def __init__(self):
        self.by_device = {}


_buffers = _Buffers()


def summary(cupy, device):
    """``(buffer, totals)``: the calling thread's summary buffer on ``device`` (8 uint64
    words, made once with the identities in place) and the view of its 3 read-back words."""
    got = _buffers.by_device.get(device)
    if got is None or got[0] is not cupy:
        buf = cupy.asarray(np.array([0, 0, NONE, 0, 0, 0, NONE, 0], dtype=np.uint64))
        got = (cupy, buf, buf[4:7])
        _buffers.by_device[device] = got
    return got[1], got[2]


def svd(a, full_matrices, compute_uv, dtype, finite=False):
    """SVD of the CuPy stack ``a`` (..., m, n), ``max(m, n) <= 32``, in one launch and one
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
    tol = TOL_FACTOR * float(np.finfo(dtype).eps)
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
    from .._runtime import dispatch as _dispatch
    _dispatch.note(fused=True, sweeps=sweeps)
    s = s.reshape(batch + (k,))
    if not compute_uv:
        return s
    return SVDResult(u.reshape(batch + (m, uc)), s, vh.reshape(batch + (vr, n)))
