"""Fused kernels for stacks of small matrices: a whole Cholesky call, or a whole triangular
solve, in one launch per stack.

On stacks of small matrices (order <= 64) the batched library routines are latency bound and
every extra launch shows: the working copy, ``potrfBatched``, the scan of the factor's
diagonal, the finiteness flag, the pointer arrays, two ``trsmBatched`` calls and the reductions
of the conditioning rule cost several times the arithmetic. Here one thread block holds one
matrix in shared memory and does everything on it in one pass over the input:

``gl_small_potrf``
    reads the triangle ``potrf`` would read, flags NaN or Inf anywhere in the matrix (SciPy's
    ``check_finite``), factors it (right-looking, the pivots kept until a final scaling), and
    writes the factor with the other triangle zero (``cholesky``) or ``a``'s entries
    (``cho_factor``). Its codes are ``potrf``'s (``k + 1``: leading minor ``k + 1`` not
    positive) plus :data:`._cholesky_cuda.NONFINITE` ``+ k`` for a pivot that is NaN or Inf.
``gl_small_trsm``
    solves with a triangular matrix (``solve_triangular``) or with a Cholesky factor and its
    conjugate transpose (``cho_solve``), and works out the conditioning rule of
    :mod:`._triangular_xp` and the finiteness flags of both inputs in the same pass.

Neither writes a per-matrix record: every block folds its figures into one small **summary**
(:func:`summary`, 3 words) by atomics, so the engine reads back 24 bytes whatever the stack:

* ``gl_small_potrf``: NaN/Inf flag; the first matrix (lowest index) whose minor failed and its
  code, packed as ``index << 32 | code``; the same for the first NaN/Inf pivot;
* ``gl_small_trsm``: flags (``a`` holds NaN/Inf: 1, ``b``: 2, a zero on the diagonal: 4) and
  the bound ``cond`` of the rule (``max`` over the stack of ``max(diag_bound, rhs_bound)``,
  NaN sticky, as :func:`._triangular_xp.judge` takes it), as the bits of a float64 (the bits
  of non-negative doubles order as the doubles, NaN above everything).

The summary lives in a per-thread buffer: the last block of a launch (a ticket counter) moves
the totals to the read-back slots and puts the identities back, so no launch is spent zeroing
it. The host work of a clean call is one read-back of 3 words and a few float operations.
Part of decomp's internal layer: CuPy arrays in, on the dispatcher's stream.
"""

import numpy as np

from ..._runtime.kernels import kernel_source, raw_kernel
from .._gpu._finite_cuda import FINITE_PREAMBLE, flag_nonfinite
from ._scalars_cuda import (KERNEL_TYPES, SCALAR_PREAMBLE, SUMMARY_PREAMBLE, size_class,
                            summary_buffer)

__all__ = ["SIZES", "TILE", "tile", "fits", "potrf", "trsm", "checks", "launch_args", "summary",
           "as_float", "strides_of", "flag_before", "COMMON", "NONE", "A_BAD", "B_BAD",
           "ZERO_DIAGONAL"]

#: The compiled orders per op: a stack of order ``n`` runs the smallest one that holds it.
SIZES = {"potrf": (8, 16, 32, 64, 128), "trsm": (8, 16, 32, 64)}
#: ``potrf``: the register tile of one thread per (order, dtype char): its side ``TS`` (the
#: block is ``(NB / TS)^2`` threads), or ``(TS, M)``: ask the compiler for ``M`` resident blocks
#: per multiprocessor (``__launch_bounds__``; fewer registers a thread). Set from the kernel
#: rows of ``benchmarks.decomp_batched`` (``--sections kernels``); see :func:`tile`.
TILE = {(size, kind): ts for size, ts in {8: 2, 16: 2, 32: 4, 64: 4, 128: 8}.items()
        for kind in "fdFD"}
# order 128 in float64: TS 4 (1024 threads, 64 registers) beat TS 8; measured:
# benchmarks/results/h200-decomp-batched-2026-12-02h.json
TILE[(128, "d")] = 4
#: Largest order per op and dtype. ``potrf`` holds the matrix in registers (128^2 complex128
#: would spill); ``trsm`` holds it in 48 KiB of static shared memory.
MAX_ORDER = {
    "potrf": {np.dtype(np.float32): 128, np.dtype(np.float64): 128,
              np.dtype(np.complex64): 128, np.dtype(np.complex128): 64},
    "trsm": {np.dtype(np.float32): 64, np.dtype(np.float64): 64,
             np.dtype(np.complex64): 64, np.dtype(np.complex128): 32}}
#: "No matrix": the identity of the packed first-failure words of ``gl_small_potrf``.
NONE = (1 << 64) - 1
#: Flags of the ``gl_small_trsm`` summary.
A_BAD, B_BAD, ZERO_DIAGONAL = 1, 2, 4
#: Identities of summary words 1 and 2 (the slots the atomics fold into).
_IDENTITY = {"potrf": (NONE, NONE), "trsm": (0, NONE)}

_TYPES = KERNEL_TYPES

#: The preambles of the fused kernels (also of :mod:`._stream_trsm_cuda`'s).
COMMON = (FINITE_PREAMBLE + SCALAR_PREAMBLE + SUMMARY_PREAMBLE
          + kernel_source(__package__, "fused_common.cu"))

_POTRF_SOURCE = COMMON + kernel_source(__package__, "small_potrf.cu")

_TRSM_SOURCE = COMMON + kernel_source(__package__, "small_trsm.cu")


def fits(n, dtype, op="trsm"):
    """Whether a stack of order ``n`` and ``dtype`` has a fused kernel for ``op`` (``"potrf"``
    or ``"trsm"``)."""
    return 0 < n <= MAX_ORDER[op].get(np.dtype(dtype), 0)


def tile(size, dtype):
    """``(TS, M)`` of the ``potrf`` kernel of order class ``size`` in ``dtype``: the side of a
    thread's register tile and the resident blocks per multiprocessor asked of the compiler
    (``TILE``; ``M`` 1 where it names the side alone)."""
    got = TILE[(size, np.dtype(dtype).char)]
    return (got, 1) if isinstance(got, int) else tuple(got)


def _block(op, size, k=1, dtype=None):
    """Threads of a block: ``G * G`` for ``potrf`` (a tile each), ``32 * W`` for ``trsm`` (a
    warp takes ``32 / min(size, 32)`` right-hand sides at a time; at least one warp per 1024
    entries of the matrix, for the load; at most 8)."""
    if op == "potrf":
        return ((size // tile(size, dtype)[0]) ** 2,)
    per_warp = 32 // min(size, 32)
    return (32 * max(1, min(8, max(-(-k // per_warp), size * size // 1024))),)


def _kernel(name, dtype, size):
    t, r = _TYPES[np.dtype(dtype)]
    if name == "gl_small_potrf":
        ts, minb = tile(size, dtype)
        source, extra = _POTRF_SOURCE, (f"-DTS={ts}", f"-DMINB={minb}")
    else:
        source, extra = _TRSM_SOURCE, ("-DTS=1",)
    return raw_kernel(name, source, {"T": t, "R": r},
                      options=("--std=c++17", f"-DNB={size}", *extra))


def strides_of(x):
    item = x.itemsize
    return tuple(np.int64(s // item) for s in x.strides)


def launch_args(name, x, n, size_of, *views):
    """``(kernel, grid, block, strides)`` of a launch of ``name`` (``"gl_small_potrf"`` or
    ``"gl_small_trsm"``) in the dtype of ``x`` for ``size_of`` matrices of order ``n``
    (``x``: the factor, or the ``(B, n, k)`` solution): the element strides of the
    ``(B, p, q)`` ``views`` flattened (what an engine keeps per layout, so that a repeat
    launches with its arrays and these)."""
    op = "potrf" if name == "gl_small_potrf" else "trsm"
    size = size_class(n, SIZES[op], op)
    kern = _kernel(name, x.dtype, size)
    strides = tuple(s for v in views for s in strides_of(v))
    return kern, (size_of,), _block(op, size, x.shape[-1], x.dtype), strides


def potrf(a3, w, summ, lower, clean, nonfinite):
    """Factor every matrix of ``a3`` (``(B, n, n)``, any strides) into ``w`` (same shape, any
    strides, not overlapping ``a3``, or ``a3`` itself): the ``lower`` factor, or the upper one
    (``a = U^H U``) in the upper triangle; the other triangle zero (``clean``) or ``a3``'s.
    ``summ``: the buffer of :func:`summary` ``("potrf")``. One launch, no synchronization."""
    nb, n = a3.shape[0], a3.shape[-1]
    kern, grid, block, st = launch_args("gl_small_potrf", w, n, nb, a3, w)
    kern(grid, block, (a3, w, summ, np.int32(n), np.int64(nb), *st, np.int32(bool(lower)),
                       np.int32(bool(clean)), np.int32(nonfinite)))


def checks(summarize, finite):
    """The ``checks`` argument of ``gl_small_trsm``: bit 0 ``summarize`` (fold the flags and
    the bound into the summary), bit 1 ``finite`` (read and flag the whole of ``a``, SciPy's
    ``check_finite``; else its triangle only)."""
    return _CHECKS[(1 if summarize else 0) | (2 if finite else 0)]


#: The four ``checks`` arguments, made once (a NumPy scalar costs a microsecond per call).
_CHECKS = tuple(np.int32(v) for v in range(4))


def trsm(a3, b3, x, summ, tr, cj, mode, unit, squared, summarize, finite=False):
    """Solve every matrix of a stack (see the kernel's comment): ``a3`` (B, n, n), ``b3`` and
    ``x`` (B, n, k), any strides (``b3`` may broadcast: stride 0); ``summ``: the buffer of
    :func:`summary` ``("trsm")``, written when ``summarize``; ``finite``: flag NaN or Inf
    anywhere in ``a3`` (else in its triangle only). One launch, no synchronization."""
    nb, n, k = x.shape
    kern, grid, block, st = launch_args("gl_small_trsm", x, n, nb, a3, b3, x)
    kern(grid, block, (a3, b3, x, summ, np.int32(n), np.int32(k), *st, np.int32(bool(tr)),
                       np.int32(bool(cj)), np.int32(mode), np.int32(bool(unit)),
                       np.int32(bool(squared)), checks(summarize, finite)))


def summary(cupy, kind, device, stream=None):
    """``(buffer, totals)``: the calling thread's summary buffer of ``kind`` (``"potrf"`` or
    ``"trsm"``) on ``device`` for the stream ``stream`` (a pointer; default: the current one)
    and the read-back of its 3 words (:func:`._scalars_cuda.summary_buffer`)."""
    return summary_buffer(cupy, kind, device, *_IDENTITY[kind], stream)


def flag_before(a, summ):
    """SciPy's ``check_finite`` of all of ``a`` into the summary ``summ`` before a launch of a
    kernel that reads one triangle only (the streamed ones): the flat finiteness kernel sets
    the accumulating flags word to 1 (a solve's ``A_BAD``, a factorization's NaN/Inf flag)
    when ``a`` holds NaN or Inf. The launch before left that word 0; the kernel's blocks OR
    their flags in after."""
    flag_nonfinite(a, summ[0:1])


def as_float(word):
    """The float64 whose bits are the uint64 ``word`` (the bound of a ``trsm`` summary)."""
    return float(np.array([word], dtype=np.uint64).view(np.float64)[0])
