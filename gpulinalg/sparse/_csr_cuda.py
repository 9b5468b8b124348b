"""CuPy CSR matrices for the GPU factors (cuDSS, cuSOLVER-Sp): the start they share."""

from __future__ import annotations

from ._input_xp import wrap_csr

__all__ = ["csr_matrix", "device_csr"]


def csr_matrix(indptr, indices, data, n):
    """A ``cupyx.scipy.sparse.csr_matrix`` over the given canonical CuPy arrays (no copy)."""
    import cupyx.scipy.sparse
    return wrap_csr(cupyx.scipy.sparse, indptr, indices, data, n)


def device_csr(indptr, indices, data, n, reordering, choices, default, library):
    """The GPU factors' common start: an int32 CSR copy on the current device, that device's
    index and the validated reordering name (``default`` when ``reordering`` is None)."""
    import cupy
    m = csr_matrix(indptr.astype(cupy.int32), indices.astype(cupy.int32), data.copy(), int(n))
    reordering = reordering or default
    if reordering not in choices:
        raise ValueError(f"reordering must be one of {sorted(choices)} for {library}, "
                         f"got {reordering!r}")
    return m, int(cupy.cuda.runtime.getDevice()), reordering
