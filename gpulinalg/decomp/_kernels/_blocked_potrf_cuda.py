"""The blocked Cholesky factorization of a stack of medium matrices (orders 65 to 1024), in
place, in two launches and a cuBLAS call per block column.

The library route of such stacks is cuSOLVER ``potrfBatched`` (as torch and CuPy), and one
thread block per matrix lost to it (a streamed kernel, deleted). Here the work of a block column
``j`` of :func:`width` columns is spread over the whole GPU for the whole stack at once,
right-looking:

1. ``gl_small_potrf`` (:mod:`._fused_cuda`, the matrix in registers) factors every diagonal
   block ``A[j:j+b, j:j+b]`` in place, one thread block each;
2. ``gl_blocked_panel`` (here) solves the panels below them, ``L21 = A21 L11^-H``: a thread
   block per matrix and :data:`ROWS` rows of its panel, ``L11`` in shared memory, a row per
   thread in registers (on the H200 cuBLAS ``trsmBatched`` took 34 us a call for this at
   64 x 256^2, a third of the whole ``potrfBatched``); for ``cholesky`` it also zeroes the
   block row right of the diagonal block, the strict upper triangle that earlier updates
   wrote products to and nothing reads again;
3. one ``<t>gemmStridedBatched`` updates the trailing matrices, ``A22 -= L21 L21^H`` (the
   whole square: the other triangle takes products too, zeroed by step 2 of a later block
   column, or given the input's entries back by the caller for ``cho_factor``).

The matrices are column-major (element strides ``(n * n, 1, n)``) and their lower triangle
is factored, the layout of :func:`._cholesky_cuda._work_copy`. Each block column's fused
launch folds its codes into a summary row of its own (a per-thread buffer, one row per block
column, the identities put back by each launch's last block), and the host reads all rows
back once: the first failed matrix, with the pivot of its first failed block column offset by
the column. Part of decomp's internal layer: CuPy arrays in, on the dispatcher's stream.
"""

import numpy as np

from ..._runtime import graphs
from ..._runtime.kernels import kernel_source, raw_kernel
from . import _fused_cuda
from .._gpu._cusolver_cuda import routines
from ._scalars_cuda import KERNEL_TYPES, per_thread, summary_buffer, summary_row

__all__ = ["BLOCK", "BLOCKS", "WIDTHS", "ROWS", "MAX_ORDER", "fits", "width", "potrf",
           "flag_slot", "first_failure"]

#: The block column widths the kernels are built for (orders of the fused kernel).
BLOCKS = (32, 64)
#: Panel rows of a thread block of ``gl_blocked_panel`` (a row per thread).
ROWS = 128
#: Largest order (the trailing updates' share grows with the order; the per-matrix routes of
#: the table take larger stacks).
MAX_ORDER = 1024
#: Columns per block column by stack, ``((max_order, min_batch, width[, dtypes]), ...)``: the
#: first row with ``n <= max_order`` and ``batch >= min_batch`` (and, where a row names
#: dtypes, the stack's among them). 32 wins only for float64 at order 128 from 512 matrices
#: (more, smaller diagonal blocks); 64 everywhere else; measured:
#: benchmarks/results/h200-decomp-batched-2026-12-02i.json.
WIDTHS = ((128, 512, 32, ("float64",)), (MAX_ORDER, 1, 64))
#: A width of :data:`BLOCKS` for every call instead of :data:`WIDTHS` (``None``: the table),
#: read at each call (the route rows of ``benchmarks.decomp_batched`` time each width).
BLOCK = None
#: The panel kernel holds ``L11`` in 48 KiB of static shared memory: not complex128.
_PANEL_TYPES = ("float32", "float64", "complex64")

_PANEL_SOURCE = _fused_cuda.COMMON + kernel_source(__package__, "blocked_panel.cu")

_NONE = _fused_cuda.NONE
_ROW = summary_row(_NONE, _NONE)  # a block column's summary at rest (the fused kernel's)


def fits(n, dtype):
    """Whether stacks of order ``n`` and ``dtype`` can take the blocked factorization.

    >>> fits(256, "float64"), fits(64, "float32"), fits(2048, "float32"), fits(256, "complex128")
    (True, False, False, False)
    """
    return 64 < n <= MAX_ORDER and np.dtype(dtype).name in _PANEL_TYPES


def width(n, batch, dtype):
    """The block columns' width for ``batch`` matrices of order ``n`` and ``dtype``
    (:data:`BLOCK` where set, else :data:`WIDTHS`).

    >>> width(128, 512, "float64"), width(128, 256, "float64"), width(128, 512, "float32")
    (32, 64, 64)
    """
    if BLOCK is not None:
        return BLOCK
    name = np.dtype(dtype).name
    for row in WIDTHS:
        if n <= row[0] and batch >= row[1] and (len(row) < 4 or name in row[3]):
            return row[2]
    return max(BLOCKS)


def columns(n, block):
    """Block columns of an order-``n`` factorization ``block`` columns wide.

    >>> columns(256, 64), columns(300, 64), columns(300, 32)
    (4, 5, 10)
    """
    return -(-n // block)


#: Summary rows kept per thread and stream: one per block column of the largest order.
_ROWS = -(-MAX_ORDER // min(BLOCKS))


def potrf(m, nonfinite, finite_of=None, clean=False, block=None):
    """Factor the lower triangle of every matrix of ``m`` (``(B, n, n)``, element strides
    ``(n * n, 1, n)``) in place: ``L`` there, the strict upper triangle zero (``clean``) or
    left with products (the caller puts back or discards it). ``nonfinite``: the code base of
    a NaN or Inf pivot (:data:`._cholesky_cuda.NONFINITE`); ``finite_of``: an array whose NaN
    or Inf is flagged into the summary before the first launch (SciPy's ``check_finite`` of
    the input); ``block``: the block columns' width (default :func:`width`). Returns the
    summary's read-back (``get()``: the rows of all block columns of all calls on this thread
    and stream; :func:`first_failure` reads this call's). No synchronization."""
    import cupy
    n = m.shape[-1]
    if m.strides[1:] != (m.itemsize, n * m.itemsize) or m.strides[0] != n * n * m.itemsize \
            or not fits(n, m.dtype):
        raise ValueError("the blocked factorization takes column-major matrices of the "
                         "orders and dtypes of fits(), one after another")
    buf, back = summary_buffer(cupy, "blocked potrf", m.data.device_id, _NONE, _NONE,
                               rows=_ROWS)
    if finite_of is not None:
        _fused_cuda.flag_before(finite_of, buf[:_ROW.size])
    from ..._runtime.streams import get_handle
    handle = get_handle("cublas")
    # The chain's launches replayed as a CUDA graph where the stack comes back to the same
    # place (CuPy's pool gives a loop's working copies one or two places): their Python took
    # longer than their device time at 64 x 256^2 on the H200 (0.39 ms a call, 0.2 ms of
    # kernels). The key holds every address the chain reads; the first run is direct.
    block = block or width(n, m.shape[0], m.dtype)
    key = ("blocked potrf", m.data.device_id, m.dtype.char, n, m.shape[0], bool(clean),
           nonfinite, block, int(m.data.ptr), int(buf.data.ptr), int(handle))
    graphs.entry(key, dict).launch(
        lambda _: _chain(m, buf, nonfinite, clean, _Update(m, handle), block), warm=1)
    return back


def _chain(m, buf, nonfinite, clean, gemm, block):
    """The launches of every block column (module docstring), on the current stream."""
    n = m.shape[-1]
    panel = _panel_kernel(m.dtype, block)
    for s in range(columns(n, block)):
        j = s * block
        e = min(j + block, n)
        d = m[:, j:e, j:e]
        _fused_cuda.potrf(d, d, buf[s * _ROW.size:(s + 1) * _ROW.size], True, clean,
                          nonfinite)
        if e < n:
            panel((m.shape[0], -(-(n - e) // ROWS)), (ROWS,),
                  (m, np.int32(n), np.int32(j), np.int32(bool(clean))))
            gemm(j, e)


def flag_slot(device):
    """The int32 device slot where a copy made before :func:`potrf` on this thread and the
    current stream flags NaN or Inf of the input (the first summary row's accumulating flags
    word, which the first launch moves to its read-back): ``potrf``'s ``finite_of`` in the
    copy's own pass."""
    import cupy
    buf, _ = summary_buffer(cupy, "blocked potrf", device, _NONE, _NONE, rows=_ROWS)
    # kept by the buffer's address (the view holds the buffer: no other one takes its place
    # while it is kept); a repeat makes no view (three CuPy views took ~10 us a call)
    return per_thread(cupy, ("blocked potrf flag", int(buf.data.ptr)), _int32_head, (buf,))


def _int32_head(buf):
    return buf[:1].view(np.int32)[:1]


def _panel_kernel(dtype, block):
    t, r = KERNEL_TYPES[np.dtype(dtype)]
    return raw_kernel("gl_blocked_panel", _PANEL_SOURCE, {"T": t, "R": r},
                      options=("--std=c++17", f"-DNB={block}", f"-DROWS={ROWS}"))


class _Update:
    """Step 3 of a block column (module docstring): ``A22 -= L21 L21^H`` over the whole
    trailing square of every matrix of ``m``, one ``<t>gemmStridedBatched`` on the cuBLAS
    ``handle``."""

    def __init__(self, m, handle):
        from nvmath.bindings import cublas
        self.base, self.item = m.data.ptr, m.itemsize
        self.n, self.nb = m.shape[-1], m.shape[0]
        self.call = getattr(cublas, routines(m.dtype).prefix + "gemm_strided_batched")
        self.handle = handle
        self.ops = (int(cublas.Operation.N),
                    int(cublas.Operation.C if m.dtype.kind == "c" else cublas.Operation.T))
        # alpha and beta, read on the host as the calls are issued
        self.one = np.ones(1, dtype=m.dtype)
        self.minus = -self.one

    def __call__(self, j, e):
        n = self.n
        rest, step = n - e, n * n
        panel = self.base + (j * n + e) * self.item  # element (e, j), column-major
        trail = self.base + (e * n + e) * self.item
        self.call(self.handle, *self.ops, rest, rest, e - j, self.minus.ctypes.data,
                  panel, n, step, panel, n, step, self.one.ctypes.data, trail, n, step,
                  self.nb)


def first_failure(host, n, block):
    """``(entry, code, flagged)`` from the read-back rows ``host`` (flat uint64 words) of a
    call of order ``n`` whose block columns were ``block`` wide: the
    first failed matrix and its code (``k + 1`` for a
    minor that is not positive, ``nonfinite + k`` for a NaN or Inf pivot, ``k`` counted from
    the matrix's first column), ``(None, 0, flagged)`` when none failed; ``flagged``: the
    input held NaN or Inf (the first row's flags: the first block column reads the input).

    A matrix that fails in block column ``s`` is left unfactored there, and the later block
    columns work on its leftovers; the first matrix to fail in any block column fails first
    in the earliest column where it appears (it is the smallest index of that column).

    >>> rows = np.tile(_ROW, 3).reshape(3, 8)
    >>> rows[1, 5] = (7 << 32) | 3          # matrix 7, minor 3 of block column 1
    >>> rows[2, 5] = (2 << 32) | 10         # matrix 2, minor 10 of block column 2
    >>> first_failure(rows.ravel(), 150, 64)
    (2, 138, False)
    """
    steps = columns(n, block)
    rows = np.asarray(host, dtype=np.uint64).reshape(-1, _ROW.size)[:steps]
    flagged = bool(rows[0, 4]) if steps else False
    best = None
    for s, (minor, pivot) in enumerate(rows[:, 5:7].tolist()):
        for word in (minor, pivot):
            if word != _NONE:
                entry, code = word >> 32, (word & 0xFFFFFFFF) + s * block
                if best is None or entry < best[0]:
                    best = (entry, code)
    if best is None:
        return None, 0, flagged
    return best[0], best[1], flagged
