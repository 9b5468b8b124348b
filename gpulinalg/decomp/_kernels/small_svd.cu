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
