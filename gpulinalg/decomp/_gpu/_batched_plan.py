"""How a stack of matrices is factored or solved on the GPU: the one table of batched routes.

Pure Python (no GPU package): the GPU engines (:mod:`._cholesky_cuda`, :mod:`._triangular_cuda`,
:mod:`._qr_cuda`, :mod:`._svd_cuda`) ask :func:`route` which of their code paths serves a stack
of ``batch`` matrices of order ``n``:

``"fused"``
    (``potrf``, ``trsm``; ``geqrf``: :mod:`._fused_qr_cuda`, Q and R up to 64 x 64, and
    ``gesvd``: :mod:`._fused_svd_cuda`, Jacobi up to 64 x 64) one launch of a fused
    kernel of :mod:`._fused_cuda` for the whole stack: one thread block per matrix holds it
    in shared memory and does the whole call on it (the
    copy, the finiteness check, the factorization or the solves, the conditioning rule),
    so a call makes one launch and one read-back of a 3-word summary. Only where the
    kernel exists (:func:`._fused_cuda.fits`: ``potrf`` up to order 128, 64 for complex128,
    the matrix in registers; the solves up to 64, 32 for complex128) and, for solves, for at
    most :data:`FUSED_RHS` right-hand sides: elsewhere the next row of the table applies;
``"batched"``
    one call of the batched library routine for the whole stack (cuSOLVER ``potrfBatched``,
    cuBLAS ``trsmBatched`` and ``geqrfBatched``, cuSOLVER ``gesvdjBatched``);
``"looped"``
    one call of the 64-bit ``X*`` routine per matrix on one stream, with one workspace query
    and one workspace for the whole loop (each call fills the GPU by itself at large orders);
``"wide"``
    (``trsm`` only, a single matrix) one launch of :mod:`._wide_trsm_cuda`'s kernel: a
    thread block per panel of rows, the substitution chained through flags;
``"jacobi"``
    (``gesvd`` only) one Jacobi SVD (``gesvdj``) per matrix: accurate to working precision,
    so no a-posteriori check (that check costs one synchronization per matrix).

Where the limits come from: small stacks are host bound (the batched routines' chain of
launches), which the kernels' one launch removes; past the kernels' orders the library routines
win. The rows are where each route won on the H200 or the H100 (the result files named at
each row);
``benchmarks/suites/decomp_batched.py --routes`` times both sides of every limit, so the table
can be re-derived on other GPUs: change it only from those figures. Rows naming a hand-written
kernel apply only where the caller found the kernels on
(:mod:`gpulinalg.decomp._kernels._policy_cuda`).

Examples
--------
>>> route("potrf", 512, 200)
'batched'
>>> route("potrf", 4096, 8)
'looped'
>>> route("potrf", 512, 1)
'looped'
>>> route("gesvd", 16, 100), route("gesvd", 128, 100), route("gesvd", 4096, 2)
('fused', 'jacobi', 'looped')
>>> route("gesvd", 16, 100, fused=False)
'batched'
>>> route("potrf", 64, 4096, dtype="float64"), route("potrf", 128, 512, dtype="float32")
('fused', 'fused')
>>> route("potrf", 128, 264, dtype="float64"), route("potrf", 128, 265, dtype="float64")
('fused', 'batched')
>>> route("potrf", 256, 64), route("potrf", 1024, 16), route("potrf", 1024, 8)
('batched', 'batched', 'looped')
>>> route("potrf", 512, 2), route("potrf", 768, 2), route("potrf", 768, 12)
('batched', 'looped', 'batched')
>>> route("potrf", 8, 4096, fused=False), route("trsm", 8, 64, rhs=500)
('batched', 'batched')
>>> route("trsm", 4096, 1, wide=True), route("trsm", 4096, 1), route("trsm", 32768, 1, wide=True)
('wide', 'looped', 'looped')
"""

import math

__all__ = ["TABLE", "LANES", "FUSED_RHS", "TALL_QR", "route", "lanes", "tall_qr"]

#: ``op -> ((max_order, min_batch, route[, dtypes]), ...)``: the first row with
#: ``n <= max_order`` and ``batch >= min_batch`` (and, where a row names ``dtypes``, whose
#: dtype is one of them) gives the route; a single matrix (``batch == 1``) is always
#: ``"looped"`` (one call of the per-matrix routine).
TABLE: dict[str, tuple[tuple, ...]] = {
    # fused to 64, and to 128 below the stacks where potrfBatched overtook it (the kernel's
    # time grows by a wave per 132 matrices: float64 from its third wave, float32 from its
    # fifth), batched, then per-matrix Xpotrf on lanes; measured:
    # benchmarks/results/h200-decomp-batched-2026-12-02h.json, -02i.json and -02j.json;
    # orders 513-768 loop below 12 matrices (the crossover of stacks of 2 and 16 768^2, read
    # linearly): benchmarks/results/h100-decomp-batched-routes-2026-12-06.json
    "potrf": ((64, 2, "fused"), (128, 265, "batched", ("float64",)),
              (128, 529, "batched", ("float32",)),
              (128, 2, "fused", ("float32", "float64", "complex64")),
              (512, 2, "batched"), (768, 12, "batched"), (1024, 16, "batched"),
              (math.inf, 1, "looped")),
    # fused to 64, streamed to 2048 (it lost at 16 x 4096^2), trsmBatched; a single matrix:
    # the wide kernel to 16384 (the largest timed); measured:
    # benchmarks/results/h200-decomp-batched-2026-12-01.json and -2026-12-02f.json
    "trsm": ((64, 2, "fused"), (2048, 2, "stream"), (2048, 2, "batched"),
             (math.inf, 9, "batched"), (16384, 1, "wide"), (math.inf, 1, "looped")),
    # fused to 64; geqrfBatched for small matrices in numbers (torch's rule: m <= 128, batch
    # >= max(2, m / 16)); Xgeqrf per matrix on lanes otherwise; measured:
    # benchmarks/results/h200-decomp-batched-2026-12-01.json
    "geqrf": ((64, 2, "fused"), (32, 2, "batched"), (64, 4, "batched"), (128, 8, "batched"),
              (math.inf, 1, "looped")),
    # fused to 64 (driver="auto"); gesvdjBatched takes up to 32 x 32; per-matrix Jacobi up to
    # 128 (it lost from 192 on); the driver table of ._svd_drivers above; measured:
    # benchmarks/results/h200-decomp-batched-2026-12-02g.json
    "gesvd": ((64, 2, "fused"), (32, 2, "batched"),
              (128, 2, "jacobi"), (math.inf, 1, "looped")),
    # LU (square stacks; rectangular ones loop): cuBLAS getrfBatched/getrsBatched below order
    # 512, per-matrix Xgetrf/Xgetrs on lanes above (torch's rule, not yet timed here:
    # benchmarks/suites/decomp_solve.py times the 10000 x 32^2 stack)
    "getrf": ((511, 2, "batched"), (math.inf, 1, "looped")),
}


#: Per-matrix loops with no batched routine behind them run on this many streams at once
#: (``op -> ((max_order, streams), ...)``; :mod:`._batched_cuda`): medium and large matrices
#: leave the GPU idle between the small kernels of one call; measured:
#: benchmarks/results/h200-decomp-batched-2026-12-02.json.
LANES: dict[str, tuple[tuple[float, int], ...]] = {
    "gesvdj": ((1024, 4),),       # the "jacobi" route of gesvd
    "geqrf": ((math.inf, 4),),    # the "looped" route of geqrf
    "orgqr": ((math.inf, 4),),    # Q of every stack
    "potrf": ((math.inf, 4),),    # the "looped" route of potrf
    "getrf": ((math.inf, 4),),    # the "looped" route of getrf (LU)
}


def lanes(op: str, n: int, batch: int) -> int:
    """How many streams the per-matrix loop of ``op`` over ``batch`` matrices of order ``n``
    runs on (1: the caller's stream alone).

    >>> lanes("orgqr", 256, 64), lanes("orgqr", 4096, 2), lanes("gesvdj", 2048, 8)
    (4, 2, 1)
    """
    for max_order, count in LANES.get(op, ()):
        if n <= max_order:
            return max(1, min(int(count), int(batch)))
    return 1


#: Tall QR by Cholesky (:mod:`._cholqr_cuda`, ``mode="economic"`` and ``"r"`` only, real and
#: complex): a single matrix with at least ``min_ratio`` times as many rows as columns and at
#: most ``max_cols`` columns, as ``(min_ratio, max_cols)``; stacks keep Householder QR on
#: lanes (none was timed), and wider than 4096 columns is untimed; measured:
#: benchmarks/results/h200-decomp-tall-qr-2026-12-02.json.
TALL_QR = (2, 4096)


def tall_qr(m: int, n: int, batch: int = 1) -> bool:
    """Whether ``batch`` matrices of ``m x n`` take CholeskyQR2 (:data:`TALL_QR`).

    >>> tall_qr(100000, 500), tall_qr(3000, 2000), tall_qr(10**6, 1), tall_qr(4096, 64, 3)
    (True, False, True, False)
    """
    min_ratio, max_cols = TALL_QR
    return batch == 1 and 0 < n <= max_cols and m >= min_ratio * n


#: The fused triangular solves take at most this many right-hand sides (they solve 16 at a
#: time, one after the other: many more are better served by ``trsmBatched``).
FUSED_RHS = 64


def route(op: str, n: int, batch: int, fused: bool = True, rhs: int = 0,
          dtype: object = None, stream: bool = False, wide: bool = False) -> str:
    """The route of ``op`` for ``batch`` matrices whose larger dimension is ``n`` (see the
    module docstring); ``"looped"`` for a single matrix. ``fused``: whether a fused kernel
    exists for the stack's order and dtype (:func:`._fused_cuda.fits`); ``rhs``: how many
    right-hand sides a solve has; ``dtype``: the computation's dtype (a row naming dtypes
    applies to those only: never when ``dtype`` is not given); ``stream``: whether the
    streamed triangular solve takes the stack (:func:`._stream_trsm_cuda.fits`; rows
    ``"stream"`` apply only then); ``wide``: whether the wide triangular
    solve takes the single matrix (:func:`._wide_trsm_cuda.fits`; rows ``"wide"`` are the
    only ones a single matrix reads)."""
    name_of = None if dtype is None else str(getattr(dtype, "name", dtype))
    for row in TABLE[op]:
        max_order, min_batch, name = row[:3]
        if (name == "wide") != (batch <= 1) or (name == "wide" and not wide):
            continue
        if name == "fused" and (not fused or rhs > FUSED_RHS):
            continue
        if name == "stream" and not stream:
            continue
        if len(row) > 3 and name_of not in row[3]:
            continue
        if n <= max_order and batch >= min_batch:
            return name
    return "looped"
