// w: (2l + 1) x k float64, rows [W; W / sigma; sigma]. Thread r < m: U[r, :] = q[r, :] W;
// thread m + j < m + n: Vh[:, j] = btd[j, :] (W / sigma); the first k threads also write S.
extern "C" __global__ void gl_lift(const T* __restrict__ q, const double* __restrict__ btd,
                                   const double* __restrict__ w, T* __restrict__ u,
                                   T* __restrict__ vh, T* __restrict__ s, const int l,
                                   const int k, const long long m, const long long n) {
    extern __shared__ double ws[];
    for (int i = threadIdx.x; i < (2 * l + 1) * k; i += blockDim.x) ws[i] = w[i];
    __syncthreads();
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < k) s[r] = (T)ws[2 * l * k + r];
    if (r < m) {
        const T* x = q + r * l;
        for (int i = 0; i < k; ++i) {
            double acc = 0.0;
            for (int t = 0; t < l; ++t) acc += (double)x[t] * ws[t * k + i];
            u[r * k + i] = (T)acc;
        }
    } else if (r < m + n) {
        const long long j = r - m;
        const double* x = btd + j * l;
        const double* wl = ws + l * k;
        for (int i = 0; i < k; ++i) {
            double acc = 0.0;
            for (int t = 0; t < l; ++t) acc += x[t] * wl[t * k + i];
            vh[i * n + j] = (T)acc;
        }
    }
}
