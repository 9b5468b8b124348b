// Vector v: x[v * vstride + i * step], i < len. sign[v] = -1 when its first largest-magnitude
// entry is negative, else +1 (argmax(abs(.)) then a sign test). With scale, the vector and
// its partner (y[v * ystride + i * ystep], i < ylen) are multiplied by sign[v] in place.
extern "C" __global__ void gl_flip_signs(T* __restrict__ x, const long long len,
                                         const long long step, const long long vstride,
                                         T* __restrict__ sign, const int scale,
                                         T* __restrict__ y, const long long ylen,
                                         const long long ystep, const long long ystride) {
    __shared__ double best[256];
    __shared__ long long where[256];
    T* p = x + blockIdx.x * vstride;
    double m = -1.0;
    long long at = len;
    for (long long i = threadIdx.x; i < len; i += blockDim.x) {
        const double v = fabs((double)p[i * step]);
        if (v > m) { m = v; at = i; }
    }
    best[threadIdx.x] = m;
    where[threadIdx.x] = at;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const double o = best[threadIdx.x + s];
            const long long oi = where[threadIdx.x + s];
            if (o > best[threadIdx.x] || (o == best[threadIdx.x] && oi < where[threadIdx.x])) {
                best[threadIdx.x] = o;
                where[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    const bool neg = where[0] < len && p[where[0] * step] < (T)0;
    __syncthreads();  // every thread has read the pivot before anything is scaled
    if (threadIdx.x == 0) sign[blockIdx.x] = neg ? (T)-1 : (T)1;
    if (scale && neg) {
        for (long long i = threadIdx.x; i < len; i += blockDim.x) p[i * step] = -p[i * step];
        T* r = y + blockIdx.x * ystride;
        for (long long i = threadIdx.x; i < ylen; i += blockDim.x) r[i * ystep] = -r[i * ystep];
    }
}
