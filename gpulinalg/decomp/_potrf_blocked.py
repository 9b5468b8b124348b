"""Cholesky of large matrices by recursive halving: ``Xpotrf`` on the leaves, cuBLAS between.

For the lower triangle of a column-major ``A = [[A11, .], [A21, A22]]``::

    L11 = chol(A11)                  recursively
    L21 = A21 L11^-H                 one TRSM
    A22 <- A22 - L21 L21^H           one SYRK (HERK for complex)
    L22 = chol(A22)                  recursively

Two thirds of the ``n^3/3`` flops land in the TRSM and SYRK of the top level, large enough to
run near the GEMM rate, where cuSOLVER's own blocking of ``Xpotrf`` runs well below it on big
matrices (``benchmarks/decomp_dense.py`` measures both). Each leaf writes its own ``info``
slot, so the failing leading minor is the first failing leaf's code plus the leaf's offset.
"""

import numpy as np

__all__ = ["LEAF_N", "leaves", "potrf"]

#: Matrices of larger order are halved; ``0`` turns the recursion off (``Xpotrf`` only).
LEAF_N = 8192
#: Split points are multiples of this, so that the off-diagonal blocks stay aligned.
ALIGN = 256


def _split(n):
    half = -(-n // 2)
    return max(1, min(n - 1, -(-half // ALIGN) * ALIGN))


def _leaf(leaf):
    return LEAF_N if leaf is None else int(leaf)


def leaves(n, leaf=None):
    """``[(offset, order), ...]`` of the diagonal blocks :func:`potrf` hands to ``Xpotrf``,
    in the order it factors them (one ``info`` slot each).

    Examples
    --------
    >>> from gpulinalg.decomp._potrf_blocked import leaves
    >>> leaves(20000, leaf=8192)
    [(0, 5120), (5120, 4864), (9984, 5120), (15104, 4896)]
    >>> leaves(100, leaf=8192)
    [(0, 100)]
    """
    leaf = _leaf(leaf)
    if not leaf or n <= leaf:
        return [(0, n)]
    n1 = _split(n)
    return leaves(n1, leaf) + [(n1 + o, s) for o, s in leaves(n - n1, leaf)]


def _ld(a):
    return max(a.strides[1] // a.itemsize, a.shape[0], 1)


def potrf(sv, a, lower, slot=0, leaf=None):
    """Cholesky of the column-major ``a`` in place with the :class:`~._cusolver.Solver` ``sv``;
    leaf ``j`` of :func:`leaves` reports in ``info`` slot ``slot + j``. Only the lower triangle
    is split (the upper one goes to ``Xpotrf`` whole). Returns the next free slot."""
    leaf, n = _leaf(leaf), a.shape[0]
    if not lower or not leaf or n <= leaf:
        sv.potrf(a, lower, slot)
        return slot + 1
    n1 = _split(n)
    slot = potrf(sv, a[:n1, :n1], True, slot, leaf)
    _trsm_right(a[:n1, :n1], a[n1:, :n1])
    _rank_k_update(a[n1:, :n1], a[n1:, n1:])
    return potrf(sv, a[n1:, n1:], True, slot, leaf)


def _trsm_right(l11, b):
    """``b <- b @ l11^-H`` for lower triangular ``l11`` (cuBLAS TRSM, right side, in place)."""
    from nvmath.bindings import cublas

    from .._runtime.streams import get_handle
    from ._cusolver import routines
    one = np.ones(1, dtype=b.dtype)
    trans = cublas.Operation.C if b.dtype.kind == "c" else cublas.Operation.T
    m, n = b.shape
    getattr(cublas, routines(b.dtype).prefix + "trsm")(
        get_handle("cublas"), int(cublas.SideMode.RIGHT), int(cublas.FillMode.LOWER),
        int(trans), int(cublas.DiagType.NON_UNIT), m, n, one.ctypes.data, l11.data.ptr,
        _ld(l11), b.data.ptr, _ld(b))


def _rank_k_update(l21, c):
    """Lower triangle of ``c <- c - l21 @ l21^H`` (cuBLAS SYRK, or HERK for complex)."""
    from nvmath.bindings import cublas

    from .._runtime.streams import get_handle
    from ._common import real_dtype
    from ._cusolver import routines
    complex_ = l21.dtype.kind == "c"
    scalars = np.array([-1.0, 1.0], dtype=real_dtype(l21.dtype))
    n, k = l21.shape
    getattr(cublas, routines(l21.dtype).prefix + ("herk" if complex_ else "syrk"))(
        get_handle("cublas"), int(cublas.FillMode.LOWER), int(cublas.Operation.N), n, k,
        scalars.ctypes.data, l21.data.ptr, _ld(l21), scalars.ctypes.data + scalars.itemsize,
        c.data.ptr, _ld(c))
