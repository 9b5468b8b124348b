// The matrix-free solver's kernel-matrix work: every entry c s(|z_i - z_j|^2) is made in
// registers from the scaled points z (n x GL_D, row-major, GL_REAL) and used at once, so the
// n x n matrix never reaches memory. GL_REAL (float or double) is the arithmetic of the entries
// and of the sums within one tile of GL_BJ columns; the sums across tiles are double.
// 256 threads per block, GL_BI = 32 GL_RI rows of the block, GL_BJ columns per step.
#define GL_RI (GL_BI / 32)
#define GL_THREADS 256

// out[i, q] = sum_j c s(r_ij) v[j, q] for q < t (padded to GL_TP = 8 GL_RC columns): step by
// step, the tile's entries into shared memory (each made once), then a register-blocked
// product in which thread (tr, tc) owns rows tr + 32 a and columns tc GL_RC + b.
#define GL_RC (GL_TP / 8)
extern "C" __global__ void __launch_bounds__(GL_THREADS)
gl_gp_product(const GL_REAL* __restrict__ z, const double* __restrict__ v,
              double* __restrict__ out, const long long n, const int t, const long long ldv,
              const long long ldo, const GL_REAL c) {
    __shared__ GL_REAL zi[GL_BI][GL_D];
    __shared__ GL_REAL zj[GL_D][GL_BJ];
    __shared__ GL_REAL ks[GL_BI][GL_BJ + 1];  // + 1: the product's column reads miss no bank
    __shared__ GL_REAL vs[GL_BJ][GL_TP];
    const int tid = threadIdx.x, tr = tid >> 3, tc = tid & 7;
    const long long i0 = (long long)blockIdx.x * GL_BI;
    for (int e = tid; e < GL_BI * GL_D; e += GL_THREADS) {
        const long long i = i0 + e / GL_D;
        zi[e / GL_D][e % GL_D] = i < n ? z[i * GL_D + e % GL_D] : GL_REAL(0);
    }
    double total[GL_RI][GL_RC];
#pragma unroll
    for (int a = 0; a < GL_RI; ++a)
#pragma unroll
        for (int b = 0; b < GL_RC; ++b) total[a][b] = 0.0;
    for (long long j0 = 0; j0 < n; j0 += GL_BJ) {
        __syncthreads();  // the last step's tiles are read (and zi written, the first time)
        for (int e = tid; e < GL_BJ * GL_D; e += GL_THREADS) {
            const long long j = j0 + e / GL_D;
            zj[e % GL_D][e / GL_D] = j < n ? z[j * GL_D + e % GL_D] : GL_REAL(0);
        }
        for (int e = tid; e < GL_BJ * GL_TP; e += GL_THREADS) {
            const long long j = j0 + e / GL_TP;
            const int q = e % GL_TP;
            vs[e / GL_TP][q] = (j < n && q < t) ? (GL_REAL)v[j * ldv + q] : GL_REAL(0);
        }
        __syncthreads();
        for (int e = tid; e < GL_BI * GL_BJ; e += GL_THREADS) {
            const int r = e / GL_BJ, col = e % GL_BJ;
            GL_REAL r2 = 0;
#pragma unroll
            for (int d = 0; d < GL_D; ++d) {
                const GL_REAL df = zi[r][d] - zj[d][col];
                r2 += df * df;
            }
            GL_REAL s, h;
            gl_sh(r2, s, h);
            ks[r][col] = c * s;  // padded columns meet zero rows of vs: no effect
        }
        __syncthreads();
        GL_REAL acc[GL_RI][GL_RC];
#pragma unroll
        for (int a = 0; a < GL_RI; ++a)
#pragma unroll
            for (int b = 0; b < GL_RC; ++b) acc[a][b] = 0;
#pragma unroll 4
        for (int col = 0; col < GL_BJ; ++col) {
            GL_REAL kv[GL_RI], vv[GL_RC];
#pragma unroll
            for (int a = 0; a < GL_RI; ++a) kv[a] = ks[tr + 32 * a][col];
#pragma unroll
            for (int b = 0; b < GL_RC; ++b) vv[b] = vs[col][tc * GL_RC + b];
#pragma unroll
            for (int a = 0; a < GL_RI; ++a)
#pragma unroll
                for (int b = 0; b < GL_RC; ++b) acc[a][b] += kv[a] * vv[b];
        }
#pragma unroll
        for (int a = 0; a < GL_RI; ++a)
#pragma unroll
            for (int b = 0; b < GL_RC; ++b) total[a][b] += (double)acc[a][b];
    }
#pragma unroll
    for (int a = 0; a < GL_RI; ++a) {
        const long long i = i0 + tr + 32 * a;
        if (i >= n) continue;
#pragma unroll
        for (int b = 0; b < GL_RC; ++b) {
            const int q = tc * GL_RC + b;
            if (q < t) out[i * ldo + q] = total[a][b];
        }
    }
}

// The gradient's sums over every pair (i, j) with W_ij = sum_q a[i, q] b[j, q] (q < m, both
// n x m row-major, double): acc[0] += sum W c s, acc[1 + d] += sum W c h (z_id - z_jd)^2.
// The block's rows of a stay in dynamic shared memory (m (GL_BI + 1) entries); each step
// makes W's tile (GL_BI x GL_BJ) with b's rows through shared memory in chunks of GL_MQ,
// thread (tr, tc) owning rows tr + 32 p and columns tc + 8 s, then its entries' kernel terms.
// Per block, the sums are reduced and added atomically.
#define GL_RJ (GL_BJ / 8)
#define GL_NACC (GL_D + 1)
// Two blocks an SM: at most 128 registers a thread.
extern "C" __global__ void __launch_bounds__(GL_THREADS, 2)
gl_gp_factor_contract(const GL_REAL* __restrict__ z, const double* __restrict__ a,
                      const double* __restrict__ b, double* __restrict__ acc,
                      const long long n, const int m, const GL_REAL c) {
    extern __shared__ unsigned char gl_dynamic[];
    GL_REAL* as = reinterpret_cast<GL_REAL*>(gl_dynamic);  // as[q (GL_BI + 1) + r]
    __shared__ GL_REAL zi[GL_BI][GL_D + 1];  // + 1: rows read by 4 threads of a warp at once
    __shared__ GL_REAL zj[GL_BJ][GL_D + 1];
    __shared__ GL_REAL bs[GL_MQ][GL_BJ + 1];  // + 1: its column writes miss no bank
    const int tid = threadIdx.x, tr = tid >> 3, tc = tid & 7;
    const long long i0 = (long long)blockIdx.x * GL_BI;
    for (int e = tid; e < GL_BI * GL_D; e += GL_THREADS) {
        const long long i = i0 + e / GL_D;
        zi[e / GL_D][e % GL_D] = i < n ? z[i * GL_D + e % GL_D] : GL_REAL(0);
    }
    for (long long e = tid; e < (long long)GL_BI * m; e += GL_THREADS) {
        const int r = (int)(e / m), q = (int)(e % m);
        const long long i = i0 + r;
        as[q * (GL_BI + 1) + r] = i < n ? (GL_REAL)a[i * m + q] : GL_REAL(0);
    }
    double sums[GL_NACC];
#pragma unroll
    for (int q = 0; q < GL_NACC; ++q) sums[q] = 0.0;
    for (long long j0 = 0; j0 < n; j0 += GL_BJ) {
        __syncthreads();  // the last step's zj is read
        for (int e = tid; e < GL_BJ * GL_D; e += GL_THREADS) {
            const long long j = j0 + e / GL_D;
            zj[e / GL_D][e % GL_D] = j < n ? z[j * GL_D + e % GL_D] : GL_REAL(0);
        }
        GL_REAL w[GL_RI][GL_RJ];
#pragma unroll
        for (int p = 0; p < GL_RI; ++p)
#pragma unroll
            for (int s = 0; s < GL_RJ; ++s) w[p][s] = 0;
        for (int q0 = 0; q0 < m; q0 += GL_MQ) {
            __syncthreads();  // the last chunk is read
            for (int e = tid; e < GL_BJ * GL_MQ; e += GL_THREADS) {
                const int r = e / GL_MQ, q = e % GL_MQ;
                const long long j = j0 + r;
                bs[q][r] = (j < n && q0 + q < m) ? (GL_REAL)b[j * m + q0 + q] : GL_REAL(0);
            }
            __syncthreads();
            const int qn = min(GL_MQ, m - q0);
#pragma unroll 4
            for (int q = 0; q < qn; ++q) {
                GL_REAL av[GL_RI], bv[GL_RJ];
#pragma unroll
                for (int p = 0; p < GL_RI; ++p) av[p] = as[(q0 + q) * (GL_BI + 1) + tr + 32 * p];
#pragma unroll
                for (int s = 0; s < GL_RJ; ++s) bv[s] = bs[q][tc + 8 * s];
#pragma unroll
                for (int p = 0; p < GL_RI; ++p)
#pragma unroll
                    for (int s = 0; s < GL_RJ; ++s) w[p][s] += av[p] * bv[s];
            }
        }
        // padded rows and columns hold W = 0: no effect on the sums
#pragma unroll
        for (int p = 0; p < GL_RI; ++p) {
#pragma unroll
            for (int s = 0; s < GL_RJ; ++s) {
                const int r = tr + 32 * p, col = tc + 8 * s;
                GL_REAL df[GL_D], r2 = 0;
#pragma unroll
                for (int d = 0; d < GL_D; ++d) {
                    df[d] = zi[r][d] - zj[col][d];
                    r2 += df[d] * df[d];
                }
                GL_REAL sv, hv;
                gl_sh(r2, sv, hv);
                const double wc = (double)w[p][s] * (double)c;
                sums[0] += wc * (double)sv;
                const double wh = wc * (double)hv;
#pragma unroll
                for (int d = 0; d < GL_D; ++d) sums[1 + d] += wh * (double)(df[d] * df[d]);
            }
        }
    }
    __shared__ double part[GL_THREADS / 32][GL_NACC];
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int q = 0; q < GL_NACC; ++q) {
        double x = sums[q];
        for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
        if (lane == 0) part[warp][q] = x;
    }
    __syncthreads();
    if (tid < GL_NACC) {
        double x = 0.0;
        for (int y = 0; y < GL_THREADS / 32; ++y) x += part[y][tid];
        atomicAdd(&acc[tid], x);
    }
}
