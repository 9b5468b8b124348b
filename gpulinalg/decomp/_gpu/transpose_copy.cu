// dst[b, p, q] = src[b, p, q] for a (B, P, Q) stack with src contiguous along q and dst
// contiguous along p; with zero_above, dst[b, p, q] = 0 where q > p (src is not read there,
// unless flag is given). flag (nullable): set to 1 when src holds NaN or Inf anywhere.
extern "C" __global__ void gl_transpose_copy(const T* __restrict__ src, T* __restrict__ dst,
                                             const long long P, const long long Q,
                                             const long long sb, const long long sp,
                                             const long long db, const long long dq,
                                             const int zero_above, int* __restrict__ flag) {
    __shared__ T tile[32][33];
    const long long p0 = (long long)blockIdx.y * 32, q0 = (long long)blockIdx.x * 32;
    const T* s = src + (long long)blockIdx.z * sb;
    T* d = dst + (long long)blockIdx.z * db;
    const bool all_zero = zero_above && q0 > p0 + 31;
    if (!all_zero || flag != nullptr) {
        int bad = 0;
        for (int i = threadIdx.y; i < 32; i += blockDim.y) {
            const long long p = p0 + i, q = q0 + threadIdx.x;
            const bool keep = !(zero_above && q > p);
            if (p < P && q < Q && (keep || flag != nullptr)) {
                const T v = s[p * sp + q];
                if (!gl_fin(v)) bad = 1;
                if (keep) tile[i][threadIdx.x] = v;
            }
        }
        if (bad && flag != nullptr) flag[0] = 1;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        const long long q = q0 + i, p = p0 + threadIdx.x;
        if (p < P && q < Q) d[p + q * dq] = (zero_above && q > p) ? T(0) : tile[threadIdx.x][i];
    }
}
