#define LD MB
#define FULL 0xffffffffu
__device__ __forceinline__ double gs_abs2(double x) { return x * x; }
__device__ __forceinline__ double gs_abs2(complex<double> x) {
    return x.real() * x.real() + x.imag() * x.imag();
}
__device__ __forceinline__ double gs_abs2(float x) { return gs_abs2((double)x); }
__device__ __forceinline__ double gs_abs2(complex<float> x) {
    return gs_abs2(complex<double>(x.real(), x.imag()));
}
// conj(a) b in float64 (exact products for the single types).
__device__ __forceinline__ double gs_dot(double a, double b) { return a * b; }
__device__ __forceinline__ complex<double> gs_dot(complex<double> a, complex<double> b) {
    return conj(a) * b;
}
__device__ __forceinline__ double gs_dot(float a, float b) { return (double)a * (double)b; }
__device__ __forceinline__ complex<double> gs_dot(complex<float> a, complex<float> b) {
    return gs_dot(complex<double>(a.real(), a.imag()), complex<double>(b.real(), b.imag()));
}
// x / s and x * s of a column entry and a float64 scalar, rounded to the storage type once.
__device__ __forceinline__ double gs_div(double x, double s) { return x / s; }
__device__ __forceinline__ complex<double> gs_div(complex<double> x, double s) { return x / s; }
__device__ __forceinline__ float gs_div(float x, double s) { return (float)((double)x / s); }
__device__ __forceinline__ complex<float> gs_div(complex<float> x, double s) {
    return complex<float>((float)((double)x.real() / s), (float)((double)x.imag() / s));
}
__device__ __forceinline__ double gs_mul(double x, double s) { return x * s; }
__device__ __forceinline__ complex<double> gs_mul(complex<double> x, double s) { return x * s; }
__device__ __forceinline__ float gs_mul(float x, double s) { return (float)((double)x * s); }
__device__ __forceinline__ complex<float> gs_mul(complex<float> x, double s) {
    return complex<float>((float)((double)x.real() * s), (float)((double)x.imag() * s));
}
__device__ __forceinline__ float gs_narrow(double x) { return (float)x; }
__device__ __forceinline__ complex<float> gs_narrow(complex<double> x) {
    return complex<float>((float)x.real(), (float)x.imag());
}
// The phase x / |x| of a non-zero x (the sign, for real x).
__device__ __forceinline__ double gs_unit(double x, double g) { return x / g; }
__device__ __forceinline__ complex<double> gs_unit(complex<double> x, double g) { return x / g; }
__device__ __forceinline__ float gs_unit(float x, double g) { return gs_div(x, g); }
__device__ __forceinline__ complex<float> gs_unit(complex<float> x, double g) {
    return gs_div(x, g);
}
// Butterfly sum over segments of w lanes: the same bits in every lane of the segment.
__device__ __forceinline__ double gs_sum(double v, int w) {
    for (int h = w / 2; h > 0; h >>= 1) v += __shfl_xor_sync(FULL, v, h, w);
    return v;
}
__device__ __forceinline__ complex<double> gs_sum(complex<double> v, int w) {
    for (int h = w / 2; h > 0; h >>= 1) v += gl_xor(v, h, w);
    return v;
}
// Output element (i, c) of one of the results, for the store loop: U (what 0), Vh (what 1).
// tall: U = W[:, col(c)] ph(c), Vh = (V[:, perm(c)] ph(c))^H; wide: U = V[:, perm(c)] ph(c),
// Vh = (W[:, col(c)] ph(c))^H. col(c) = perm[c] for c < k, c beyond (completed columns).
__device__ __forceinline__ T gs_out(const C* w, const C* v, const int* perm, const C* ph,
                                    const int k, const int wide, const int what,
                                    const int i, const int c) {
    const int r = what ? i : c, x = what ? c : i;  // x: index into the vector of position r
    const bool wside = (what == 0) != (wide != 0);
    const int col = r < k ? perm[r] : r;
    const C val = (wside ? w[col * LD + x] : v[col * LD + x]) * (r < k ? ph[r] : C(1));
    return T(what ? gl_cj(val) : val);
}
// Write the rows x cols result `what` to dst (strides dr, dc), consecutive threads along the
// axis of smaller stride; NaN everywhere when nan.
__device__ __forceinline__ void gs_store(T* dst, const long long dr, const long long dc,
                                         const int rows, const int cols, const C* w,
                                         const C* v, const int* perm, const C* ph, const int k,
                                         const int wide, const int what, const bool nan,
                                         const int t, const int nt) {
    const bool colmajor = (dr < 0 ? -dr : dr) <= (dc < 0 ? -dc : dc);
    const int total = rows * cols;
    for (int e = t; e < total; e += nt) {
        const int i = colmajor ? e % rows : e / cols, c = colmajor ? e / rows : e % cols;
        dst[i * dr + c * dc] = nan ? T(nan_val()) : gs_out(w, v, perm, ph, k, wide, what, i, c);
    }
}
