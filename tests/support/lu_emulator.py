"""CPU emulation of cuSOLVER's ``Xgetrf``/``Xgetrs`` and cuBLAS's ``<t>getrfBatched``/
``<t>getrsBatched`` for :mod:`tests.support.cusolver_emulator`: the real bindings' arguments
(raw pointers, leading dimensions, 1-based pivots of the routine's integer width), read and
written column-major through :func:`~tests.support.cusolver_emulator.view` with LAPACK."""

import numpy as np

from tests.support import cusolver_emulator as _emu


def _lapack(name, dtype):
    return _emu._lapack(name, dtype)


def _getrf_at(a, m, n, lda, dtype, ipiv, width):
    """LAPACK ``getrf`` of the matrix at ``a``, in place; 1-based pivots of ``width`` (int32,
    int64) at ``ipiv``; returns ``info``. A zero pivot still completes, as cuSOLVER."""
    A = _emu.view(a, m, n, lda, dtype)
    lu, piv, code = _lapack("getrf", dtype)(np.array(A, order="F"))
    A[...] = lu
    k = min(m, n)
    if k:
        _emu.view(ipiv, k, 1, k, width)[:, 0] = piv + 1
    return code


def _getrs_at(trans, n, nrhs, a, lda, dtype, ipiv, width, b, ldb):
    A = _emu.view(a, n, n, lda, dtype)
    B = _emu.view(b, n, nrhs, ldb, dtype)
    piv = np.array(_emu.view(ipiv, n, 1, n, width)[:, 0]) - 1
    assert piv.min() >= 0 and piv.max() < n, "pivot out of range: cuSOLVER would fault"
    x, code = _lapack("getrs", dtype)(np.array(A, order="F"), piv.astype(np.int32),
                                      np.array(B, order="F"), trans=int(trans))
    B[...] = x
    return code


def xgetrf(h, p, m, n, dt, a, lda, ipiv, ct, dbuf, dsz, hbuf, hsz, info):
    _emu.CALLS["getrf"] += 1
    assert dt == ct and dsz > 0
    _emu._set_info(info, _getrf_at(a, m, n, lda, _emu._dtype_of(dt), ipiv, np.int64))


def xgetrs(h, p, trans, n, nrhs, dt, a, lda, ipiv, dtb, b, ldb, info):
    _emu.CALLS["getrs"] += 1
    assert dt == dtb
    _emu._set_info(info, _getrs_at(trans, n, nrhs, a, lda, _emu._dtype_of(dt), ipiv,
                                   np.int64, b, ldb))


def getrf_batched(dtype):
    def getrf_batched(h, n, aarray, lda, p, info, batch):
        _emu.CALLS["getrf_batched"] += 1
        assert isinstance(info, int) and isinstance(p, int) and p
        for i, ptr in enumerate(_emu.pointers(aarray, batch)):
            code = _getrf_at(ptr, n, n, lda, dtype, p + 4 * n * i, np.int32)
            _emu._set_info(info + 4 * i, code)
    return getrf_batched


def getrs_batched(dtype):
    def getrs_batched(h, trans, n, nrhs, aarray, lda, dev_ipiv, barray, ldb, info, batch):
        _emu.CALLS["getrs_batched"] += 1
        ptrs = zip(_emu.pointers(aarray, batch), _emu.pointers(barray, batch))
        for i, (pa, pb) in enumerate(ptrs):
            _getrs_at(trans, n, nrhs, pa, lda, dtype, dev_ipiv + 4 * n * i, np.int32, pb, ldb)
        _emu._set_info(info, 0)  # a host address: argument errors only
    return getrs_batched


#: Names the LU engines call through the fake CuPy module beyond the emulator's own list.
CUPY_NAMES = ("prod", "sum", "log", "any", "zeros_like", "ascontiguousarray", "array")
