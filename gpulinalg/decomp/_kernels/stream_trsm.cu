// op(a) = m is lower triangular: m(i, j) = (tr ? a(j, i) : a(i, j)), conjugated with cj.
// mode 0: x = m^-1 b; mode 1: x = m^-H b; mode 2: x = m^-H m^-1 b (cho_solve, m = L); unit:
// unit diagonal. Block blockIdx.x solves columns c0 .. c0 + kc - 1 (groups of kg) of matrix
// blockIdx.x / groups; its solution columns xs[c * n + i] live in dynamic shared memory.
// A substitution ("pass") runs over panels of GP rows: forward from the top with
// g(r, j) = m(i0 + r, j), backward from the bottom with g(r, j) = conj(m(j, i0 + r)); the
// panel's rows get sum_j g(r, j) x_j over the solved j (the warps split the j range, lanes run
// along the contiguous axis), then warp c substitutes column c through the diagonal block.
// The rule of _triangular_xp and the flags as gl_small_trsm's (its comment), into the summary;
// NaN or Inf outside the triangle (SciPy's check_finite: checks bit 1) is flagged into the
// summary by the flat finiteness kernel before the launch (here a few blocks would read it all).
#define GP 32
#define KGM 4
#define NW (NT / 32)
#define RPW (GP / NW)
extern "C" __global__ void __launch_bounds__(NT)
gl_stream_trsm(const T* __restrict__ a, const T* __restrict__ bm, T* __restrict__ x,
               unsigned long long* __restrict__ summ, const int n, const int k,
               const long long sab, const long long sar, const long long sac,
               const long long sbb, const long long sbr, const long long sbc,
               const long long sxb, const long long sxr, const long long sxc,
               const int tr, const int cj, const int mode, const int unit,
               const int squared, const int kg, const int checks) {
    extern __shared__ __align__(16) unsigned char gl_dyn[];
    T* xs = reinterpret_cast<T*>(gl_dyn);
    __shared__ T dg[GP][GP + 1];
    __shared__ T part[NW][KGM][GP];
    __shared__ double red[3 + 2 * KGM][NW];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int groups = (k + kg - 1) / kg;
    const long long b = blockIdx.x / groups;
    const int c0 = (int)(blockIdx.x % groups) * kg;
    const int kc = min(kg, k - c0);
    const T* src = a + b * sab;
    const long long mr = tr ? sac : sar, mc = tr ? sar : sac;
    int mine = 0, minb = 0;
    double sc[KGM], mx[KGM];
#pragma unroll
    for (int c = 0; c < KGM; ++c) {
        sc[c] = 0.0;
        mx[c] = 0.0;
        if (c < kc) {
            for (int i = t; i < n; i += NT) {
                const T v = bm[b * sbb + i * sbr + (c0 + c) * sbc];
                if (!gl_fin(v)) minb = 1;
                sc[c] = gl_max(sc[c], gl_mag(v));
                xs[c * n + i] = v;
            }
        }
    }
    double dmax = 0.0, dmin = __longlong_as_double(0x7ff0000000000000LL);  // +inf
    double z = dmin;  // the first zero on the diagonal (+inf: none)
    const int panels = (n + GP - 1) / GP;
    const int first = mode == 1 ? 1 : 0, last = mode == 0 ? 0 : 1;
    for (int pass = first; pass <= last; ++pass) {
        const bool fw = pass == 0;
        const long long sr = fw ? mr : mc, sj = fw ? mc : mr;
        const bool cp = fw ? (cj != 0) : (cj == 0);
        const bool rfast = llabs(sr) <= llabs(sj);  // consecutive r are adjacent in memory
        for (int pi = 0; pi < panels; ++pi) {
            const int i0 = (fw ? pi : panels - 1 - pi) * GP, pr = min(GP, n - i0);
            const int j0 = fw ? 0 : i0 + pr, j1 = fw ? i0 : n;
            const T* rows = src + i0 * sr;
            for (int e = t; e < GP * GP; e += NT) {  // the diagonal block, the used triangle
                const int r = rfast ? (e & (GP - 1)) : e / GP;
                const int jj = rfast ? e / GP : (e & (GP - 1));
                T v = T(0);
                if (r < pr && jj < pr && (fw ? jj <= r : jj >= r)) {
                    v = rows[r * sr + (i0 + jj) * sj];
                    if (cp) v = gl_cj(v);
                    if (!gl_fin(v)) mine = 1;
                    if (r == jj && pass == first) {
                        const double d = gl_mag(v);
                        dmax = gl_max(dmax, d);
                        dmin = gl_min(dmin, d);
                        if (d == 0.0 && i0 + r < z) z = i0 + r;
                    }
                }
                dg[r][jj] = v;
            }
            if (rfast) {  // lane r: row i0 + r; the warps take every NW-th j
                T acc[KGM];
#pragma unroll
                for (int c = 0; c < KGM; ++c) acc[c] = T(0);
                const bool on = lane < pr;
                const T* rp = rows + lane * sr;
                for (int j = j0 + warp; j < j1; j += NW * UNR) {
                    T g[UNR];
#pragma unroll
                    for (int u = 0; u < UNR; ++u) {
                        const int ju = j + u * NW;
                        g[u] = (on && ju < j1) ? rp[ju * sj] : T(0);
                    }
#pragma unroll
                    for (int u = 0; u < UNR; ++u) {
                        const int ju = j + u * NW;
                        if (ju < j1) {
                            const T gv = cp ? gl_cj(g[u]) : g[u];
                            if (!gl_fin(gv)) mine = 1;
#pragma unroll
                            for (int c = 0; c < KGM; ++c)
                                if (c < kc) acc[c] += gv * xs[c * n + ju];
                        }
                    }
                }
#pragma unroll
                for (int c = 0; c < KGM; ++c) part[warp][c][lane] = acc[c];
            } else {  // warp w: rows w, w + NW, ...; lanes take every 32nd j, then a shuffle sum
                T acc[RPW][KGM];
#pragma unroll
                for (int q = 0; q < RPW; ++q)
#pragma unroll
                    for (int c = 0; c < KGM; ++c) acc[q][c] = T(0);
                for (int j = j0 + lane; j < j1; j += 32) {
                    T g[RPW];
#pragma unroll
                    for (int q = 0; q < RPW; ++q) {
                        const int r = warp + q * NW;
                        g[q] = r < pr ? rows[r * sr + j * sj] : T(0);
                    }
#pragma unroll
                    for (int q = 0; q < RPW; ++q) {
                        const T gv = cp ? gl_cj(g[q]) : g[q];
                        if (!gl_fin(gv)) mine = 1;
#pragma unroll
                        for (int c = 0; c < KGM; ++c)
                            if (c < kc) acc[q][c] += gv * xs[c * n + j];
                    }
                }
#pragma unroll
                for (int q = 0; q < RPW; ++q) {
#pragma unroll
                    for (int c = 0; c < KGM; ++c) {
                        T v = acc[q][c];
                        for (int h = 16; h > 0; h >>= 1) v += gl_xor(v, h, 32);
                        if (lane == 0) part[0][c][warp + q * NW] = v;
                    }
                }
            }
            __syncthreads();
            if (rfast) {  // fold the warps' partial sums into part[0]
                for (int e = t; e < KGM * GP; e += NT) {
                    const int c = e / GP, r = e & (GP - 1);
                    T s = T(0);
                    for (int w = 0; w < NW; ++w) s += part[w][c][r];
                    part[0][c][r] = s;
                }
                __syncthreads();
            }
            if (warp < kc) {  // warp c substitutes column c through the diagonal block
                const int c = warp, r = lane;
                T v = r < pr ? xs[c * n + i0 + r] - part[0][c][r] : T(0);
                const T dinv = (unit || r >= pr) ? T(1) : T(1) / dg[r][r];
                if (fw) {
#pragma unroll
                    for (int jj = 0; jj < GP; ++jj) {
                        if (jj < pr) {
                            const T xj = gl_shfl(v * dinv, jj, 32);
                            if (r == jj) v = xj; else if (r > jj) v -= dg[r][jj] * xj;
                        }
                    }
                } else {
#pragma unroll
                    for (int jj = GP - 1; jj >= 0; --jj) {
                        if (jj < pr) {
                            const T xj = gl_shfl(v * dinv, jj, 32);
                            if (r == jj) v = xj; else if (r < jj) v -= dg[r][jj] * xj;
                        }
                    }
                }
                if (r < pr) xs[c * n + i0 + r] = v;
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int c = 0; c < KGM; ++c) {
        if (c < kc) {
            for (int i = t; i < n; i += NT) {
                const T v = xs[c * n + i];
                x[b * sxb + i * sxr + (c0 + c) * sxc] = v;
                mx[c] = gl_max(mx[c], gl_mag(v));
            }
        }
    }
    // the block's figures: a shuffle fold per warp, then thread 0 over the warps
    double f[3 + 2 * KGM];
    f[0] = dmax; f[1] = dmin; f[2] = z;
#pragma unroll
    for (int c = 0; c < KGM; ++c) { f[3 + c] = sc[c]; f[3 + KGM + c] = mx[c]; }
#pragma unroll
    for (int q = 0; q < 3 + 2 * KGM; ++q) {
        for (int h = 16; h > 0; h >>= 1) {
            const double o = __shfl_xor_sync(0xffffffffu, f[q], h);
            f[q] = (q == 1 || q == 2) ? gl_min(f[q], o) : gl_max(f[q], o);
        }
        if (lane == 0) red[q][warp] = f[q];
    }
    const int abad = __syncthreads_or(mine);
    const int bbad = __syncthreads_or(minb);
    if (t != 0 || !(checks & 1)) return;
    for (int w = 1; w < NW; ++w) {
#pragma unroll
        for (int q = 0; q < 3 + 2 * KGM; ++q)
            f[q] = (q == 1 || q == 2) ? gl_min(f[q], red[q][w]) : gl_max(f[q], red[q][w]);
    }
    if (unit) { f[0] = 1.0; f[1] = 1.0; f[2] = __longlong_as_double(0x7ff0000000000000LL); }
    const double diag1 = f[0] / (f[1] > 0.0 ? f[1] : 1.0);
    double bd = squared ? diag1 * diag1 : diag1;
    const double dm = squared ? f[0] * f[0] : f[0];
#pragma unroll
    for (int c = 0; c < KGM; ++c)
        if (c < kc) bd = gl_max(bd, dm * (f[3 + c] > 0.0 ? f[3 + KGM + c] / f[3 + c] : 0.0));
    const unsigned long long flags = (abad ? 1ULL : 0ULL) | (bbad ? 2ULL : 0ULL)
                                     | (f[2] < 1e300 ? 4ULL : 0ULL);
    gl_summary(summ, flags, gl_order_bits(bd), 1, GL_NONE, (unsigned long long)gridDim.x);
}
