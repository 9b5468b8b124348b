// s(r^2) and h(r^2) = -2 ds/d(r^2), by GL_KIND: 0 RBF, 1/2/3 Matern nu = 0.5/1.5/2.5; R is
// float or double (the arithmetic of the caller)
template <typename R>
__device__ __forceinline__ void gl_sh(const R r2, R& s, R& h) {
#if GL_KIND == 0
    s = exp(R(-0.5) * r2); h = s;
#elif GL_KIND == 1
    const R r = sqrt(r2);
    s = exp(-r); h = r > R(0) ? s / r : R(0);
#elif GL_KIND == 2
    const R q = sqrt(R(3) * r2), e = exp(-q);
    s = (R(1) + q) * e; h = R(3) * e;
#else
    const R q = sqrt(R(5) * r2), e = exp(-q);
    s = (R(1) + q + q * q / R(3)) * e; h = (R(5) / R(3)) * (R(1) + q) * e;
#endif
}
