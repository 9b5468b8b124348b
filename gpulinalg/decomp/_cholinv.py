"""A fused CUDA kernel for the small step of Cholesky QR: ``R^-1`` of ``G + shift I = R^H R``.

One thread block does, in shared memory: the shift (``shift_factor * trace(G) + tiny``), an
upper Cholesky factorization (retried with a 1000x larger shift when a pivot is not
positive, twice), and the inverse of the triangle, written in the working dtype. It replaces
about a dozen small library calls (and their host overhead) per power iteration; when every
attempt fails it writes NaNs, which the run's final check turns into a Householder rerun.

Used for ``l <= max_order(dtype)`` (the factor must fit in 48 KiB of shared memory); larger
sketches use cuSOLVER ``potrf`` + cuBLAS ``trsm`` through CuPy.
"""

import numpy as np

__all__ = ["chol_inverse", "max_order", "THREADS"]

THREADS = 256
_SHARED_BYTES = 48 * 1024

_SOURCE = r"""
#include <cupy/complex.cuh>

__device__ __forceinline__ double gl_conj(double x) { return x; }
__device__ __forceinline__ complex<double> gl_conj(complex<double> x) { return conj(x); }
__device__ __forceinline__ double gl_re(double x) { return x; }
__device__ __forceinline__ double gl_re(complex<double> x) { return x.real(); }

extern "C" __global__ void gl_chol_inv(const SCALAR* __restrict__ g, OUT* __restrict__ rinv,
                                       const int l, const double shift_factor,
                                       const double tiny) {
    extern __shared__ __align__(16) unsigned char gl_smem[];
    SCALAR* a = reinterpret_cast<SCALAR*>(gl_smem);  // l x l, row-major
    SCALAR* dinv = a + l * l;                         // l
    __shared__ double shift;
    __shared__ int failed;
    const int tid = threadIdx.x, nt = blockDim.x;
    if (tid == 0) {
        double tr = 0.0;
        for (int i = 0; i < l; ++i) tr += gl_re(g[i * l + i]);
        shift = tr * shift_factor + tiny;
    }
    __syncthreads();
    for (int attempt = 0; attempt < 3; ++attempt) {
        for (int idx = tid; idx < l * l; idx += nt) a[idx] = g[idx];
        __syncthreads();
        for (int i = tid; i < l; i += nt) a[i * l + i] += shift;
        if (tid == 0) failed = 0;
        __syncthreads();
        for (int j = 0; j < l; ++j) {  // G = R^H R, R in the upper triangle
            if (tid == 0) {
                double d = gl_re(a[j * l + j]);
                if (!(d > 0.0) || !isfinite(d)) { failed = 1; d = 1.0; }
                a[j * l + j] = SCALAR(sqrt(d));
            }
            __syncthreads();
            const SCALAR r = a[j * l + j];
            for (int c = j + 1 + tid; c < l; c += nt) a[j * l + c] = a[j * l + c] / r;
            __syncthreads();
            const int w = l - j - 1;
            for (int idx = tid; idx < w * w; idx += nt) {
                const int p = j + 1 + idx / w, q = j + 1 + idx % w;
                if (q >= p) a[p * l + q] -= gl_conj(a[j * l + p]) * a[j * l + q];
            }
            __syncthreads();
        }
        if (!failed) break;
        __syncthreads();
        if (tid == 0) shift *= 1000.0;
        __syncthreads();
    }
    // X = R^-1 (upper): column c by one thread; X[i][c] (i < c) kept in a[c][i].
    for (int c = tid; c < l; c += nt) {
        const SCALAR dc = SCALAR(1.0) / a[c * l + c];
        dinv[c] = dc;
        for (int i = c - 1; i >= 0; --i) {
            SCALAR s = a[i * l + c] * dc;
            for (int t = i + 1; t < c; ++t) s += a[i * l + t] * a[c * l + t];
            a[c * l + i] = -s / a[i * l + i];
        }
    }
    __syncthreads();
    const double qnan = __longlong_as_double(0x7ff8000000000000ULL);
    for (int idx = tid; idx < l * l; idx += nt) {
        const int i = idx / l, c = idx % l;
        SCALAR v = (i < c) ? a[c * l + i] : ((i == c) ? dinv[c] : SCALAR(0.0));
        if (failed) v = SCALAR(qnan);
        rinv[idx] = OUT(v);
    }
}
"""

_TYPES = {np.dtype(np.float32): ("double", "float"), np.dtype(np.float64): ("double", "double"),
          np.dtype(np.complex64): ("complex<double>", "complex<float>"),
          np.dtype(np.complex128): ("complex<double>", "complex<double>")}
_kernels = {}


def max_order(dtype):
    """Largest ``l`` the kernel takes for ``dtype`` (its factor lives in shared memory)."""
    item = 16 if np.dtype(dtype).kind == "c" else 8
    return int((np.sqrt(1 + 4 * _SHARED_BYTES / item) - 1) / 2)


def _kernel(dtype):
    dtype = np.dtype(dtype)
    kern = _kernels.get(dtype)
    if kern is None:
        import cupy
        scalar, out = _TYPES[dtype]
        code = _SOURCE.replace("SCALAR", scalar).replace("OUT", out)
        kern = _kernels[dtype] = cupy.RawKernel(code, "gl_chol_inv", options=("--std=c++17",))
    return kern


def chol_inverse(g, shift_factor, dtype):
    """``R^-1`` (upper, ``dtype``) of ``g + (shift_factor * trace(g) + tiny) I = R^H R``.

    ``g`` is an ``l x l`` Hermitian CuPy array in float64/complex128.
    """
    import cupy
    dtype = np.dtype(dtype)
    l = g.shape[0]
    if g.shape != (l, l) or l > max_order(dtype):
        raise ValueError(f"chol_inverse takes a square matrix of order <= {max_order(dtype)}, "
                         f"got shape {g.shape}")
    # The kernel reads float64 or complex128: anything else would be read out of bounds.
    g = cupy.ascontiguousarray(g, dtype=np.complex128 if dtype.kind == "c" else np.float64)
    rinv = cupy.empty((l, l), dtype=dtype)
    item = g.dtype.itemsize
    _kernel(dtype)((1,), (THREADS,), (g, rinv, np.int32(l), np.float64(shift_factor),
                                      np.float64(np.finfo(np.float64).tiny)),
                   shared_mem=(l * l + l) * item)
    return rinv
