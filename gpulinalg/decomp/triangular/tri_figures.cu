__device__ __forceinline__ double mag(float x) { return fabs((double)x); }
__device__ __forceinline__ double mag(double x) { return fabs(x); }
__device__ __forceinline__ double mag(complex<float> x) { return (double)abs(x); }
__device__ __forceinline__ double mag(complex<double> x) { return abs(x); }
// NaN sticks, as in NumPy's max and min.
__device__ __forceinline__ double nmax(double a, double b) { return (isnan(a) || a >= b) ? a : b; }
__device__ __forceinline__ double nmin(double a, double b) { return (isnan(a) || a <= b) ? a : b; }

// "Row" r of a (R, L) strided view (strides in elements) holds L entries
// src[b * sb + j * sk + l * sl] with r = b * k + j (columns of (B, n, k) stacks). diag = 1:
// out[3r] = max|.|, out[3r+1] = min|.|, out[3r+2] = first l with a zero entry (-1: none).
// diag = 0: out[r] = max|.|. warp = 1: one warp per row, 8 rows per block of 256 (short
// rows: no shared memory, no block barrier); warp = 0: one block per row (long rows).
extern "C" __global__ void gl_tri_figures(const T* __restrict__ src, double* __restrict__ out,
                                          const long long k, const long long L,
                                          const long long sb, const long long sk,
                                          const long long sl, const int diag,
                                          const long long R, const int warp) {
    __shared__ double smax[256], smin[256];
    __shared__ long long sz[256];
    const int lanes = warp ? 32 : blockDim.x;
    const int t = warp ? (threadIdx.x & 31) : threadIdx.x;
    const long long r = warp ? (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)
                             : (long long)blockIdx.x;
    if (r >= R) return;  // a whole warp (warp = 1) or block (warp = 0) leaves together
    const long long b = r / k, j = r % k;
    const T* p = src + b * sb + j * sk;
    double mx = 0.0, mn = __longlong_as_double(0x7ff0000000000000LL);  // +inf
    long long z = 0x7fffffffffffffffLL;
    for (long long l = t; l < L; l += lanes) {
        const double v = mag(p[l * sl]);
        mx = nmax(mx, v);
        mn = nmin(mn, v);
        if (v == 0.0 && l < z) z = l;
    }
    if (warp) {
        for (int h = 16; h > 0; h >>= 1) {
            mx = nmax(mx, __shfl_down_sync(0xffffffffu, mx, h));
            mn = nmin(mn, __shfl_down_sync(0xffffffffu, mn, h));
            const long long zo = __shfl_down_sync(0xffffffffu, z, h);
            if (zo < z) z = zo;
        }
    } else {
        smax[t] = mx; smin[t] = mn; sz[t] = z;
        __syncthreads();
        for (int h = blockDim.x / 2; h > 0; h >>= 1) {
            if (t < h) {
                smax[t] = nmax(smax[t], smax[t + h]);
                smin[t] = nmin(smin[t], smin[t + h]);
                if (sz[t + h] < sz[t]) sz[t] = sz[t + h];
            }
            __syncthreads();
        }
        mx = smax[0]; mn = smin[0]; z = sz[0];
    }
    if (t != 0) return;
    if (diag) {
        out[3 * r] = mx;
        out[3 * r + 1] = mn;
        out[3 * r + 2] = z == 0x7fffffffffffffffLL ? -1.0 : (double)z;
    } else {
        out[r] = mx;
    }
}
