"""cuSOLVER's own randomized SVD, ``cusolverDnXgesvdr``, through ``nvmath.bindings``.

``Xgesvdr`` overwrites its input, so it works on a Fortran-ordered copy of ``A`` (or of
``A^T`` for wide matrices: the routine is used with ``m >= n``). ``U`` comes back as
``m x k`` and ``V`` (not ``V^H``) as ``n x k``, both column-major.
"""

import numpy as np

from ._randomized_xp import NOT_FINITE
from ._sketch_cuda import engine
from ._sketch_xp import svd_flip

__all__ = ["gesvdr", "gesvdr_bytes"]

#: cudaDataType of each dtype (one table, no per-dtype branches).
_CUDA_TYPES = {np.dtype(np.float32): (0, 0), np.dtype(np.float64): (1, 1),
               np.dtype(np.complex64): (4, 0), np.dtype(np.complex128): (5, 1)}


def gesvdr_bytes(m, n, k, p, dtype):
    """Device bytes besides the workspace: the copy of ``A``, ``U``, ``V`` and ``S``."""
    item = np.dtype(dtype).itemsize
    return item * (m * n + (m + n) * (k + p)) + 8 * min(m, n)


def gesvdr(a, k, p, n_iter):
    """Top-``k`` SVD of CuPy matrix ``a`` with ``Xgesvdr`` (oversampling ``p``, ``n_iter``
    power iterations). Returns ``(U, S, Vh)`` as CuPy arrays."""
    import cupy
    from nvmath.bindings import cusolverDn
    from nvmath.bindings.cusolver import cuSOLVERError

    from ..._runtime.streams import get_handle
    dtype = np.dtype(a.dtype)
    wide = a.shape[0] < a.shape[1]
    t = cupy.array(a.T if wide else a, order="F", copy=True)
    m, n = t.shape
    p = max(0, min(p, min(m, n) - k))
    data_type, real_index = _CUDA_TYPES[dtype]
    real_type = (0, 1)[real_index]
    s = cupy.empty(min(m, n), dtype=dtype.char.lower())
    u = cupy.empty((m, k + p), dtype=dtype, order="F")
    v = cupy.empty((n, k + p), dtype=dtype, order="F")
    info = cupy.zeros(1, dtype=np.int32)
    handle = get_handle("cusolverDn")
    params = cusolverDn.create_params()
    try:
        args = (handle, params, ord("S"), ord("S"), m, n, k, p, n_iter,
                data_type, t.data.ptr, m, real_type, s.data.ptr, data_type, u.data.ptr, m,
                data_type, v.data.ptr, n, data_type)
        dev_bytes, host_bytes = cusolverDn.xgesvdr_buffer_size(*args)
        work = cupy.empty(max(int(dev_bytes), 1), dtype=np.uint8)
        host_work = np.empty(max(int(host_bytes), 1), dtype=np.uint8)
        try:
            cusolverDn.xgesvdr(*args, work.data.ptr, int(dev_bytes), host_work.ctypes.data,
                               int(host_bytes), info.data.ptr)
        except cuSOLVERError:  # NaN/Inf in A end Xgesvdr with INTERNAL_ERROR (7) on the H200
            if not bool(cupy.isfinite(a).all()):
                raise ValueError(NOT_FINITE.format(dtype=dtype.name)) from None
            raise
        cupy.cuda.get_current_stream().synchronize()  # the host workspace must outlive it
    finally:
        cusolverDn.destroy_params(params)
    # one transfer: cuSOLVER's info and whether the singular values are finite
    status, bad = (int(x) for x in cupy.stack(
        [info[0], (~cupy.isfinite(s[:k])).any().astype(np.int32)]).get())
    if status < 0:
        raise ValueError(f"Xgesvdr rejected argument {-status}")
    if bad:
        raise ValueError(NOT_FINITE.format(dtype=dtype.name))
    U, S, V = u[:, :k], s[:k], v[:, :k]
    if wide:  # A^T = U S V^H  =>  A = conj(V) S U^T
        U, Vh = V.conj(), U.T
    else:
        U, Vh = U, V.conj().T
    U, Vh = svd_flip(engine(), cupy.ascontiguousarray(U), cupy.ascontiguousarray(Vh))
    return U, S, Vh
