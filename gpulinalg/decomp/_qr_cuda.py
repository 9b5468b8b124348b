"""GPU engine of QR: cuSOLVER ``Xgeqrf`` then ``orgqr``/``ungqr`` to form Q.

CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.
"""

import numpy as np

from ._cusolver_cuda import Solver, fortran_batch
from ._results import QRResult

__all__ = ["qr"]


def qr(a, mode, dtype):
    """QR of the CuPy stack ``a`` (..., m, n): ``QRResult(Q, R)``, or R alone for
    ``mode="r"``; ``mode`` is ``"reduced"``, ``"complete"`` or ``"r"``."""
    import cupy
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = tuple(a.shape[:-2])
    w = fortran_batch(a, dtype)
    nb = len(w)
    tau = cupy.empty((nb, k), dtype=dtype)
    with Solver(dtype, nb) as sv:
        for i in range(nb):
            sv.geqrf(w[i], tau[i], i)
        r = cupy.triu(w[:, :(m if mode == "complete" else k), :])
        if mode == "r":
            sv.done()
            return r.reshape(batch + r.shape[1:])
        if mode == "complete" and m > n:
            q = cupy.empty((nb, m, m), dtype=dtype).transpose(0, 2, 1)
            q[:, :, :n] = w
        else:
            q = w[:, :, :k]  # column-major m x k block with leading dimension m
        for i in range(nb):
            sv.orgqr(q[i], k, tau[i], i)
        sv.done()  # QR cannot fail numerically: no need to wait for the info codes
    return QRResult(q.reshape(batch + q.shape[1:]), r.reshape(batch + r.shape[1:]))
