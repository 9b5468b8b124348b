// s(r^2) and h(r^2) = -2 ds/d(r^2), by GL_KIND: 0 RBF, 1/2/3 Matern nu = 0.5/1.5/2.5
__device__ __forceinline__ void gl_sh(const double r2, double& s, double& h) {
#if GL_KIND == 0
    s = exp(-0.5 * r2); h = s;
#elif GL_KIND == 1
    const double r = sqrt(r2);
    s = exp(-r); h = r > 0.0 ? s / r : 0.0;
#elif GL_KIND == 2
    const double q = sqrt(3.0 * r2), e = exp(-q);
    s = (1.0 + q) * e; h = 3.0 * e;
#else
    const double q = sqrt(5.0 * r2), e = exp(-q);
    s = (1.0 + q + q * q / 3.0) * e; h = (5.0 / 3.0) * (1.0 + q) * e;
#endif
}
