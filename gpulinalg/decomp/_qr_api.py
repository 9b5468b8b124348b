"""QR factorization: validation and one dispatch to :mod:`._qr_cuda` (cuSOLVER ``Xgeqrf`` and
``orgqr``) or :mod:`._factor_host` (SciPy)."""

from typing import Any, Literal

import numpy as np

from .._runtime import dispatch as _dispatch
from .._runtime.budget import nbytes_of
from . import _factor_host, _qr_cuda
from ._checks import empty_result, flops_scale, prepare
from ._cusolver_cuda import workspace_bytes
from ._results import QRResult

__all__ = ["qr"]

MODES = ("reduced", "complete", "r")


def qr(a: Any, mode: Literal["reduced", "complete", "r"] = "reduced", *,
       check_finite: bool = True) -> QRResult | Any:
    """QR factorization ``a = Q @ R`` of a matrix or a batch of matrices, as NumPy's.

    Parameters
    ----------
    a : (..., m, n) array_like
    mode : {"reduced", "complete", "r"}, default "reduced"
        ``reduced``: Q is (..., m, k), R is (..., k, n) with ``k = min(m, n)``;
        ``complete``: Q is (..., m, m), R is (..., m, n); ``r``: only R, (..., k, n).
    check_finite : bool, default True

    Returns
    -------
    QRResult(Q, R), or R alone for ``mode="r"``
        In ``a``'s package; float32 in, float32 out; integers compute in float64.

    See Also
    --------
    numpy.linalg.qr : the same modes and results on the CPU.
    scipy.linalg.qr : the LAPACK routine behind the CPU engine.

    Notes
    -----
    The GPU engine runs cuSOLVER ``Xgeqrf`` and forms Q with ``orgqr``/``ungqr``; the CPU
    engine runs LAPACK ``geqrf``/``orgqr`` through SciPy. Neither fixes the signs of R's
    diagonal, so Q and R may differ in sign between engines (``Q @ R`` does not).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import qr
    >>> a = np.random.default_rng(0).standard_normal((6, 4))
    >>> q, r = qr(a)
    >>> q.shape, r.shape
    ((6, 4), (4, 4))
    >>> bool(np.allclose(q @ r, a)), bool(np.allclose(q.T @ q, np.eye(4)))
    (True, True)
    >>> bool(np.allclose(np.abs(qr(a, mode="r")), np.abs(r)))
    True
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    a, dtype = prepare(a, check_finite=check_finite)
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = tuple(a.shape[:-2])
    if a.size == 0:
        return _empty(a, mode, batch, m, n, dtype)
    q_cols = m if mode == "complete" else k
    nb = int(np.prod(batch, dtype=np.int64))
    arrays = nbytes_of((a.shape, dtype), (batch + (max(m, n), max(q_cols, n)), dtype),
                       (batch + (m, n), dtype))
    flops = nb * (4 * m * n * k - 2 * (m + n) * k * k + 4 * k ** 3 / 3) * flops_scale(dtype)
    return _dispatch.dispatch(
        "decomp.qr", _qr_cuda.qr, _factor_host.qr, (a, mode, dtype), flops=flops,
        nbytes=lambda: (arrays + workspace_bytes("geqrf", m, n, dtype)
                        + workspace_bytes("orgqr", m, n, dtype)))


def _empty(a, mode, batch, m, n, dtype):
    k = min(m, n)
    if mode == "r":
        return empty_result(a, (batch + (k, n), dtype))[0]
    if mode == "complete":
        return QRResult(*empty_result(a, (batch + (m, m), dtype, True), (batch + (m, n), dtype)))
    return QRResult(*empty_result(a, (batch + (m, k), dtype), (batch + (k, n), dtype)))
