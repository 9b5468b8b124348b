__device__ __forceinline__ bool gl_fin(float x) { return isfinite(x); }
__device__ __forceinline__ bool gl_fin(double x) { return isfinite(x); }
__device__ __forceinline__ bool gl_fin(complex<float> x) {
    return isfinite(x.real()) && isfinite(x.imag());
}
__device__ __forceinline__ bool gl_fin(complex<double> x) {
    return isfinite(x.real()) && isfinite(x.imag());
}
