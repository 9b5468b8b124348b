__device__ __forceinline__ double mag(float x) { return (double)fabsf(x); }
__device__ __forceinline__ double mag(double x) { return fabs(x); }
__device__ __forceinline__ double mag(complex<float> x) { return (double)abs(x); }
__device__ __forceinline__ double mag(complex<double> x) { return abs(x); }
__device__ __forceinline__ float cj(float x) { return x; }
__device__ __forceinline__ double cj(double x) { return x; }
__device__ __forceinline__ complex<float> cj(complex<float> x) { return conj(x); }
__device__ __forceinline__ complex<double> cj(complex<double> x) { return conj(x); }
// flip_signs of ._svd_xp, in place, one warp per (matrix b, row i < k of Vh): the first
// column j with the largest |vh[b, i, j]| (in T's precision, as NumPy's argmax of abs) gives
// phase = vh / |vh| (1 when zero); row i of Vh takes conj(phase), column i of U phase.
extern "C" __global__ void gl_svd_signs(T* u, T* vh, const long long rows, const long long k,
                                        const long long m, const long long n,
                                        const long long ub, const long long ur,
                                        const long long uc, const long long vb,
                                        const long long vr, const long long vc) {
    const long long w = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (w >= rows) return;  // the whole warp
    const long long b = w / k, i = w % k;
    T* row = vh + b * vb + i * vr;
    double best = -1.0;
    long long at = 0;
    for (long long j = lane; j < n; j += 32) {
        const double a = mag(row[j * vc]);
        if (a > best || (isnan(a) && !isnan(best))) { best = a; at = j; }
        if (isnan(best)) break;  // NumPy's argmax stops at the first NaN
    }
    for (int h = 16; h > 0; h >>= 1) {
        const double ob = __shfl_down_sync(0xffffffffu, best, h);
        const long long oa = __shfl_down_sync(0xffffffffu, at, h);
        const bool nan_o = isnan(ob), nan_b = isnan(best);
        if ((nan_o && (!nan_b || oa < at)) || (!nan_o && !nan_b &&
                                                (ob > best || (ob == best && oa < at)))) {
            best = ob;
            at = oa;
        }
    }
    at = __shfl_sync(0xffffffffu, at, 0);
    best = __shfl_sync(0xffffffffu, best, 0);
    const T peak = row[at * vc];
    __syncwarp();  // every lane has read the peak before any lane rescales the row
    const T phase = best > 0 ? peak / T(best) : T(1);
    const T back = cj(phase);
    for (long long j = lane; j < n; j += 32) row[j * vc] = row[j * vc] * back;
    T* col = u + b * ub + i * uc;
    for (long long r = lane; r < m; r += 32) col[r * ur] = col[r * ur] * phase;
}
