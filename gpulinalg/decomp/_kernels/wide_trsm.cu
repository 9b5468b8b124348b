#define PR 64
#define LDI (PR + 1)
#define KGM 4
#define NPART (NT / PR)
#define QPT (PR / NPART)
#define W_TICKET 0
#define W_DONE 1
#define W_DMAX 2
#define W_DMIN 3
#define W_ZERO 4
#define W_FLAGS 5
#define W_SC 6
#define W_MX (6 + MAXK)
#define W_EPOCH (6 + 2 * MAXK)
#define W_WORDS (W_EPOCH + 1)
#define W_LINES (W_EPOCH + 2)
#define WPE ((int)(sizeof(T) / 4))
#define SET_WORDS (PR * KGM * WPE)
#define INF_BITS 0x7ff0000000000000ULL
// A panel's solution goes from block to block as tagged words: each 64-bit word holds 32 bits
// of a value and the launch's tag, written by one store (which the device never splits), so
// a reader spins on the words themselves: no fence on either side, no flag, and the data
// comes with the sign that it is there.
__device__ __forceinline__ void gl_put(unsigned long long* w, const T v, const unsigned int tag) {
    unsigned int b[WPE];
    memcpy(b, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < WPE; ++i)
        *(volatile unsigned long long*)(w + i) = ((unsigned long long)tag << 32) | b[i];
}
__device__ __forceinline__ T gl_take(const unsigned long long* w, const unsigned int tag) {
    unsigned int b[WPE];
    for (;;) {
        bool ok = true;
#pragma unroll
        for (int i = 0; i < WPE; ++i) {
            const unsigned long long v = *(volatile const unsigned long long*)(w + i);
            b[i] = (unsigned int)v;
            ok = ok && (unsigned int)(v >> 32) == tag;
        }
        if (ok) break;
#if __CUDA_ARCH__ >= 700
        __nanosleep(64);  // many blocks wait on the same lines: fewer reads of them
#endif
    }
    T v;
    memcpy(&v, b, sizeof(T));
    return v;
}
// op(a) = m is lower triangular as in gl_stream_trsm (tr, cj; mode 0: m^-1 b, 1: m^-H b,
// 2: m^-H m^-1 b). One matrix; block "ticket" (ws[0]) takes pass (forward first), column group
// and panel in the order of the substitution. Forward panel p: rows i0 = p * PR ..; g(r, j) =
// m(i0 + r, j); backward: g(r, j) = conj(m(j, i0 + r)), panels from the bottom. The diagonal
// block g(r, i0 + q) sits in inv reversed for the backward pass (so always lower triangular),
// padded with the identity past n, and is inverted in place. ws: the figures of the rule
// (gl_stream_trsm's) by atomics, the last launch's tag (W_EPOCH), the buffer's length
// (W_WORDS), then SET_WORDS of tagged words per (pass, group, panel): x(i0 + r, c0 + c) of the
// panel in words (c * PR + r) * WPE on. The last block writes the summary, puts the words
// before W_EPOCH back to their identities and the tag into W_EPOCH; a launch tags with one
// more, so a word left by an earlier launch never passes for this one's.
extern "C" __global__ void __launch_bounds__(NT)
gl_wide_trsm(const T* __restrict__ a, const T* __restrict__ bm, T* x,
             unsigned long long* __restrict__ summ, const int n, const int k,
             const long long sab, const long long sar, const long long sac,
             const long long sbb, const long long sbr, const long long sbc,
             const long long sxb, const long long sxr, const long long sxc,
             const int tr, const int cj, const int mode, const int unit,
             const int squared, const int checks, unsigned long long* ws,
             unsigned long long* hostw, const unsigned int epoch) {
    extern __shared__ __align__(16) unsigned char gl_dyn[];
    T* inv = reinterpret_cast<T*>(gl_dyn);
    __shared__ T xs[KGM][PR];
    __shared__ T red[NPART][KGM][PR];
    __shared__ unsigned long long s_ticket;
    __shared__ unsigned int s_tag;
    __shared__ int s_last;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    if (t == 0) {
        s_ticket = atomicAdd(&ws[W_TICKET], 1ULL);
        s_tag = (unsigned int)ws[W_EPOCH] + 1u;  // at most 0xffffffff: see the tail
    }
    __syncthreads();
    const long long ticket = (long long)s_ticket;
    const unsigned int tag = s_tag;
    const int panels = (n + PR - 1) / PR, groups = (k + KGM - 1) / KGM;
    const int first = mode == 1 ? 1 : 0;
    const int pass = first + (int)(ticket / ((long long)groups * panels));
    const int g = (int)((ticket / panels) % groups), ord = (int)(ticket % panels);
    const bool fw = pass == 0;
    const int pi = fw ? ord : panels - 1 - ord;
    const int c0 = g * KGM, kc = min(KGM, k - c0);
    const int i0 = pi * PR, pr = min(PR, n - i0);
    const long long mr = tr ? sac : sar, mc = tr ? sar : sac;
    const long long sr = fw ? mr : mc, sj = fw ? mc : mr;
    const bool cp = fw ? (cj != 0) : (cj == 0);
    const bool rfast = llabs(sr) <= llabs(sj);
    const T* rows = a + (long long)i0 * sr;
    // the tagged words of this pass and group (panel by panel), and of this panel
    unsigned long long* lines = ws + W_LINES + ((long long)(pass - first) * groups + g) * panels
                                                * SET_WORDS;
    const int word = t * WPE;  // x(r, c) of a panel for thread (r, c) = (t % PR, t / PR)
    // check_finite of the other triangle: the first pass's blocks of the first group read its
    // part in their rows (after writing their solution: off the chain)
    const bool other = (checks & 2) && pass == first && g == 0;
    int mine = 0, minb = 0;
    double dmax = 0.0, dmin = __longlong_as_double(0x7ff0000000000000LL);
    unsigned long long zero = GL_NONE;
    // the diagonal block, reversed for the backward pass, the identity past the last row
    for (int e = t; e < PR * PR; e += NT) {
        const int r = rfast ? (e % PR) : (e / PR), q = rfast ? (e / PR) : (e % PR);
        T v = T(0);
        if (r < pr && q < pr && (fw ? q <= r : q >= r)) {
            v = rows[r * sr + (long long)(i0 + q) * sj];
            if (cp) v = gl_cj(v);
            if (!gl_fin(v)) mine = 1;
            if (r == q) {
                if (pass == first) {
                    const double d = gl_mag(v);
                    dmax = gl_max(dmax, d);
                    dmin = gl_min(dmin, d);
                    if (d == 0.0) zero = min(zero, (unsigned long long)(i0 + r));
                }
                if (unit) v = T(1);
            }
        } else {
            if (r == q) v = T(1);
            if (other && r < pr && q < pr && !gl_fin(rows[r * sr + (long long)(i0 + q) * sj]))
                mine = 1;  // the other triangle, for check_finite
        }
        inv[(fw ? r : PR - 1 - r) * LDI + (fw ? q : PR - 1 - q)] = v;
    }
    // the right-hand side of the first pass: thread (r, c) = (t % PR, t / PR)
    const int rme = t % PR, cme = t / PR;
    T rhs = T(0);
    double sc = 0.0, mx = 0.0;
    if (pass == first && cme < kc && rme < pr) {
        rhs = bm[(long long)(i0 + rme) * sbr + (long long)(c0 + cme) * sbc];
        if (!gl_fin(rhs)) minb = 1;
        sc = gl_mag(rhs);
    }
    __syncthreads();
    if (warp < 2) {  // invert the two 32 x 32 diagonal blocks, a column a lane
        const int o = warp * 32;
        // the diagonal's reciprocals, a lane each, before the substitution: no division on
        // its chain of 32 dependent steps
        const T rd = T(1) / inv[(o + lane) * LDI + o + lane];
        T xc[32];
#pragma unroll
        for (int r = 0; r < 32; ++r) {
            T s = (r == lane) ? T(1) : T(0);
#pragma unroll
            for (int q = 0; q < r; ++q) s -= inv[(o + r) * LDI + o + q] * xc[q];
            xc[r] = s * gl_shfl(rd, r, 32);
        }
        __syncwarp();
#pragma unroll
        for (int r = 0; r < 32; ++r) inv[(o + r) * LDI + o + lane] = r >= lane ? xc[r] : T(0);
    }
    __syncthreads();
    T* tmp = &red[0][0][0];  // NPART * KGM * PR = 1024 entries: one 32 x 32 block
    // the coupling block, column c = t % 32 of rows r0 + 8 i (i < 4) a thread: four
    // independent sums side by side, each over q in the same order as one at a time
    const int cc = t & 31, r0 = t >> 5;
    {  // tmp = L21 X11
        T s0 = T(0), s1 = T(0), s2 = T(0), s3 = T(0);
#pragma unroll 4
        for (int q = cc; q < 32; ++q) {
            const T xq = inv[q * LDI + cc];
            s0 += inv[(32 + r0) * LDI + q] * xq;
            s1 += inv[(40 + r0) * LDI + q] * xq;
            s2 += inv[(48 + r0) * LDI + q] * xq;
            s3 += inv[(56 + r0) * LDI + q] * xq;
        }
        tmp[r0 * 32 + cc] = s0;
        tmp[(r0 + 8) * 32 + cc] = s1;
        tmp[(r0 + 16) * 32 + cc] = s2;
        tmp[(r0 + 24) * 32 + cc] = s3;
    }
    __syncthreads();
    {  // X21 = -X22 tmp (row r of X22 ends at its diagonal: q <= r)
        T s0 = T(0), s1 = T(0), s2 = T(0), s3 = T(0);
#pragma unroll 4
        for (int q = 0; q <= r0 + 24; ++q) {
            const T tq = tmp[q * 32 + cc];
            if (q <= r0) s0 += inv[(32 + r0) * LDI + 32 + q] * tq;
            if (q <= r0 + 8) s1 += inv[(40 + r0) * LDI + 32 + q] * tq;
            if (q <= r0 + 16) s2 += inv[(48 + r0) * LDI + 32 + q] * tq;
            s3 += inv[(56 + r0) * LDI + 32 + q] * tq;
        }
        inv[(32 + r0) * LDI + cc] = T(0) - s0;
        inv[(40 + r0) * LDI + cc] = T(0) - s1;
        inv[(48 + r0) * LDI + cc] = T(0) - s2;
        inv[(56 + r0) * LDI + cc] = T(0) - s3;
    }
    __syncthreads();  // tmp (red) and inv are read and written again below
    // the products with the earlier panels' rows: thread (row, part of the tile's columns)
    const int part = rfast ? t / PR : t % NPART;
    const int row = rfast ? t % PR : t / NPART;
    T acc[KGM];
#pragma unroll
    for (int c = 0; c < KGM; ++c) acc[c] = T(0);
    const int tiles = fw ? pi : panels - 1 - pi;
    T gv[QPT];
    if (tiles > 0) {
        const int j0 = fw ? 0 : (panels - 1) * PR, jw = min(PR, n - j0);
#pragma unroll
        for (int u = 0; u < QPT; ++u) {
            const int jj = rfast ? part * QPT + u : part + NPART * u;
            gv[u] = (row < pr && jj < jw) ? rows[row * sr + (long long)(j0 + jj) * sj] : T(0);
        }
    }
    for (int s = 0; s < tiles; ++s) {
        const int jp = fw ? s : panels - 1 - s;
        const int jw = min(PR, n - jp * PR);
        xs[cme][rme] = (cme < kc && rme < jw)
            ? gl_take(lines + (long long)jp * SET_WORDS + word, tag) : T(0);
        __syncthreads();
#pragma unroll
        for (int u = 0; u < QPT; ++u) {
            const int jj = rfast ? part * QPT + u : part + NPART * u;
            const T v = cp ? gl_cj(gv[u]) : gv[u];
            if (!gl_fin(v)) mine = 1;
#pragma unroll
            for (int c = 0; c < KGM; ++c) acc[c] += v * xs[c][jj];
        }
        if (s + 1 < tiles) {  // the next tile's loads, in flight while its solution is awaited
            const int jn = fw ? s + 1 : panels - 2 - s;
            const int n0 = jn * PR, nw = min(PR, n - n0);
#pragma unroll
            for (int u = 0; u < QPT; ++u) {
                const int jj = rfast ? part * QPT + u : part + NPART * u;
                gv[u] = (row < pr && jj < nw) ? rows[row * sr + (long long)(n0 + jj) * sj]
                                              : T(0);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int c = 0; c < KGM; ++c) red[part][c][row] = acc[c];
    if (pass != first && cme < kc && rme < pr)  // cho_solve's backward pass starts from the
        rhs = gl_take(ws + W_LINES + ((long long)g * panels + pi) * SET_WORDS + word, tag);
    __syncthreads();  // (the forward pass's rows of this panel)
    {  // v = rhs - sums, reversed for the backward pass
        T v = rhs;
        for (int p = 0; p < NPART; ++p) v -= red[p][cme][rme];
        xs[cme][fw ? rme : PR - 1 - rme] = v;
    }
    __syncthreads();
    {  // y = inv v: thread (row rr, part p of its columns), then the parts summed
        const int rr = t % PR, p = t / PR;
#pragma unroll
        for (int c = 0; c < KGM; ++c) {
            T s = T(0);
            if (c < kc) {
#pragma unroll
                for (int q = 0; q < PR / NPART; ++q) {
                    const int qq = p * (PR / NPART) + q;
                    s += inv[rr * LDI + qq] * xs[c][qq];
                }
            }
            red[p][c][rr] = s;
        }
    }
    __syncthreads();
    if (cme < kc) {
        const int rr = fw ? rme : PR - 1 - rme;
        T y = T(0);
        for (int p = 0; p < NPART; ++p) y += red[p][cme][rr];
        if (rme < pr) {
            gl_put(lines + (long long)pi * SET_WORDS + word, y, tag);  // the next link first
            x[(long long)(i0 + rme) * sxr + (long long)(c0 + cme) * sxc] = y;
            if (pass == (mode == 0 ? 0 : 1)) mx = gl_mag(y);
        }
    }
    if (other) {  // the tiles past the diagonal block on the other side, UNR loads in flight
        const int from = fw ? pi + 1 : 0, to = fw ? panels : pi;
        for (int jp = from; jp < to; ++jp) {
            const int j0 = jp * PR, jw = min(PR, n - j0);
#pragma unroll
            for (int u = 0; u < QPT; ++u) {
                const int jj = rfast ? part * QPT + u : part + NPART * u;
                gv[u] = (row < pr && jj < jw) ? rows[row * sr + (long long)(j0 + jj) * sj] : T(0);
            }
#pragma unroll
            for (int u = 0; u < QPT; ++u)
                if (!gl_fin(gv[u])) mine = 1;
        }
    }
    // the block's figures into the workspace: a shuffle fold per warp (a warp has one column)
    for (int h = 16; h > 0; h >>= 1) {
        dmax = gl_max(dmax, __shfl_xor_sync(0xffffffffu, dmax, h));
        dmin = gl_min(dmin, __shfl_xor_sync(0xffffffffu, dmin, h));
        zero = min(zero, __shfl_xor_sync(0xffffffffu, zero, h));
        sc = gl_max(sc, __shfl_xor_sync(0xffffffffu, sc, h));
        mx = gl_max(mx, __shfl_xor_sync(0xffffffffu, mx, h));
    }
    if (lane == 0) {
        if (dmax != 0.0) atomicMax(&ws[W_DMAX], gl_order_bits(dmax));
        if (!(dmin >= __longlong_as_double(0x7ff0000000000000LL)))
            atomicMin(&ws[W_DMIN], gl_order_bits(dmin));
        if (zero != GL_NONE) atomicMin(&ws[W_ZERO], zero);
        if (cme < kc) {
            if (sc != 0.0) atomicMax(&ws[W_SC + c0 + cme], gl_order_bits(sc));
            if (mx != 0.0) atomicMax(&ws[W_MX + c0 + cme], gl_order_bits(mx));
        }
    }
    const int abad = __syncthreads_or(mine);
    const int bbad = __syncthreads_or(minb);
    if (t == 0) {
        if (abad || bbad) atomicOr(&ws[W_FLAGS], (abad ? 1ULL : 0ULL) | (bbad ? 2ULL : 0ULL));
        __threadfence();
        s_last = atomicAdd(&ws[W_DONE], 1ULL) == (unsigned long long)gridDim.x - 1;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (t == 0 && (checks & 1)) {  // the rule of gl_stream_trsm on the totals
        volatile unsigned long long* w = ws;
        double f0 = __longlong_as_double((long long)w[W_DMAX]);
        double f1 = __longlong_as_double((long long)w[W_DMIN]);
        const bool zd = w[W_ZERO] != GL_NONE;
        if (unit) { f0 = 1.0; f1 = 1.0; }
        const double diag1 = f0 / (f1 > 0.0 ? f1 : 1.0);
        double bd = squared ? diag1 * diag1 : diag1;
        const double dm = squared ? f0 * f0 : f0;
        for (int c = 0; c < k; ++c) {
            const double s = __longlong_as_double((long long)w[W_SC + c]);
            const double m = __longlong_as_double((long long)w[W_MX + c]);
            bd = gl_max(bd, dm * (s > 0.0 ? m / s : 0.0));
        }
        const unsigned long long fl = w[W_FLAGS] | ((zd && !unit) ? 4ULL : 0ULL);
        if (hostw) {  // the 3 words straight into the caller's mapped host memory: the
            hostw[0] = fl;  // device summary keeps its identities
            hostw[1] = gl_order_bits(bd);
            hostw[2] = GL_NONE;
        } else {
            gl_summary(summ, fl, gl_order_bits(bd), 1, GL_NONE, 1ULL);
        }
    }
    __syncthreads();
    for (int e = t; e < W_EPOCH; e += NT)
        ws[e] = e == W_DMIN ? INF_BITS : (e == W_ZERO ? GL_NONE : 0ULL);
    if (tag == 0xffffffffu) {  // the tags are spent: clear every tagged word, start again at 1
        const long long words = (long long)ws[W_WORDS];
        for (long long e = W_LINES + t; e < words; e += NT) ws[e] = 0ULL;
    }
    if (t == 0) ws[W_EPOCH] = tag == 0xffffffffu ? 0ULL : (unsigned long long)tag;
    if (t == 0 && (checks & 1) && hostw) {  // then the epoch: the host's sign that they are in
        __threadfence_system();
        *(volatile unsigned long long*)(hostw + 3) = (unsigned long long)epoch;
    }
}
