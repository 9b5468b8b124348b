"""Least squares of a tall-and-skinny Dask array: one TSQR of ``[a | b]`` on the workers, then
the small problem at the root.

The R factor of the augmented matrix holds the whole problem (Golub's method)::

    [a | b] = Q [[R11, R12],      R11 = R of a,  R12 = Q1^H b,
                 [0,   R22]]      R22^H R22 = the Gram matrix of the residuals b - a x,

so the input is read once, only ``(n + k) x (n + k)`` matrices move between workers, and the
residues come from ``R22``'s column norms (no cancellation, no second pass over ``a``). The root
solves ``R11 x = R12`` with the chunks' own engine: :func:`scipy.linalg.lstsq` for NumPy
chunks, decomp's GPU engine for CuPy ones (the same LAPACK driver rules either way: ``gelsd``
and ``gelss`` the minimum-norm solution over the singular values above ``cond * s_max``,
``gelsy`` a triangular solve when R11 is of full rank).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._runtime import arrays as _arrays
from ..._runtime import validation as _v
from ..._runtime.streams import op_stream
from .._checks import real_dtype
from .._results import LstsqResult
from .._tiles._graph_dask import dask_array, meta_of, work_dtype
from ..qr import _tsqr_dask

__all__ = ["lstsq"]


def lstsq(a: Any, b: Any, cond: float | None, driver: str) -> LstsqResult:
    """``LstsqResult(x, residues, rank, s)`` of the Dask arrays ``a`` (m, n), ``m >= n``, one
    column of blocks, and ``b`` (m,) or (m, k); all lazy (``rank`` a 0-d integer array, ``s``
    ``None`` for ``gelsy``, as SciPy's)."""
    import dask
    da = dask_array()
    m, n = (int(d) for d in a.shape)
    vec = b.ndim == 1
    k = 1 if vec else int(b.shape[1])
    dtype = np.result_type(work_dtype(a), work_dtype(b))
    real = real_dtype(dtype)
    rhs = (b[:, None] if vec else b).astype(dtype).rechunk({0: a.chunks[0], 1: -1})
    r = _tsqr_dask.qr(da.concatenate([a.astype(dtype), rhs], axis=1).rechunk({1: -1}), "r")
    block = r.rechunk(-1).to_delayed().ravel()[0]
    root = dask.delayed(_root, pure=True, nout=4)(block, n, cond, driver, dtype)

    def lazy(part, shape, dt):
        return da.from_delayed(part, shape, dtype=dt, meta=meta_of(r, len(shape), dt))
    x, res, rank = lazy(root[0], (n, k), dtype), lazy(root[1], (k,), real), \
        lazy(root[2], (), np.int64)
    s = None if driver == "gelsy" else lazy(root[3], (n,), real)
    if vec:
        x, res = x[:, 0], res[0]
    if m == n or driver == "gelsy":  # SciPy reports residues only for m > n (not gelsy)
        res = da.from_array(meta_of(r, 1, real), chunks=-1, asarray=False)
    return LstsqResult(x, res, rank, s)


def _root(r, n, cond, driver, dtype):
    """The small problem at the root: ``(x (n, k), residues (k,), rank, s (n,) or None)`` from
    the R factor of ``[a | b]``."""
    r11, r12, r22 = r[:n, :n], r[:n, n:], r[n:, n:]
    residues = (abs(r22) ** 2).sum(axis=0)
    if _arrays.on_gpu(r):
        from ._lstsq_cuda import lstsq as engine
        with op_stream():  # engine functions run on the dispatcher's stream
            x, _, rank, s = engine(r11, r12, cond, driver, dtype)
    else:
        import scipy.linalg
        x, _, rank, s = scipy.linalg.lstsq(r11, r12, cond, check_finite=False,
                                           lapack_driver=driver)
    return x, residues, _v.namespace(r).asarray(int(rank), dtype=np.int64), s
