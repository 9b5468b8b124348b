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
