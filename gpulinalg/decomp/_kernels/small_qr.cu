__device__ __forceinline__ float gq_im(float x) { return 0.0f; }
__device__ __forceinline__ double gq_im(double x) { return 0.0; }
__device__ __forceinline__ float gq_im(complex<float> x) { return x.imag(); }
__device__ __forceinline__ double gq_im(complex<double> x) { return x.imag(); }
// |x / s|^2, in float64.
__device__ __forceinline__ double gq_sq(float x, double s) { const double v = x / s; return v * v; }
__device__ __forceinline__ double gq_sq(double x, double s) { const double v = x / s; return v * v; }
__device__ __forceinline__ double gq_sq(complex<float> x, double s) {
    const double p = x.real() / s, q = x.imag() / s;
    return p * p + q * q;
}
__device__ __forceinline__ double gq_sq(complex<double> x, double s) {
    const double p = x.real() / s, q = x.imag() / s;
    return p * p + q * q;
}
#define SEG (MB < 32 ? MB : 32)
#define RPL (MB / SEG)
#define LD (MB + 1)
#define UNR 4
#define FULL 0xffffffffu
// The butterfly leaves the same sum, bit for bit, in every lane of the segment.
__device__ __forceinline__ T gq_sum(T w) {
#pragma unroll
    for (int h = SEG / 2; h > 0; h >>= 1) w += gl_xor(w, h, SEG);
    return w;
}
// Copy the rows x cols matrix at src (element strides sr, sc) into s (column c at s + c * LD);
// consecutive threads run along src's axis of smaller stride.
__device__ __forceinline__ void gq_load(T* s, const T* src, const int rows, const int cols,
                                        const long long sr, const long long sc,
                                        const int t, const int nt) {
    const bool colmajor = (sr < 0 ? -sr : sr) <= (sc < 0 ? -sc : sc);
    const int total = rows * cols;
    for (int e0 = t; e0 < total; e0 += UNR * nt) {
        T v[UNR];
#pragma unroll
        for (int u = 0; u < UNR; ++u) {  // all loads first: UNR in flight per thread
            const int e = e0 + u * nt;
            const int i = colmajor ? e % rows : e / cols, c = colmajor ? e / rows : e % cols;
            v[u] = e < total ? src[i * sr + c * sc] : T(0);
        }
#pragma unroll
        for (int u = 0; u < UNR; ++u) {
            const int e = e0 + u * nt;
            const int i = colmajor ? e % rows : e / cols, c = colmajor ? e / rows : e % cols;
            if (e < total) s[c * LD + i] = v[u];
        }
    }
}
// Write the rows x cols block of s to dst (strides dr, dc), zero below the diagonal when upper.
__device__ __forceinline__ void gq_store(T* dst, const T* s, const int rows, const int cols,
                                         const long long dr, const long long dc,
                                         const int upper, const int t, const int nt) {
    const bool colmajor = (dr < 0 ? -dr : dr) <= (dc < 0 ? -dc : dc);
    const int total = rows * cols;
    for (int e = t; e < total; e += nt) {
        const int i = colmajor ? e % rows : e / cols, c = colmajor ? e / rows : e % cols;
        dst[i * dr + c * dc] = (upper && i > c) ? T(0) : s[c * LD + i];
    }
}
// Apply I - f v v^H to rows j..m-1 of columns c0..nc-1 of s; v in registers (vr[q]: row
// sl + q * SEG; 0 above row j). Segment gs of nsegs takes columns c0 + gs, c0 + gs + nsegs...
__device__ __forceinline__ void gq_apply(T* s, const T (&vr)[RPL], const T f, const int j,
                                         const int m, const int c0, const int nc,
                                         const int sl, const int gs, const int nsegs) {
    for (int cb = c0; cb < nc; cb += nsegs) {  // the same in the whole warp
        const int c = cb + gs;
        const bool on = c < nc;
        T y[RPL];
        T w = T(0);
#pragma unroll
        for (int q = 0; q < RPL; ++q) {
            const int i = sl + q * SEG;
            y[q] = (on && i >= j && i < m) ? s[c * LD + i] : T(0);
            w += gl_cj(vr[q]) * y[q];
        }
        const T fw = f * gq_sum(w);
        if (on) {
#pragma unroll
            for (int q = 0; q < RPL; ++q) {
                const int i = sl + q * SEG;
                if (i >= j && i < m) s[c * LD + i] = y[q] - vr[q] * fw;
            }
        }
    }
}
// One block per matrix b of a (m x n, m <= MB; element strides sab, sar, sac), the matrix in
// dynamic shared memory (LD * max(n, qc) elements). Writes R to ro (rr x n: rr = k or m), Q to
// qo (m x qc, none when qc == 0) and, with raw, the reflectors to ho (m x n) and tau (k).
extern "C" __global__ void __launch_bounds__(256)
gl_small_qr(const T* __restrict__ a, T* __restrict__ qo, T* __restrict__ ro,
            T* __restrict__ ho, T* __restrict__ tau, const int m, const int n,
            const int qc, const int rr, const int raw,
            const long long sab, const long long sar, const long long sac,
            const long long sqb, const long long sqr, const long long sqc,
            const long long srb, const long long srr, const long long src,
            const long long shb, const long long shr, const long long shc,
            const long long stb) {
    extern __shared__ __align__(16) unsigned char gq_smem[];
    T* s = reinterpret_cast<T*>(gq_smem);
    __shared__ T tv[MB];
    const long long b = blockIdx.x;
    const int t = threadIdx.x, nt = blockDim.x;
    const int lane = t & 31, warp = t >> 5;
    const int sl = lane % SEG, gs = warp * (32 / SEG) + lane / SEG;
    const int nsegs = (nt >> 5) * (32 / SEG);
    const int k = m < n ? m : n;
    gq_load(s, a + b * sab, m, n, sar, sac, t, nt);
    __syncthreads();
    for (int j = 0; j < k; ++j) {  // geqr2: H_j^H applied to columns j + 1..n-1
        T vr[RPL];
        double sc = 0.0, sx = 0.0;
#pragma unroll
        for (int q = 0; q < RPL; ++q) {
            const int i = sl + q * SEG;
            vr[q] = (i >= j && i < m) ? s[j * LD + i] : T(0);
            const double p = gl_part(vr[q]);
            sc = gl_max(sc, p);
            if (i > j) sx = gl_max(sx, p);
        }
#pragma unroll
        for (int hh = SEG / 2; hh > 0; hh >>= 1) {
            sc = gl_max(sc, __shfl_xor_sync(FULL, sc, hh, SEG));
            sx = gl_max(sx, __shfl_xor_sync(FULL, sx, hh, SEG));
        }
        T alpha = T(0);
#pragma unroll
        for (int q = 0; q < RPL; ++q) if (q == j / SEG) alpha = vr[q];
        alpha = gl_shfl(alpha, j % SEG, SEG);
        T tj = T(0), beta = alpha;
        if (!(sx == 0.0 && gq_im(alpha) == 0)) {  // larfg (else H_j = I)
            double ss = 0.0;
#pragma unroll
            for (int q = 0; q < RPL; ++q) ss += gq_sq(vr[q], sc);  // zero outside j..m-1
#pragma unroll
            for (int hh = SEG / 2; hh > 0; hh >>= 1) ss += __shfl_xor_sync(FULL, ss, hh, SEG);
            const double nrm = sc * sqrt(ss);
            const R bt = (R)(gl_re(alpha) >= 0 ? -nrm : nrm);
            tj = (T(bt) - alpha) * T(R(1) / bt);
            const T scal = T(1) / (alpha - T(bt));
#pragma unroll
            for (int q = 0; q < RPL; ++q) if (sl + q * SEG > j) vr[q] = vr[q] * scal;
            beta = T(bt);
        }
#pragma unroll
        for (int q = 0; q < RPL; ++q) if (sl + q * SEG == j) vr[q] = T(1);
        __syncthreads();  // every warp has read column j
        if (gs == 0) {
#pragma unroll
            for (int q = 0; q < RPL; ++q) {
                const int i = sl + q * SEG;
                if (i >= j && i < m) s[j * LD + i] = (i == j) ? beta : vr[q];
            }
        }
        if (t == 0) tv[j] = tj;
        if (tj != T(0)) gq_apply(s, vr, gl_cj(tj), j, m, j + 1, n, sl, gs, nsegs);
        __syncthreads();
    }
    const T* sr = s;
    gq_store(ro + b * srb, sr, rr, n, srr, src, 1, t, nt);
    if (raw) {
        gq_store(ho + b * shb, sr, m, n, shr, shc, 0, t, nt);
        for (int j = t; j < k; j += nt) tau[b * stb + j] = tv[j];
    }
    if (qc == 0) return;  // the whole block
    for (int e = t; e < m * (qc - k); e += nt) {  // org2r: columns k..qc-1 of the identity
        const int c = k + e / m, i = e % m;
        s[c * LD + i] = (i == c) ? T(1) : T(0);  // columns the stores above do not read
    }
    __syncthreads();  // R (and h) read before Q overwrites s
    for (int j = k - 1; j >= 0; --j) {  // Q = H_0 ... H_{k-1} I, in place (org2r)
        const T tj = tv[j];
        T vr[RPL];
#pragma unroll
        for (int q = 0; q < RPL; ++q) {
            const int i = sl + q * SEG;
            vr[q] = (i > j && i < m) ? s[j * LD + i] : (i == j ? T(1) : T(0));
        }
        __syncthreads();  // every warp has read column j
        if (gs == 0) {
#pragma unroll
            for (int q = 0; q < RPL; ++q) {
                const int i = sl + q * SEG;
                if (i < m) s[j * LD + i] = i < j ? T(0) : (i == j ? T(1) - tj : -tj * vr[q]);
            }
        }
        if (tj != T(0)) gq_apply(s, vr, tj, j, m, j + 1, qc, sl, gs, nsegs);
        __syncthreads();
    }
    gq_store(qo + b * sqb, s, m, qc, sqr, sqc, 0, t, nt);
}
