__device__ __forceinline__ double gl_conj(double x) { return x; }
__device__ __forceinline__ complex<double> gl_conj(complex<double> x) { return conj(x); }
__device__ __forceinline__ double gl_re(double x) { return x; }
__device__ __forceinline__ double gl_re(complex<double> x) { return x.real(); }

// [G + shift I | I] is reduced by Gaussian elimination without pivoting, one barrier per
// column: M [G + shift I | I] = [U | M] with M = L^-1 (G + shift I = L D L^H), U = D L^H.
// R = D^-1/2 U and R^-H = D^-1/2 M, so R^-1[i][c] = conj(M[c][i]) / sqrt(D[c]).
extern "C" __global__ void gl_chol_inv(const SCALAR* __restrict__ g, OUT* __restrict__ rinv,
                                       const int l, const double shift_factor,
                                       const double tiny) {
    extern __shared__ __align__(16) unsigned char gl_smem[];
    SCALAR* a = reinterpret_cast<SCALAR*>(gl_smem);  // l x 2l, row-major
    const int w = 2 * l;
    const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
    const int tid = ty * bx + tx, nt = bx * by;
    __shared__ double shift;
    if (tid == 0) {
        double tr = 0.0;
        for (int i = 0; i < l; ++i) tr += gl_re(g[i * l + i]);
        shift = tr * shift_factor + tiny;
    }
    __syncthreads();
    bool failed = true;
    for (int attempt = 0; attempt < 3 && failed; ++attempt) {
        for (int idx = tid; idx < l * w; idx += nt) {
            const int i = idx / w, c = idx - i * w;
            SCALAR v = SCALAR(c - l == i ? 1.0 : 0.0);
            if (c < l) v = (c == i) ? g[i * l + c] + shift : g[i * l + c];
            a[idx] = v;
        }
        __syncthreads();
        failed = false;
        for (int j = 0; j < l; ++j) {
            const double piv = gl_re(a[j * w + j]);  // the same value in every thread
            if (!(piv > 0.0) || !isfinite(piv)) { failed = true; break; }
            // Rows below j: only columns j+1 .. l+j change (M is unit lower triangular), and
            // neither row j nor column j is written in this step: one barrier suffices.
            for (int p = j + 1 + ty; p < l; p += by) {
                const SCALAR f = a[p * w + j] / piv;
                for (int c = j + 1 + tx; c <= l + j; c += bx) a[p * w + c] -= f * a[j * w + c];
            }
            __syncthreads();
        }
        __syncthreads();
        if (failed && tid == 0) shift *= 1000.0;
        __syncthreads();
    }
    const double qnan = __longlong_as_double(0x7ff8000000000000ULL);
    for (int idx = tid; idx < l * l; idx += nt) {
        const int i = idx / l, c = idx - i * l;
        SCALAR v = SCALAR(0.0);
        if (i <= c) v = gl_conj(a[c * w + l + i]) / sqrt(gl_re(a[c * w + c]));
        if (failed) v = SCALAR(qnan);
        rinv[idx] = OUT(v);
    }
}
