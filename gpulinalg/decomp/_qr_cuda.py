"""GPU engine of QR: cuSOLVER ``Xgeqrf`` then ``orgqr``/``ungqr`` to form Q; and the GPU
route of column-pivoted QR, which cuSOLVER lacks (:func:`qr_on_host`).

CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.
"""

from .._runtime import dispatch as _dispatch
from .._runtime.arrays import convert_tree, to_host
from .._runtime.validation import namespace
from ._cusolver_cuda import Solver, fortran_batch
from ._results import QRResult

__all__ = ["qr", "qr_on_host", "HOST_ROUTE"]

#: Why ``pivoting=True`` runs on the host (noted as ``host_route`` in ``last_run().details``).
HOST_ROUTE = ("column-pivoted QR (LAPACK geqp3) ran on the CPU on host copies: cuSOLVER has "
              "no pivoted QR")


def qr(a, mode, pivoting, lwork, overwrite_a, dtype):
    """QR of the CuPy stack ``a`` (..., m, n) with SciPy's modes (``full``, ``economic``,
    ``r``, ``raw``) and results. ``pivoting`` must be False (see :func:`qr_on_host`);
    ``lwork`` and ``overwrite_a`` are not read: cuSOLVER sizes its workspace, and the
    factorization runs on a column-major copy."""
    import cupy
    if pivoting:
        raise ValueError("the cuSOLVER QR has no column pivoting: use qr_on_host")
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = tuple(a.shape[:-2])
    w = fortran_batch(a, dtype)
    nb = len(w)
    tau = cupy.empty((nb, k), dtype=dtype)
    with Solver(dtype, nb) as sv:
        for i in range(nb):
            sv.geqrf(w[i], tau[i], i)
        r = cupy.triu(w[:, :(m if mode in ("full", "r") else k), :])
        r = r.reshape(batch + r.shape[1:])
        if mode in ("r", "raw"):
            sv.done()
            if mode == "r":
                return (r,)
            return ((w.reshape(batch + (m, n)), tau.reshape(batch + (k,))), r)
        if mode == "full" and m > n:
            q = cupy.empty((nb, m, m), dtype=dtype).transpose(0, 2, 1)
            q[:, :, :n] = w
        else:
            q = w[:, :, :k]  # column-major m x k block with leading dimension m
        for i in range(nb):
            sv.orgqr(q[i], k, tau[i], i)
        sv.done()  # QR cannot fail numerically: no need to wait for the info codes
    return QRResult(q.reshape(batch + q.shape[1:]), r)


def qr_on_host(a, mode, pivoting, lwork, overwrite_a, dtype, *, host_qr):
    """The GPU route of ``qr`` for what cuSOLVER cannot do (column pivoting): ``a`` copied to
    the host, ``host_qr`` (the CPU engine, handed in by the api) run there, the results
    copied back to ``a``'s package. Noted as ``host_route`` in ``last_run().details``."""
    xp = namespace(a)
    _dispatch.note(host_route=HOST_ROUTE)
    host = to_host(a)
    out = host_qr(host, mode, pivoting, lwork, host is not a, dtype)  # a copy: overwrite it
    return convert_tree(out, xp.asarray)
