// Over the lower triangle (i >= j) of the column-major K^-1 (kinv[j * n + i]): with
// W_ij = sum_t alpha[i, t] alpha[j, t] - nt K^-1_ij and weight 2 off the diagonal (W is
// symmetric), acc[0] += sum w W c s, acc[1 + d] += sum w W c h (z_id - z_jd)^2,
// acc[GL_D + 1] += sum_i W_ii. Block (32, 8): threads along i (coalesced reads), a tile of
// 32 rows x 64 columns per block, blocks wholly above the diagonal return at once.
#define GL_NACC (GL_D + 2)

// The accumulators a of every thread of a (32, 8) block summed and added to acc atomically.
__device__ __forceinline__ void gl_block_add(const double (&a)[GL_NACC],
                                             double* __restrict__ acc) {
    __shared__ double part[8][GL_NACC];
    const int lane = threadIdx.x;  // blockDim.x == 32: one warp per threadIdx.y
#pragma unroll
    for (int q = 0; q < GL_NACC; ++q) {
        double v = a[q];
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0) part[threadIdx.y][q] = v;
    }
    __syncthreads();
    const int tid = threadIdx.y * 32 + lane;
    if (tid < GL_NACC) {
        double v = 0.0;
        for (int y = 0; y < 8; ++y) v += part[y][tid];
        atomicAdd(&acc[tid], v);
    }
}

extern "C" __global__ void gl_gp_contract(const double* __restrict__ kinv,
                                          const double* __restrict__ alpha,
                                          const double* __restrict__ z,
                                          double* __restrict__ acc, const long long n,
                                          const int nt, const double c) {
    const long long i0 = (long long)blockIdx.x * 32, j0 = (long long)blockIdx.y * 64;
    if (i0 + 31 < j0) return;  // the whole block: every thread leaves together
    const long long i = i0 + threadIdx.x;
    double a[GL_NACC];
#pragma unroll
    for (int q = 0; q < GL_NACC; ++q) a[q] = 0.0;
    if (i < n) {
        double zi[GL_D];
#pragma unroll
        for (int d = 0; d < GL_D; ++d) zi[d] = z[i * GL_D + d];
        for (int m = threadIdx.y; m < 64; m += 8) {
            const long long j = j0 + m;
            if (j > i || j >= n) break;
            double w = -nt * kinv[j * n + i];
            for (int t = 0; t < nt; ++t) w += alpha[i * nt + t] * alpha[j * nt + t];
            double r2 = 0.0, df[GL_D];
#pragma unroll
            for (int d = 0; d < GL_D; ++d) {
                df[d] = zi[d] - z[j * GL_D + d];
                r2 += df[d] * df[d];
            }
            double s, h;
            gl_sh(r2, s, h);
            const double wc = (i == j ? 1.0 : 2.0) * w * c;
            a[0] += wc * s;
            const double wh = wc * h;
#pragma unroll
            for (int d = 0; d < GL_D; ++d) a[1 + d] += wh * df[d] * df[d];
            if (i == j) a[GL_D + 1] += w;
        }
    }
    gl_block_add(a, acc);
}

#ifndef GL_STORED
#define GL_STORED double
#endif
// Over the whole of a weight matrix W (n x n row-major, GL_STORED; any W: the sums need no
// symmetry): acc[0] += sum W c s, acc[1 + d] += sum W c h (z_id - z_jd)^2; acc[GL_D + 1] is
// left alone. Block (32, 8): threads along j (coalesced reads of W's rows), 32 rows i a block.
extern "C" __global__ void gl_gp_weight_contract(const GL_STORED* __restrict__ w,
                                                 const double* __restrict__ z,
                                                 double* __restrict__ acc, const long long n,
                                                 const double c) {
    const long long j = (long long)blockIdx.x * 32 + threadIdx.x;
    const long long i0 = (long long)blockIdx.y * 32;
    double a[GL_NACC];
#pragma unroll
    for (int q = 0; q < GL_NACC; ++q) a[q] = 0.0;
    if (j < n) {
        double zj[GL_D];
#pragma unroll
        for (int d = 0; d < GL_D; ++d) zj[d] = z[j * GL_D + d];
        for (int r = threadIdx.y; r < 32; r += 8) {
            const long long i = i0 + r;
            if (i >= n) break;
            double r2 = 0.0, df[GL_D];
#pragma unroll
            for (int d = 0; d < GL_D; ++d) {
                df[d] = z[i * GL_D + d] - zj[d];
                r2 += df[d] * df[d];
            }
            double s, h;
            gl_sh(r2, s, h);
            const double wc = (double)w[i * n + j] * c;
            a[0] += wc * s;
            const double wh = wc * h;
#pragma unroll
            for (int d = 0; d < GL_D; ++d) a[1 + d] += wh * df[d] * df[d];
        }
    }
    gl_block_add(a, acc);
}
