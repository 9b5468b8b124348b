"""The streamed triangular solve: stacks of medium and large matrices with few right-hand
sides, one thread block per matrix (and group of right-hand sides), in one launch.

``gl_small_trsm`` (:mod:`._fused_cuda`) holds its matrix in shared memory, so it stops at
order 64. Above, cuBLAS ``trsmBatched`` runs a chain of launches per call (diagonal-block
solves and GEMM updates, 16 and more for order 512) and, in double precision, loses to
torch's batched solves. ``gl_stream_trsm`` holds only the solution in shared memory and
streams the matrix through once per substitution:

* a panel of 32 rows at a time: the block's warps sum the panel's products with the solved
  entries (coalesced along whichever axis of the matrix is contiguous: consecutive lanes read
  consecutive addresses), stage the panel's diagonal block in shared memory, and then one warp
  per right-hand side substitutes through the diagonal block by shuffles;
* ``cho_solve`` runs the forward and the backward substitution in the same launch, the
  solution staying in shared memory between them;
* the conditioning rule of :mod:`._triangular_xp` and the finiteness flags are worked out in
  the same pass and folded into the same 3-word summary as ``gl_small_trsm``'s, with the same
  arguments, so the engine's plans and checks (:func:`._triangular_cuda.fused_solve`) serve
  both kernels.

The route table of :mod:`._batched_plan` (row ``"stream"``) says where it runs. Part of
decomp's internal layer: CuPy arrays in, on the dispatcher's stream.
"""

import numpy as np

from ..._runtime.device import attribute
from ..._runtime.kernels import kernel_source, raw_kernel
from ._fused_cuda import COMMON, checks, flag_before, strides_of
from ._scalars_cuda import KERNEL_TYPES

__all__ = ["fits", "group", "shared_limit", "shared_optin", "launch_args", "trsm", "MAX_SHARED",
           "STATIC_SHARED", "MAX_RHS", "TARGET_BLOCKS", "UNROLL"]

#: Shared memory a block may take for its solution columns (``n * kg`` entries), at most:
#: less on devices whose blocks may opt into less (:func:`shared_limit`).
MAX_SHARED = 96 * 1024
#: What the kernel's static shared memory takes at most (34 KiB for complex128), kept free
#: of the device's per-block limit.
STATIC_SHARED = 40 * 1024
#: Most right-hand sides: the matrix is read once per group of at most :data:`GROUP`
#: columns, so many more are better served by ``trsmBatched``'s GEMMs.
MAX_RHS = 16
#: Most right-hand sides one block solves (its warps substitute one each, at once).
GROUP = 4
#: Loads in flight per thread in a panel's sums (lanes along its rows), a compile option, by
#: order: ``((max_order, loads), ...)``. Above order 1024 a launch has few blocks, each
#: bound by its own loads; measured: benchmarks/results/h200-decomp-batched-2026-12-01.json.
UNROLL = ((1024, 4), (float("inf"), 8))
#: Groups of right-hand sides are made smaller until a launch has this many blocks, where it
#: can (two per multiprocessor of an H200): a few matrices are then solved by many blocks.
TARGET_BLOCKS = 264

_SOURCE = COMMON + kernel_source(__package__, "stream_trsm.cu")


def shared_optin():
    """The shared memory a block may opt into on the current device, in all (an H200: 227
    KiB; 48 KiB where the attribute cannot be read)."""
    return int(attribute("MaxSharedMemoryPerBlockOptin", 48 * 1024))


def shared_limit():
    """The dynamic shared memory a block may take on the current device: :data:`MAX_SHARED`,
    or less where the device's opt-in limit per block leaves less beside the static part
    (a laptop GPU of compute capability 8.6 allows 99 KiB in all; an H200 227)."""
    return max(0, min(MAX_SHARED, shared_optin() - STATIC_SHARED))


def fits(n, k, dtype, limit=MAX_SHARED):
    """Whether a stack of order ``n`` with ``k`` right-hand sides in ``dtype`` can run the
    streamed kernel: one solution column of ``n`` entries in ``limit`` bytes of shared memory
    (:func:`shared_limit` on a device)."""
    dtype = np.dtype(dtype)
    return (dtype in KERNEL_TYPES and 0 < n and 0 < k <= MAX_RHS
            and n * dtype.itemsize <= limit and n * n < 2 ** 31)


def group(n, k, nb, dtype, limit=MAX_SHARED):
    """Right-hand sides per block: the most (up to :data:`GROUP`, and what ``limit`` bytes of
    shared memory hold) that still give :data:`TARGET_BLOCKS` blocks, else one.

    >>> group(512, 4, 200, "float64"), group(2048, 4, 8, "float64"), group(256, 2, 4096, "f")
    (3, 1, 2)
    """
    most = min(k, GROUP, limit // (n * np.dtype(dtype).itemsize))
    for kg in range(most, 1, -1):
        if nb * -(-k // kg) >= TARGET_BLOCKS:
            return kg
    return 1


def _threads(dtype):
    # complex128: 256 threads (the partial sums of 16 warps would not fit static shared memory)
    return 256 if np.dtype(dtype) == np.complex128 else 512


def launch_args(x, n, nb, *views):
    """``(kernel, grid, block, strides, kg, shared)`` of the kernel for the ``(B, n, k)``
    solution ``x`` of ``nb`` matrices: the element strides of the ``(B, p, q)`` ``views``
    flattened, the group size (the argument before ``checks``) and the launch's dynamic
    shared memory, as an engine keeps them per layout."""
    k = x.shape[-1]
    limit = shared_limit()
    kg = group(n, k, nb, x.dtype, limit)
    t, r = KERNEL_TYPES[np.dtype(x.dtype)]
    threads = _threads(x.dtype)
    loads = next(u for top, u in UNROLL if n <= top)
    kern = raw_kernel("gl_stream_trsm", _SOURCE, {"T": t, "R": r},
                      options=("--std=c++17", f"-DNT={threads}", f"-DUNR={loads}"),
                      shared_bytes=limit)
    strides = tuple(s for v in views for s in strides_of(v))
    return (kern, (nb * -(-k // kg),), (threads,), strides, np.int32(kg),
            n * kg * np.dtype(x.dtype).itemsize)


def trsm(a3, b3, x, summ, tr, cj, mode, unit, squared, summarize, finite=False):
    """:func:`._fused_cuda.trsm`'s solve (same arguments and summary) by the streamed kernel:
    with ``finite``, :func:`._fused_cuda.flag_before`, then one launch; no synchronization."""
    nb, n, _ = x.shape
    kern, grid, block, st, kg, shared = launch_args(x, n, nb, a3, b3, x)
    if finite and summarize:
        flag_before(a3, summ)
    kern(grid, block, (a3, b3, x, summ, np.int32(n), np.int32(x.shape[-1]), *st,
                       np.int32(bool(tr)), np.int32(bool(cj)), np.int32(mode),
                       np.int32(bool(unit)), np.int32(bool(squared)), kg,
                       checks(summarize, False)), shared_mem=shared)
