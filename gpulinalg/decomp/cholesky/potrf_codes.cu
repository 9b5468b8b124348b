// Block (b, c) reads entries [c * 1024, c * 1024 + 1024) of matrix b's diagonal; a
// non-finite entry j turns info[b] == 0 into NONFINITE + (smallest such j). potrf's own
// codes (failed minor > 0, argument error < 0) are never overwritten.
extern "C" __global__ void gl_potrf_codes(const T* __restrict__ w, int* __restrict__ info,
                                          const long long n, const long long sb,
                                          const long long sd, const int nonfinite) {
    __shared__ int first;
    const long long b = blockIdx.x;
    const long long j0 = (long long)blockIdx.y * 1024;
    if (threadIdx.x == 0) first = 0x7fffffff;
    __syncthreads();
    const T* d = w + b * sb;
    const long long j1 = j0 + 1024 < n ? j0 + 1024 : n;
    for (long long j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        if (!gl_fin(d[j * sd])) atomicMin(&first, (int)j);
    }
    __syncthreads();
    if (threadIdx.x != 0 || first == 0x7fffffff) return;
    const int want = nonfinite + first;
    int old = info[b];
    while (old == 0 || (old >= nonfinite && old > want)) {
        const int seen = atomicCAS(&info[b], old, want);
        if (seen == old) break;
        old = seen;
    }
}
