__device__ __forceinline__ float gl_re(float x) { return x; }
__device__ __forceinline__ double gl_re(double x) { return x; }
__device__ __forceinline__ float gl_re(complex<float> x) { return x.real(); }
__device__ __forceinline__ double gl_re(complex<double> x) { return x.real(); }
__device__ __forceinline__ float gl_cj(float x) { return x; }
__device__ __forceinline__ double gl_cj(double x) { return x; }
__device__ __forceinline__ complex<float> gl_cj(complex<float> x) { return conj(x); }
__device__ __forceinline__ complex<double> gl_cj(complex<double> x) { return conj(x); }
__device__ __forceinline__ double gl_mag(float x) { return fabs((double)x); }
__device__ __forceinline__ double gl_mag(double x) { return fabs(x); }
__device__ __forceinline__ double gl_mag(complex<float> x) { return (double)abs(x); }
__device__ __forceinline__ double gl_mag(complex<double> x) { return abs(x); }
// NaN sticks, as in NumPy's max and min (and the figures kernel of _triangular_cuda).
__device__ __forceinline__ double gl_max(double a, double b) { return (isnan(a) || a >= b) ? a : b; }
__device__ __forceinline__ double gl_min(double a, double b) { return (isnan(a) || a <= b) ? a : b; }
// max(|Re x|, |Im x|) in float64: the scale of an entry (of a norm computed without overflow).
__device__ __forceinline__ double gl_part(float x) { return fabs((double)x); }
__device__ __forceinline__ double gl_part(double x) { return fabs(x); }
__device__ __forceinline__ double gl_part(complex<float> x) {
    return gl_max(fabs((double)x.real()), fabs((double)x.imag()));
}
__device__ __forceinline__ double gl_part(complex<double> x) {
    return gl_max(fabs(x.real()), fabs(x.imag()));
}
// Warp shuffles of any of the four types (complex: its two parts) within segments of w lanes:
// from lane l (gl_shfl), from the lane h apart (gl_xor).
template <class S> __device__ __forceinline__ S gl_shfl(S v, int l, int w) {
    return __shfl_sync(0xffffffffu, v, l, w);
}
template <class S> __device__ __forceinline__ complex<S> gl_shfl(complex<S> v, int l, int w) {
    return complex<S>(__shfl_sync(0xffffffffu, v.real(), l, w),
                      __shfl_sync(0xffffffffu, v.imag(), l, w));
}
template <class S> __device__ __forceinline__ S gl_xor(S v, int h, int w) {
    return __shfl_xor_sync(0xffffffffu, v, h, w);
}
template <class S> __device__ __forceinline__ complex<S> gl_xor(complex<S> v, int h, int w) {
    return complex<S>(__shfl_xor_sync(0xffffffffu, v.real(), h, w),
                      __shfl_xor_sync(0xffffffffu, v.imag(), h, w));
}
