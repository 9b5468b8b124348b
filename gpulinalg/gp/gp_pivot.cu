// The matrix-free solver's pivoted-Cholesky preconditioner, one rank step in two launches
// with the pivot kept on the device (no read-back per step): gl_gp_pivot_select reduces the
// remaining diagonal (or the last step's per-block maxima) to the pivot, gl_gp_pivot_row
// makes that pivot's row of the factor from the scaled points z (n x GL_D, row-major, double)
// and the earlier rows, updates the diagonal and leaves its own per-block maxima.
// state: [0] pivot (as double), [1] its diagonal, [2] the floor (set at step 0), [3] ok.
#define GL_PIVOT_THREADS 256
#define GL_LP_CHUNK 1024

// The larger of (v, i) and (w, j): a NaN wins (argmax's rule), ties go to the lower index.
__device__ __forceinline__ void gl_pick(double& v, long long& i, const double w,
                                        const long long j) {
    const bool vn = isnan(v), wn = isnan(w);
    if ((wn && !vn) || (!vn && !wn && (w > v || (w == v && j < i))) ||
        (wn && vn && j < i)) {
        v = w; i = j;
    }
}

// Block-wide pick of (v, i) into thread 0's pair.
__device__ __forceinline__ void gl_block_pick(double& v, long long& i) {
    __shared__ double sv[GL_PIVOT_THREADS];
    __shared__ long long si[GL_PIVOT_THREADS];
    sv[threadIdx.x] = v; si[threadIdx.x] = i;
    __syncthreads();
    for (int s = GL_PIVOT_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) gl_pick(sv[threadIdx.x], si[threadIdx.x], sv[threadIdx.x + s],
                                     si[threadIdx.x + s]);
        __syncthreads();
    }
    v = sv[0]; i = si[0];
}

// One block: the pivot among count candidates (values vals, indices idx where indexed, else
// the position), its diagonal, the floor rank_tol * the first pivot's diagonal (step 0), and
// live[m] = ok = diagonal > floor (false for NaN).
extern "C" __global__ void __launch_bounds__(GL_PIVOT_THREADS)
gl_gp_pivot_select(const double* __restrict__ vals, const long long* __restrict__ idx,
                   const int indexed, const long long count, double* __restrict__ state,
                   bool* __restrict__ live, const int m, const double rank_tol) {
    double v = -__longlong_as_double(0x7ff0000000000000LL);
    long long i = 0x7fffffffffffffffLL;
    for (long long e = threadIdx.x; e < count; e += GL_PIVOT_THREADS)
        gl_pick(v, i, vals[e], indexed ? idx[e] : e);
    gl_block_pick(v, i);
    if (threadIdx.x == 0) {
        if (m == 0) state[2] = rank_tol * v;
        const bool ok = v > state[2];
        state[0] = (double)i; state[1] = v; state[3] = ok ? 1.0 : 0.0;
        live[m] = ok;
    }
}

// Row m of the factor (rows: rank x n, row-major): rows[m, i] = (c s(r_ip) - sum_{j<m}
// rows[j, i] rows[j, p]) / sqrt(diag_p) where ok, else 0; diag[i] -= rows[m, i]^2 and
// diag[p] = 0 where ok; each block's largest remaining diagonal into (part_v, part_i).
extern "C" __global__ void __launch_bounds__(GL_PIVOT_THREADS)
gl_gp_pivot_row(const double* __restrict__ z, double* __restrict__ rows,
                double* __restrict__ diag, const double* __restrict__ state,
                double* __restrict__ part_v, long long* __restrict__ part_i,
                const long long n, const int m, const double c) {
    __shared__ double lp[GL_LP_CHUNK];
    __shared__ double zp[GL_D];
    const bool ok = state[3] != 0.0;
    const long long p = (long long)state[0];
    const long long i = (long long)blockIdx.x * GL_PIVOT_THREADS + threadIdx.x;
    if (ok && threadIdx.x < GL_D) zp[threadIdx.x] = z[p * GL_D + threadIdx.x];
    double acc = 0.0;
    for (int j0 = 0; ok && j0 < m; j0 += GL_LP_CHUNK) {  // the pivot's earlier entries, chunked
        const int j1 = min(m, j0 + GL_LP_CHUNK);
        __syncthreads();
        for (int j = j0 + threadIdx.x; j < j1; j += GL_PIVOT_THREADS) lp[j - j0] = rows[j * n + p];
        __syncthreads();
        if (i < n)
            for (int j = j0; j < j1; ++j) acc += rows[j * n + i] * lp[j - j0];
    }
    __syncthreads();
    double d = -__longlong_as_double(0x7ff0000000000000LL);
    if (i < n) {
        double v = 0.0;
        if (ok) {
            double r2 = 0.0;
#pragma unroll
            for (int k = 0; k < GL_D; ++k) {
                const double t = z[i * GL_D + k] - zp[k];
                r2 += t * t;
            }
            double s, h;
            gl_sh(r2, s, h);
            v = (c * s - acc) / sqrt(state[1]);
        }
        rows[(long long)m * n + i] = v;
        d = diag[i];
        if (ok) d = (i == p) ? 0.0 : d - v * v;
        diag[i] = d;
    }
    long long at = i < n ? i : 0x7fffffffffffffffLL;
    gl_block_pick(d, at);
    if (threadIdx.x == 0) { part_v[blockIdx.x] = d; part_i[blockIdx.x] = at; }
}
