"""CuPy CSR matrices for the GPU factors (cuDSS, cuSOLVER-Sp): the start they share."""

from __future__ import annotations

from ._input_xp import wrap_csr

__all__ = ["csr_matrix", "device_csr", "csc_of_dense", "sparse_result"]


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


def csc_of_dense(a):
    """A dense CuPy matrix as a ``cupyx.scipy.sparse.csc_matrix`` (SciPy's names convert a
    dense ``A`` as SciPy does)."""
    import cupyx.scipy.sparse
    return cupyx.scipy.sparse.csc_matrix(a)


def sparse_result(A, rows, cols, vals, shape):
    """The CuPy sparse matrix of the given entries: CSR when ``A`` is CSR, else CSC
    (``spsolve``'s result for a sparse right-hand side)."""
    import cupyx.scipy.sparse
    x = cupyx.scipy.sparse.coo_matrix((vals, (rows, cols)), shape=shape)
    return x.tocsr() if getattr(A, "format", None) == "csr" else x.tocsc()
