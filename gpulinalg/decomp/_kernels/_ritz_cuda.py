"""Two small CUDA kernels for the end of a randomized SVD on the GPU (real dtypes).

After the one host round trip of the Rayleigh-Ritz step, what is left is latency-bound: a
few products with ``l x k`` matrices, casts, and the sign convention. Each CuPy call there
costs more host time than its GPU work, so:

* :func:`lift` forms ``U = Q W``, ``Vh = (B^H W / sigma)^T`` (accumulated in float64) and ``S``
  in one kernel, written in the working dtype;
* :func:`flip_signs` finds, per vector, the sign of its first largest-magnitude entry (the
  ``svd_flip`` convention) and can scale the vector and its partner in the other factor in
  place, in the same kernel.
"""

import numpy as np

from ..._runtime.kernels import raw_kernel

__all__ = ["lift", "flip_signs", "TYPES", "MAX_W_BYTES"]

TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
THREADS = 256
#: :func:`lift` keeps ``[W; W / sigma; sigma]`` in shared memory: at most this many bytes.
MAX_W_BYTES = 48 * 1024

_FLIP_SOURCE = r"""
// Vector v: x[v * vstride + i * step], i < len. sign[v] = -1 when its first largest-magnitude
// entry is negative, else +1 (argmax(abs(.)) then a sign test). With scale, the vector and
// its partner (y[v * ystride + i * ystep], i < ylen) are multiplied by sign[v] in place.
extern "C" __global__ void gl_flip_signs(T* __restrict__ x, const long long len,
                                         const long long step, const long long vstride,
                                         T* __restrict__ sign, const int scale,
                                         T* __restrict__ y, const long long ylen,
                                         const long long ystep, const long long ystride) {
    __shared__ double best[256];
    __shared__ long long where[256];
    T* p = x + blockIdx.x * vstride;
    double m = -1.0;
    long long at = len;
    for (long long i = threadIdx.x; i < len; i += blockDim.x) {
        const double v = fabs((double)p[i * step]);
        if (v > m) { m = v; at = i; }
    }
    best[threadIdx.x] = m;
    where[threadIdx.x] = at;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const double o = best[threadIdx.x + s];
            const long long oi = where[threadIdx.x + s];
            if (o > best[threadIdx.x] || (o == best[threadIdx.x] && oi < where[threadIdx.x])) {
                best[threadIdx.x] = o;
                where[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    const bool neg = where[0] < len && p[where[0] * step] < (T)0;
    __syncthreads();  // every thread has read the pivot before anything is scaled
    if (threadIdx.x == 0) sign[blockIdx.x] = neg ? (T)-1 : (T)1;
    if (scale && neg) {
        for (long long i = threadIdx.x; i < len; i += blockDim.x) p[i * step] = -p[i * step];
        T* r = y + blockIdx.x * ystride;
        for (long long i = threadIdx.x; i < ylen; i += blockDim.x) r[i * ystep] = -r[i * ystep];
    }
}
"""

_LIFT_SOURCE = r"""
// w: (2l + 1) x k float64, rows [W; W / sigma; sigma]. Thread r < m: U[r, :] = q[r, :] W;
// thread m + j < m + n: Vh[:, j] = btd[j, :] (W / sigma); the first k threads also write S.
extern "C" __global__ void gl_lift(const T* __restrict__ q, const double* __restrict__ btd,
                                   const double* __restrict__ w, T* __restrict__ u,
                                   T* __restrict__ vh, T* __restrict__ s, const int l,
                                   const int k, const long long m, const long long n) {
    extern __shared__ double ws[];
    for (int i = threadIdx.x; i < (2 * l + 1) * k; i += blockDim.x) ws[i] = w[i];
    __syncthreads();
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < k) s[r] = (T)ws[2 * l * k + r];
    if (r < m) {
        const T* x = q + r * l;
        for (int i = 0; i < k; ++i) {
            double acc = 0.0;
            for (int t = 0; t < l; ++t) acc += (double)x[t] * ws[t * k + i];
            u[r * k + i] = (T)acc;
        }
    } else if (r < m + n) {
        const long long j = r - m;
        const double* x = btd + j * l;
        const double* wl = ws + l * k;
        for (int i = 0; i < k; ++i) {
            double acc = 0.0;
            for (int t = 0; t < l; ++t) acc += x[t] * wl[t * k + i];
            vh[i * n + j] = (T)acc;
        }
    }
}
"""

def flip_signs(rows, partner=None):
    """``+1``/``-1`` per row of the real device matrix ``rows`` (one block per row); with
    ``partner`` (``(len(rows), p)``), row ``v`` of ``rows`` and of ``partner`` are multiplied
    by sign ``v`` in place."""
    import cupy
    sign = cupy.empty(rows.shape[0], rows.dtype)
    item = rows.itemsize
    y = rows if partner is None else partner
    kern = raw_kernel("gl_flip_signs", _FLIP_SOURCE, {"T": TYPES[rows.dtype]})
    kern((rows.shape[0],), (THREADS,),
         (rows, np.int64(rows.shape[1]), np.int64(rows.strides[1] // item),
          np.int64(rows.strides[0] // item), sign, np.int32(partner is not None), y,
          np.int64(0 if partner is None else y.shape[1]), np.int64(y.strides[1] // item),
          np.int64(y.strides[0] // item)))
    return sign


def lift(q, btd, w, k):
    """``(U, S, Vh)`` of ``q`` (``m x l``, C order, float32/float64), ``btd`` (``n x l``, C order,
    float64) and ``w`` (``(2l + 1) x k`` float64 rows ``[W; W / sigma; sigma]``)."""
    import cupy
    m, l = q.shape
    n = btd.shape[0]
    dtype = q.dtype
    u = cupy.empty((m, k), dtype)
    vh = cupy.empty((k, n), dtype)
    s = cupy.empty(k, dtype)
    blocks = (m + n + THREADS - 1) // THREADS
    raw_kernel("gl_lift", _LIFT_SOURCE, {"T": TYPES[dtype]})(
        (blocks,), (THREADS,), (q, btd, w, u, vh, s, np.int32(l), np.int32(k), np.int64(m),
                                np.int64(n)), shared_mem=w.size * 8)
    return u, s, vh
