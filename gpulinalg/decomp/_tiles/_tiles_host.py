"""CPU tile kernels of the Dask engines (``*_dask``): what one Dask task does to one NumPy block.

Each function has the same signature and results as its GPU twin in :mod:`._tiles_cuda`; the
graph builders pick the twin from the chunks' array package once, when they build the graph.
They call SciPy's LAPACK wrappers directly (one matrix per call, no batching); a family's own tile
task (QR, the diagonal ``potrf``, the Gaussian block) lives in that family's ``_host`` module.
"""

import numpy as np

from ..._runtime.errors import SingularMatrixError

__all__ = ["trsm", "trsm_right", "gemm_sub", "herk_sub", "tall_qr"]


def trsm(l, b, trans):
    """``L^-1 b`` (``trans=0``) or ``L^-H b`` (``trans=2``) for a lower triangular tile ``l``."""
    import scipy.linalg
    if b.size == 0:
        return b.copy()
    if np.any(np.diagonal(l) == 0):
        raise SingularMatrixError("a diagonal entry of the triangular factor is zero")
    return scipy.linalg.solve_triangular(l, b, trans=trans, lower=True, check_finite=False)


def trsm_right(l, b):
    """``b <- b l^-H`` in place, for a lower triangular tile ``l`` (a panel's rows ``b``)."""
    import scipy.linalg
    if b.size:
        b[...] = scipy.linalg.solve_triangular(l, b.conj().T, lower=True,
                                               check_finite=False).conj().T


def gemm_sub(c, a, b):
    """``c -= a @ b^H`` in place."""
    c -= a @ b.conj().T


def herk_sub(c, b):
    """``c -= b @ b^H`` in place (the lower triangle is what is read afterwards)."""
    c -= b @ b.conj().T


def tall_qr(y, dtype, step):
    """``(q, r)``: the reduced Householder QR, in ``dtype``, of the tall ``y`` (rows, l) as a
    TSQR of its row steps of ``step`` rows: each step copied into one buffer and factored in
    place by LAPACK (``geqrf``, ``orgqr`` / ``ungqr``), the steps' ``R`` stacked and factored,
    and each step's ``Q`` times its rows of that factor written into ``q`` (rows, min(rows, l)).
    A step stays in the core's cache for its ``l`` Householder sweeps; the buffers are
    allocated once, since a Dask worker's allocator maps (and faults in) every large array.

    Examples
    --------
    >>> import numpy as np
    >>> y = np.random.default_rng(0).standard_normal((1000, 8)).astype(np.float32)
    >>> q, r = tall_qr(y, np.float64, 96)
    >>> q.shape, r.shape, bool(np.allclose(q @ r, y, atol=1e-5))
    ((1000, 8), (8, 8), True)
    >>> bool(np.allclose(q.T @ q, np.eye(8)))
    True
    """
    from scipy.linalg import lapack
    rows, l = (int(v) for v in y.shape)
    dtype = np.dtype(dtype)
    geqrf, orgqr = lapack.get_lapack_funcs(
        ("geqrf", "ungqr" if dtype.kind == "c" else "orgqr"), dtype=dtype)
    steps = [(r0, min(r0 + step, rows)) for r0 in range(0, rows, step)]
    buf = np.empty((len(steps), l, step), dtype)  # buf[i].T: step i, column-major
    parts = []
    for i, (r0, r1) in enumerate(steps):
        a = buf[i, :, :r1 - r0]
        a[...] = y[r0:r1].T
        f, tau = geqrf(a.T, overwrite_a=1)[:2]
        k = min(r1 - r0, l)
        parts.append((f, tau, k))
    s, r = np.linalg.qr(np.concatenate([np.triu(f[:k]) for f, _, k in parts]), mode="reduced")
    q = np.empty((rows, int(s.shape[1])), dtype)
    top = 0
    for (r0, r1), (f, tau, k) in zip(steps, parts):
        qs = orgqr(f[:, :k], tau[:k], overwrite_a=1)[0]
        np.matmul(qs, s[top:top + k], out=q[r0:r1])
        top += k
    return q, r
