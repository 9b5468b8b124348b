// flag[0] = 1 when x[0:size] holds NaN or Inf (complex input: its parts, size doubled).
// A grid-stride loop, UNR coalesced loads in flight per thread before any test: CuPy's
// elementwise kernel (one entry a thread) read float32 at a fifth of the H200's bandwidth.
#define UNR 8
extern "C" __global__ void __launch_bounds__(256) gl_flag_flat(const R* __restrict__ x,
                                                               const long long size,
                                                               U* __restrict__ flag) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    int bad = 0;
    for (; i + (UNR - 1) * stride < size; i += UNR * stride) {
        R v[UNR];
#pragma unroll
        for (int u = 0; u < UNR; ++u) v[u] = x[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNR; ++u) bad |= !isfinite(v[u]);
    }
    for (; i < size; i += stride) bad |= !isfinite(x[i]);
    if (__syncthreads_or(bad) && threadIdx.x == 0) flag[0] = (U)1;
}
