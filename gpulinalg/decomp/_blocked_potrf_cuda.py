"""The blocked Cholesky factorization of a stack of medium matrices (orders 65 to 1024), in
place, in a few launches per block column. Not yet run on a GPU: no row of the route table
takes it (its tests force it, and ``benchmarks/decomp_batched.py --sections routes`` times it
against ``potrfBatched``).

At 64 x 256^2 and 8 x 512^2 the stack's factor takes cuSOLVER ``potrfBatched`` (46 kernels
over 64 x 256^2), as torch and CuPy do, and the three are level; the streamed kernel of
:mod:`._stream_potrf_cuda` (one thread block per matrix) lost to it at every such stack.
Here the work of a block column ``j`` of :data:`BLOCK` columns is spread over the whole GPU
for the whole stack at once, right-looking:

1. ``gl_small_potrf`` (:mod:`._fused_cuda`, the matrix in registers) factors every diagonal
   block ``A[j:j+b, j:j+b]`` in place, one thread block each;
2. one cuBLAS ``<t>trsmBatched`` solves the panels below them, ``L21 = A21 L11^-H``;
3. one ``<t>gemmStridedBatched`` updates the trailing matrices, ``A22 -= L21 L21^H`` (the
   whole square: the other triangle takes products too; the caller zeroes it or puts the
   input's entries back at the end).

The matrices are column-major (element strides ``(n * n, 1, n)``) and their lower triangle
is factored, the layout of :func:`._cholesky_cuda._work_copy`. Each block column's fused
launch folds its codes into a summary row of its own (a per-thread buffer, one row per block
column, the identities put back by each launch's last block), and the host reads all rows
back once: the first failed matrix, with the pivot of its first failed block column offset by
the column. Part of decomp's internal layer: CuPy arrays in, on the dispatcher's stream.
"""

import numpy as np

from . import _fused_cuda
from ._cusolver_cuda import pointer_array, routines
from ._scalars_cuda import summary_buffer, summary_row

__all__ = ["BLOCK", "MAX_ORDER", "fits", "potrf", "first_failure"]

#: Columns per block column: the fused kernel's order for every dtype (complex128 included).
BLOCK = 64
#: Largest order (the trailing updates' share grows with the order; the per-matrix routes of
#: the table take larger stacks).
MAX_ORDER = 1024

_NONE = _fused_cuda.NONE
_ROW = summary_row(_NONE, _NONE)  # a block column's summary at rest (the fused kernel's)


def fits(n, dtype):
    """Whether stacks of order ``n`` and ``dtype`` can take the blocked factorization.

    >>> fits(256, "float64"), fits(64, "float32"), fits(2048, "float32")
    (True, False, False)
    """
    return BLOCK < n <= MAX_ORDER and _fused_cuda.fits(BLOCK, dtype, "potrf")


def columns(n):
    """Block columns of an order-``n`` factorization.

    >>> columns(256), columns(300)
    (4, 5)
    """
    return -(-n // BLOCK)


#: Summary rows kept per thread and stream: one per block column of the largest order.
_ROWS = -(-MAX_ORDER // BLOCK)


def potrf(m, nonfinite, finite_of=None):
    """Factor the lower triangle of every matrix of ``m`` (``(B, n, n)``, element strides
    ``(n * n, 1, n)``) in place: ``L`` there, the strict upper triangle left with products
    (the caller zeroes or discards it). ``nonfinite``: the code base of a NaN or Inf pivot
    (:data:`._cholesky_cuda.NONFINITE`); ``finite_of``: an array whose NaN or Inf is flagged
    into the summary before the first launch (SciPy's ``check_finite`` of the input).
    Returns the summary's read-back (``get()``: the rows of all block columns of all calls
    on this thread and stream; :func:`first_failure` reads this call's). No
    synchronization."""
    import cupy
    nb, n = m.shape[0], m.shape[-1]
    if m.strides[1:] != (m.itemsize, n * m.itemsize) or not fits(n, m.dtype):
        raise ValueError("the blocked factorization takes column-major matrices of the "
                         "orders and dtypes of fits()")
    steps = columns(n)
    buf, back = summary_buffer(cupy, "blocked potrf", m.data.device_id, _NONE, _NONE,
                               rows=_ROWS)
    if finite_of is not None:
        _fused_cuda.flag_before(finite_of, buf[:_ROW.size])
    for s in range(steps):
        j = s * BLOCK
        e = min(j + BLOCK, n)
        d = m[:, j:e, j:e]
        _fused_cuda.potrf(d, d, buf[s * _ROW.size:(s + 1) * _ROW.size], True, False,
                          nonfinite)
        if e < n:
            _panel_and_update(m, j, e)
    return back


def _panel_and_update(m, j, e):
    """Steps 2 and 3 of block column ``j:e`` (module docstring)."""
    from nvmath.bindings import cublas

    from .._runtime.streams import get_handle
    nb, n = m.shape[0], m.shape[-1]
    b, rest = e - j, n - e
    prefix = routines(m.dtype).prefix
    handle = get_handle("cublas")
    conj = int(cublas.Operation.C if m.dtype.kind == "c" else cublas.Operation.T)
    one = np.ones(1, dtype=m.dtype)  # alpha and beta, read on the host as the calls are issued
    minus = -one
    # L21 = A21 L11^-H: B <- B op(A)^-1 with A the diagonal block, B the panel below it.
    # Both pointer arrays are held here: making the second may empty the cache of the first.
    diag, below = pointer_array(m[:, j:e, j:e]), pointer_array(m[:, e:, j:e])
    getattr(cublas, prefix + "trsm_batched")(
        handle, int(cublas.SideMode.RIGHT), int(cublas.FillMode.LOWER), conj,
        int(cublas.DiagType.NON_UNIT), rest, b, one.ctypes.data, int(diag.data.ptr), n,
        int(below.data.ptr), n, nb)
    # A22 -= L21 L21^H over the whole trailing square
    panel, trail = m[:, e:, j:e], m[:, e:, e:]
    step = n * n
    getattr(cublas, prefix + "gemm_strided_batched")(
        handle, int(cublas.Operation.N), conj, rest, rest, b, minus.ctypes.data,
        panel.data.ptr, n, step, panel.data.ptr, n, step, one.ctypes.data,
        trail.data.ptr, n, step, nb)


    one = np.ones(1, dtype=m.dtype)  # alpha and beta, read on the host as the calls are issued
    minus = -one
def first_failure(host, steps):
    """``(entry, code, flagged)`` from the read-back rows ``host`` (flat uint64 words) of a
    call with ``steps`` block columns: the first failed matrix and its code (``k + 1`` for a
    minor that is not positive, ``nonfinite + k`` for a NaN or Inf pivot, ``k`` counted from
    the matrix's first column), ``(None, 0, flagged)`` when none failed; ``flagged``: the
    input held NaN or Inf (the first row's flags: the first block column reads the input).

    A matrix that fails in block column ``s`` is left unfactored there, and the later block
    columns work on its leftovers; the first matrix to fail in any block column fails first
    in the earliest column where it appears (it is the smallest index of that column).

    >>> rows = np.tile(_ROW, 3).reshape(3, 8)
    >>> rows[1, 5] = (7 << 32) | 3          # matrix 7, minor 3 of block column 1
    >>> rows[2, 5] = (2 << 32) | 10         # matrix 2, minor 10 of block column 2
    >>> first_failure(rows.ravel(), 3)
    (2, 138, False)
    """
    rows = np.asarray(host, dtype=np.uint64).reshape(-1, _ROW.size)[:steps]
    flagged = bool(rows[0, 4]) if steps else False
    best = None
    for s, (minor, pivot) in enumerate(rows[:, 5:7].tolist()):
        for word in (minor, pivot):
            if word != _NONE:
                entry, code = word >> 32, (word & 0xFFFFFFFF) + s * BLOCK
                if best is None or entry < best[0]:
                    best = (entry, code)
    if best is None:
        return None, 0, flagged
    return best[0], best[1], flagged
