// K[i * n + j] = c s(r_ij) + (i == j) (white + noise[i * noise_step]) in double, stored as
// GL_STORED (double unless defined); z is n x GL_D row-major. Block (32, 8): threads along j
// (coalesced writes), 32 rows i per block.
#ifndef GL_STORED
#define GL_STORED double
#endif
extern "C" __global__ void gl_gp_build(const double* __restrict__ z,
                                       const double* __restrict__ noise,
                                       GL_STORED* __restrict__ k, int* __restrict__ flag,
                                       const long long n, const double c, const double white,
                                       const long long noise_step) {
    const long long j = (long long)blockIdx.x * 32 + threadIdx.x;
    const long long i0 = (long long)blockIdx.y * 32;
    if (j >= n) return;
    double zj[GL_D];
#pragma unroll
    for (int d = 0; d < GL_D; ++d) zj[d] = z[j * GL_D + d];
    bool bad = false;
    for (int r = threadIdx.y; r < 32; r += 8) {
        const long long i = i0 + r;
        if (i >= n) break;
        double r2 = 0.0;
#pragma unroll
        for (int d = 0; d < GL_D; ++d) {
            const double t = z[i * GL_D + d] - zj[d];
            r2 += t * t;
        }
        double s, h;
        gl_sh(r2, s, h);
        double v = c * s;
        if (i == j) v += white + noise[i * noise_step];
        bad |= !isfinite(v);
        k[i * n + j] = (GL_STORED)v;
    }
    if (bad) atomicOr(flag, 1);
}
