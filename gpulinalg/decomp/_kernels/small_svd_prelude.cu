#define ZERO_S 1e-280
#define LP (MB / RPL)
#define SL (MB < 32 ? MB : 32)
#define SR (MB / SL)
#define RW ((MB + 31) / 32)
#if GS_SINGLE
#define GS_NARROW(x) gs_narrow(x)
#else
#define GS_NARROW(x) (x)
#endif
__device__ __forceinline__ double nan_val() { return __longlong_as_double(0x7ff8000000000000LL); }
