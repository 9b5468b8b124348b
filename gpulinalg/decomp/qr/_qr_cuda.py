"""GPU engine of QR: cuSOLVER ``Xgeqrf`` (cuBLAS ``geqrfBatched`` for stacks of small matrices,
by the table of :mod:`._batched_plan`) then ``orgqr``/``ungqr`` to form Q; for stacks of
matrices up to 64 x 64, the fused kernel of :mod:`._fused_qr_cuda` (Q and R in one launch); for a
single tall matrix in modes ``economic`` and ``r``, CholeskyQR2 (:mod:`._cholqr_cuda`) where its
check accepts the result.
cuSOLVER has no column-pivoted QR: the api sends ``pivoting=True`` to the CPU engine through
the dispatcher.

CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.
"""

import math

import numpy as np

from ..._runtime.validation import check_finite
from . import _cholqr_cuda
from .._kernels import _fused_qr_cuda, _policy_cuda
from .._gpu._batched_cuda import fan, spread
from .._gpu._batched_plan import lanes, route, tall_qr
from .._gpu._cusolver_cuda import Solver, fortran_batch
from .._gpu._finite_cuda import raise_nonfinite
from .._results import QRResult
from ..._runtime.streams import op_stream

__all__ = ["qr"]


def qr(a, mode, pivoting, lwork, overwrite_a, dtype, finite=False):
    """QR of the CuPy stack ``a`` (..., m, n) with SciPy's modes (``full``, ``economic``,
    ``r``, ``raw``) and results. ``pivoting`` must be False (cuSOLVER has no geqp3);
    ``lwork`` and ``overwrite_a`` are not read: cuSOLVER sizes its workspace, and the
    factorization runs on a column-major copy. ``finite``: SciPy's ``check_finite`` of
    ``a``, flagged by the column-major copy and read back once at the end (the call then
    waits for its work, as the engines that read codes do), or up front on the fused
    route."""
    import cupy
    if pivoting:
        raise ValueError("the cuSOLVER QR has no column pivoting")
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = tuple(a.shape[:-2])
    big = max(m, n)
    way = route("geqrf", big, math.prod(batch),
                fused=_policy_cuda.enabled() and _fused_qr_cuda.fits(big, dtype), dtype=dtype)
    if way == "fused":
        if finite:
            check_finite(a, "a")
        return _fused_qr_cuda.qr(a, mode, dtype)
    nb = math.prod(batch)
    if way == "looped" and mode in ("economic", "r") and tall_qr(m, n, nb):
        out = _cholqr_cuda.qr(a, mode, dtype, finite)
        if out is not None:
            return out  # else the check rejected it: Householder QR below
    info = cupy.zeros(nb + 1, dtype=np.int32)  # the geqrf codes, and a's finiteness flag
    w = fortran_batch(a, dtype, flag=info[nb:] if finite else None)
    tau = cupy.empty((nb, k), dtype=dtype)
    with Solver(dtype, nb, info=info) as sv:
        if way == "batched":
            sv.geqrf_batched(w, tau)
        else:
            with fan(lanes("geqrf", max(m, n), nb)) as fanned:
                ways = spread(sv, fanned, nb)
                for i in range(nb):
                    lane, stream = ways[i % len(ways)]
                    with stream:
                        lane.geqrf(w[i], tau[i], i)
        r = cupy.triu(w[:, :(m if mode in ("full", "r") else k), :])
        r = r.reshape(batch + r.shape[1:])
        if mode in ("r", "raw"):
            _finish(sv, finite, nb)
            if mode == "r":
                return (r,)
            return ((w.reshape(batch + (m, n)), tau.reshape(batch + (k,))), r)
        if mode == "full" and m > n:
            q = cupy.empty((nb, m, m), dtype=dtype).transpose(0, 2, 1)
            q[:, :, :n] = w
        else:
            q = w[:, :, :k]  # column-major m x k block with leading dimension m
        with fan(lanes("orgqr", max(m, n), nb)) as fanned:
            ways = spread(sv, fanned, nb)
            for i in range(nb):
                lane, stream = ways[i % len(ways)]
                with stream:
                    lane.orgqr(q[i], k, tau[i], i)
        _finish(sv, finite, nb)
    return QRResult(q.reshape(batch + q.shape[1:]), r)


def _finish(sv, finite, nb):
    """End the solver: QR cannot fail numerically, so without ``finite`` nothing waits for
    the codes; with it, one read-back of the codes and the flag in slot ``nb``."""
    if not finite:
        sv.done()
    elif sv.check("qr")[nb]:
        raise_nonfinite("a")


def tile_qr(x):
    """Dask tile task: reduced QR of the CuPy block ``x`` (m, n): ``(Q (m, k), R (k, n))``,
    ``k = min(m, n)``."""
    import cupy
    m, n = x.shape
    k = min(m, n)
    if k == 0:
        return cupy.zeros((m, k), x.dtype), cupy.zeros((k, n), x.dtype)
    with op_stream():
        q, r = qr(x, "economic", False, None, False, x.dtype)
    return q, r
