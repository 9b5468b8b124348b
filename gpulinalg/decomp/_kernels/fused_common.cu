#define LD (NB + 1)
// A non-negative double (or NaN) as bits that order as the values, NaN above +inf.
__device__ __forceinline__ unsigned long long gl_order_bits(const double v) {
    return isnan(v) ? 0x7ff8000000000000ULL : (unsigned long long)__double_as_longlong(fabs(v));
}
