// The diagonal blocks of order <= 32 of the column-major lower-triangular n x n matrix v
// (leading dimension n), inverted in place: block b is rows/columns [b*32, b*32 + m). One
// warp per block; thread t solves column t of the block's inverse by forward substitution
// (x_i = (delta_it - sum_{t <= k < i} L_ik x_k) / L_ii), all threads reading the same L_ik.
// The entries above the diagonal of each block are written as zeros.
extern "C" __global__ void gl_tri_inv_leaves(double* __restrict__ v, const long long n) {
    __shared__ double ls[32][33];
    __shared__ double xs[32][33];
    const long long r0 = (long long)blockIdx.x * 32;
    const long long left = n - r0;
    const int m = left < 32 ? (int)left : 32;
    const int t = threadIdx.x;
    for (int k = 0; k < m; ++k) {
        if (t < m) ls[t][k] = v[(r0 + k) * n + r0 + t];
    }
    __syncthreads();
    if (t < m) {
        for (int i = 0; i < m; ++i) {
            double s = (i == t) ? 1.0 : 0.0;
            for (int k = t; k < i; ++k) s -= ls[i][k] * xs[k][t];
            xs[i][t] = (i < t) ? 0.0 : s / ls[i][i];
        }
    }
    __syncthreads();
    for (int k = 0; k < m; ++k) {
        if (t < m) v[(r0 + k) * n + r0 + t] = xs[t][k];
    }
}
