// Block column j (NB columns, e = j + NB) of a stack of column-major matrices, after the
// diagonal blocks were factored: the thread block (matrix blockIdx.x, chunk blockIdx.y)
// reads L11 = a[j:e, j:e] (lower) to shared memory, and thread t solves panel row
// r = e + ROWS * chunk + t, x L11^H = a[r, j:e], in registers, x written over a[r, j:e].
// With zero, it also zeroes a[j:e, r] for its chunk's rows (coalesced along the block row).
extern "C" __global__ void __launch_bounds__(ROWS)
gl_blocked_panel(T* __restrict__ a, const int n, const int j, const int zero) {
    __shared__ T l[NB * NB];  // L11 column-major: L11[c][q] at l[q * NB + c]
    __shared__ R dinv[NB];
    T* base = a + (long long)blockIdx.x * n * n;
    const int t = threadIdx.x, e = j + NB, first = e + ROWS * blockIdx.y;
    for (int idx = t; idx < NB * NB; idx += ROWS) {
        const int r = idx % NB, c = idx / NB;
        l[idx] = r >= c ? base[(long long)(j + c) * n + j + r] : T(0);
    }
    __syncthreads();
    if (t < NB) dinv[t] = R(1) / gl_re(l[t * NB + t]);
    __syncthreads();
    const int r = first + t;
    if (r < n) {
        T x[NB];
#pragma unroll
        for (int c = 0; c < NB; ++c) x[c] = base[(long long)(j + c) * n + r];
#pragma unroll
        for (int c = 0; c < NB; ++c) {
            T v = x[c];
#pragma unroll
            for (int q = 0; q < c; ++q) v -= x[q] * gl_cj(l[q * NB + c]);
            x[c] = v * dinv[c];
        }
#pragma unroll
        for (int c = 0; c < NB; ++c) base[(long long)(j + c) * n + r] = x[c];
    }
    if (zero) {
        const int rows = min(ROWS, n - first);
        for (int idx = t; idx < NB * rows; idx += ROWS) {
            base[(long long)(first + idx / NB) * n + j + idx % NB] = T(0);
        }
    }
}
