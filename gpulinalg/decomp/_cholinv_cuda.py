"""A fused CUDA kernel for the small step of Cholesky QR: ``R^-1`` of ``G + shift I = R^H R``.

One thread block of 32 x 32 threads does, in shared memory: the shift (``shift_factor *
trace(G) + tiny``), and Gaussian elimination of ``[G + shift I | I]``, which yields the
Cholesky factor and the inverse of its triangle together in ``l`` steps of one barrier each
(retried with a 1000x larger shift when a pivot is not positive, twice); ``R^-1`` is written
in the working dtype. It replaces about a dozen small library calls (and their host
overhead) per power iteration; when every attempt fails it writes NaNs, which the run's final
check turns into a Householder rerun.

Used for ``l <= max_order(dtype)`` (the ``l x 2l`` working matrix must fit in
``SHARED_BYTES`` of shared memory); larger sketches use cuSOLVER ``potrf`` + cuBLAS ``trsm``
through CuPy.
"""

import numpy as np

from .._runtime.kernels import raw_kernel

__all__ = ["chol_inverse", "max_order", "BLOCK", "SHARED_BYTES"]

BLOCK = (32, 32)
#: Shared memory the kernel may take (above 48 KiB by opt-in; every GPU since Volta has more).
SHARED_BYTES = 96 * 1024

_SOURCE = r"""
__device__ __forceinline__ double gl_conj(double x) { return x; }
__device__ __forceinline__ complex<double> gl_conj(complex<double> x) { return conj(x); }
__device__ __forceinline__ double gl_re(double x) { return x; }
__device__ __forceinline__ double gl_re(complex<double> x) { return x.real(); }

// [G + shift I | I] is reduced by Gaussian elimination without pivoting, one barrier per
// column: M [G + shift I | I] = [U | M] with M = L^-1 (G + shift I = L D L^H), U = D L^H.
// R = D^-1/2 U and R^-H = D^-1/2 M, so R^-1[i][c] = conj(M[c][i]) / sqrt(D[c]).
extern "C" __global__ void gl_chol_inv(const SCALAR* __restrict__ g, OUT* __restrict__ rinv,
                                       const int l, const double shift_factor,
                                       const double tiny) {
    extern __shared__ __align__(16) unsigned char gl_smem[];
    SCALAR* a = reinterpret_cast<SCALAR*>(gl_smem);  // l x 2l, row-major
    const int w = 2 * l;
    const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
    const int tid = ty * bx + tx, nt = bx * by;
    __shared__ double shift;
    if (tid == 0) {
        double tr = 0.0;
        for (int i = 0; i < l; ++i) tr += gl_re(g[i * l + i]);
        shift = tr * shift_factor + tiny;
    }
    __syncthreads();
    bool failed = true;
    for (int attempt = 0; attempt < 3 && failed; ++attempt) {
        for (int idx = tid; idx < l * w; idx += nt) {
            const int i = idx / w, c = idx - i * w;
            SCALAR v = SCALAR(c - l == i ? 1.0 : 0.0);
            if (c < l) v = (c == i) ? g[i * l + c] + shift : g[i * l + c];
            a[idx] = v;
        }
        __syncthreads();
        failed = false;
        for (int j = 0; j < l; ++j) {
            const double piv = gl_re(a[j * w + j]);  // the same value in every thread
            if (!(piv > 0.0) || !isfinite(piv)) { failed = true; break; }
            // Rows below j: only columns j+1 .. l+j change (M is unit lower triangular), and
            // neither row j nor column j is written in this step: one barrier suffices.
            for (int p = j + 1 + ty; p < l; p += by) {
                const SCALAR f = a[p * w + j] / piv;
                for (int c = j + 1 + tx; c <= l + j; c += bx) a[p * w + c] -= f * a[j * w + c];
            }
            __syncthreads();
        }
        __syncthreads();
        if (failed && tid == 0) shift *= 1000.0;
        __syncthreads();
    }
    const double qnan = __longlong_as_double(0x7ff8000000000000ULL);
    for (int idx = tid; idx < l * l; idx += nt) {
        const int i = idx / l, c = idx - i * l;
        SCALAR v = SCALAR(0.0);
        if (i <= c) v = gl_conj(a[c * w + l + i]) / sqrt(gl_re(a[c * w + c]));
        if (failed) v = SCALAR(qnan);
        rinv[idx] = OUT(v);
    }
}
"""

_TYPES = {np.dtype(np.float32): ("double", "float"), np.dtype(np.float64): ("double", "double"),
          np.dtype(np.complex64): ("complex<double>", "complex<float>"),
          np.dtype(np.complex128): ("complex<double>", "complex<double>")}


def max_order(dtype):
    """Largest ``l`` the kernel takes for ``dtype`` (its factor lives in shared memory)."""
    item = 16 if np.dtype(dtype).kind == "c" else 8
    return int(np.sqrt(SHARED_BYTES / (2 * item)))


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
    scalar, out = _TYPES[dtype]
    kern = raw_kernel("gl_chol_inv", _SOURCE, {"SCALAR": scalar, "OUT": out},
                      options=("--std=c++17",), shared_bytes=SHARED_BYTES)
    kern((1,), BLOCK, (g, rinv, np.int32(l), np.float64(shift_factor),
                                 np.float64(np.finfo(np.float64).tiny)),
                   shared_mem=2 * l * l * g.dtype.itemsize)
    return rinv
