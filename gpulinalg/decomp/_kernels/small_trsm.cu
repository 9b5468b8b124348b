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
