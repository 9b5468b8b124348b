"""The wide triangular solve: one matrix with few right-hand sides, many thread blocks on it,
in one launch.

A single triangular solve with a few right-hand sides is a chain: the rows of one panel need
the solution of every panel before them. cuBLAS ``trsv``/``trsm`` walk that chain with a
handful of multiprocessors, and the streamed kernel of :mod:`._stream_trsm_cuda` gives a matrix
one block. ``gl_wide_trsm`` gives every panel of :data:`PANEL` rows its own block:

* a block takes a ticket (an atomic counter) and with it its panel, in the order of the
  substitution, so a block only ever waits for blocks that hold an earlier ticket and are
  therefore running: no deadlock however few blocks fit on the device at once;
* before it waits for anything, a block inverts its panel's diagonal block in shared memory
  (two 32 x 32 inversions by two warps, then the coupling block by two small products);
* it then sums the products of its rows with each earlier panel's solution as soon as that
  solution is there (the tile's loads issued before the wait), applies the inverse and writes
  its rows. A solution passes from block to block as *tagged words* (each 64-bit word 32 bits
  of a value and the launch's tag, stored at once): the waiting block reads the words
  themselves until they carry its launch's tag, so the chain's link is one read of the
  data, one tile and one product, with no flag and no memory fence on it;
* ``cho_solve``'s backward substitution runs in the same launch: its blocks take the tickets
  after every forward one and start from the forward pass's rows;
* the finiteness flags and the figures of the conditioning rule of :mod:`._triangular_xp`
  are folded by atomics into a small per-thread workspace; the last block to finish writes
  the same 3-word summary as the other solve kernels and puts the workspace's identities back;
  given a mapped host buffer (:class:`._scalars_cuda.MappedReadBack`), it writes the 3
  words there instead (the summary's atomics and their round trips skipped), then the call's
  epoch, so the host reads them without a copy or a stream synchronization.

SciPy's ``check_finite`` covers the triangle the solve never reads too: with it, each block
of the first pass reads that triangle's part of its rows after it has written its solution, so
the check runs beside the chain instead of before it (a flat pass over all of a 16384^2 float64
matrix takes about 0.6 ms on an H200). The route table of :mod:`._batched_plan`
(row ``"wide"``) says where it runs. Part of decomp's internal layer: CuPy arrays in, on the
dispatcher's stream.
"""

import numpy as np

from ..._runtime.kernels import kernel_source

from ._fused_cuda import COMMON, checks, strides_of
from ._scalars_cuda import KERNEL_TYPES, per_thread

__all__ = ["fits", "launch_args", "trsm", "workspace", "words", "PANEL", "MAX_RHS", "MAX_ORDER",
           "HEADER", "identities"]

#: Rows of a panel (one block each); the kernel's inversion assumes 64.
PANEL = 64
#: Most right-hand sides: a block solves up to 4 at once, more take more blocks.
MAX_RHS = 16
#: Columns one block solves.
GROUP = 4
#: Largest order: the limit of the orders measured (see the route table).
MAX_ORDER = 16384
#: Threads of a block (the kernel's mappings assume 4 x :data:`PANEL`).
THREADS = 256
#: Workspace words that a launch's last block puts back: ticket, done count, the diagonal's
#: largest and smallest magnitude, its first zero, the flags, 16 scales of b and 16 of x. Then
#: the last launch's tag, the buffer's length, and the panels' tagged words (:func:`words`).
HEADER = 6 + 2 * MAX_RHS

_SOURCE = COMMON + kernel_source(__package__, "wide_trsm.cu")


def identities(words):
    """A new workspace of ``words`` words: the header at rest (what the last block of a
    launch puts back), no tag used yet, its own length, no tagged word."""
    w = np.zeros(words, dtype=np.uint64)
    w[3] = 0x7FF0000000000000  # the smallest diagonal magnitude: +inf
    w[4] = (1 << 64) - 1       # the first zero on the diagonal: none
    w[HEADER + 1] = words
    return w


def words(n, k, mode, dtype):
    """Workspace words of a launch: the header, the tag and length, and per block (panel,
    column group and pass) a panel's solution in tagged words, one per 32 bits.

    >>> words(1024, 1, 0, "float64"), words(4096, 1, 0, "float32")
    (8232, 16424)
    """
    per_value = np.dtype(dtype).itemsize // 4
    return HEADER + 2 + blocks(n, k, mode) * PANEL * GROUP * per_value


def workspace(cupy, device, size, stream=None):
    """The calling thread's workspace on ``device`` for the stream ``stream`` (a pointer;
    default: the current one), at least ``size`` words long (made, or made longer, with
    :func:`identities`; a launch leaves its header at rest and its tag advanced), kept by
    :func:`._scalars_cuda.per_thread`: the launches of one thread on one stream run one after
    another, so two launches never share one."""
    if stream is None:
        stream = cupy.cuda.get_current_stream().ptr
    return per_thread(cupy, ("wide workspace", device, stream), _new_workspace, (cupy, size),
                      size)


def _new_workspace(cupy, size):
    return cupy.asarray(identities(max(size, 1024)))


def blocks(n, k, mode):
    """Blocks of a launch: one per panel, column group and pass.

    >>> blocks(4096, 4, 0), blocks(4096, 5, 2), blocks(100, 1, 1)
    (64, 256, 2)
    """
    return -(-n // PANEL) * -(-k // GROUP) * (2 if mode == 2 else 1)


def fits(n, k, dtype, limit=None):
    """Whether one matrix of order ``n`` with ``k`` right-hand sides in ``dtype`` can run the
    wide kernel (its diagonal block in ``limit`` bytes of shared memory, where given)."""
    dtype = np.dtype(dtype)
    if dtype not in KERNEL_TYPES or not (0 < n <= MAX_ORDER and 0 < k <= MAX_RHS):
        return False
    return limit is None or _shared_bytes(dtype) + _static_bytes(dtype) <= limit


def _shared_bytes(dtype):
    return PANEL * (PANEL + 1) * np.dtype(dtype).itemsize


def _static_bytes(dtype):
    return (GROUP + THREADS // PANEL * GROUP) * PANEL * np.dtype(dtype).itemsize + 64


#: No mapped host buffer (a null pointer) and its epoch: the summary is read from the device.
_NO_HOST, _NO_EPOCH = np.uint64(0), np.uint32(0)


def launch_args(x, n, mode, *views):
    """``(kernel, grid, block, strides, shared)`` of the kernel for the ``(1, n, k)`` solution
    ``x`` in ``mode`` (0, 1, 2: the grid holds both passes of ``cho_solve``): the element
    strides of the ``(1, p, q)`` ``views`` flattened and the launch's dynamic shared memory,
    as an engine keeps them per layout. The arguments end with the calling thread's
    workspace, a mapped host buffer (or null) and its epoch."""
    from ..._runtime.kernels import raw_kernel
    k = x.shape[-1]
    t, r = KERNEL_TYPES[np.dtype(x.dtype)]
    shared = _shared_bytes(x.dtype)
    kern = raw_kernel("gl_wide_trsm", _SOURCE, {"T": t, "R": r},
                      options=("--std=c++17", f"-DNT={THREADS}", f"-DMAXK={MAX_RHS}"),
                      shared_bytes=shared)
    strides = tuple(s for v in views for s in strides_of(v))
    return kern, (blocks(n, k, mode),), (THREADS,), strides, shared


def trsm(a3, b3, x, summ, tr, cj, mode, unit, squared, summarize, finite=False):
    """:func:`._fused_cuda.trsm`'s solve (same arguments and summary) of one matrix by the
    wide kernel (``finite``: NaN or Inf anywhere in ``a3`` is flagged, else in its triangle
    only): one launch, no synchronization."""
    nb, n, k = x.shape
    assert nb == 1, "the wide kernel solves one matrix"
    import cupy
    kern, grid, block, st, shared = launch_args(x, n, mode, a3, b3, x)
    ws = workspace(cupy, x.data.device_id, words(n, k, mode, x.dtype))
    kern(grid, block, (a3, b3, x, summ, np.int32(n), np.int32(k), *st, np.int32(bool(tr)),
                       np.int32(bool(cj)), np.int32(mode), np.int32(bool(unit)),
                       np.int32(bool(squared)), checks(summarize, finite), ws, _NO_HOST,
                       _NO_EPOCH), shared_mem=shared)
