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

Where the limits come from: on the H200 (issue #16) the small stacks were host bound: the
batched routines' chain of launches (copy, ``potrfBatched``, checks, two ``trsmBatched``,
reductions) took 3-8x torch's time at 4096 x 8^2 to 4096 x 64^2, most of it launches and
their Python; the fused kernels do the call in one launch.
Where the limits come from: torch and CuPy run ``potrfBatched`` for every stack, torch
``trsmBatched`` for all but a few large matrices and cuBLAS ``geqrfBatched`` for small
orders in numbers; on the H200 (issue #16) the per-matrix loop lost 16x to ``potrfBatched``
at 200 x 512^2 fp64 and the two batched triangular solves beat per-matrix ``potrs`` as much.
Past order 768 the blocked per-matrix ``Xpotrf``, on a few streams at once, beats the batched
one (meant for small matrices) on stacks of a few matrices, and past 1024 on any stack.
``benchmarks/decomp_batched.py`` times both sides of every limit (``--routes``) so the table
can be re-derived on other GPUs: change it only from those figures.

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
>>> route("potrf", 256, 64), route("potrf", 1024, 16), route("potrf", 1024, 8)
('batched', 'batched', 'looped')
>>> route("potrf", 256, 64, blocked=True), route("potrf", 1024, 4, blocked=True)
('blocked', 'looped')
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
    # Cholesky factor: the fused kernel (where it exists), cuSOLVER <t>potrfBatched up to
    # 1024, blocked Xpotrf per matrix above. On the H200 (issue #16) the first fused kernel
    # (the matrix in shared memory) took 0.12 ms against potrfBatched's 0.21 at 4096 x 8^2
    # but lost at 4096 x 64^2 in fp32 (0.80 against 0.58 ms); the register-tiled one that
    # replaced it (route rows, 2026-12-01 20:45 UTC) took 0.073/0.093 ms against 0.211/0.219
    # at 1024 x 32^2 (fp32/fp64) and 0.299/0.388 against 0.474/0.608 at 4096 x 64^2; at
    # 512 x 128^2 it won in fp32 (0.329 against 0.353) but lost in fp64 (0.51 against 0.474):
    # order 128 is fused in single precision only (complex64 untimed: as float32).
    # The streamed kernel (._stream_potrf_cuda, route "stream") has no row: on the H200
    # (route rows, 2026-12-02, tree 9f33350, ms, potrfBatched / streamed) it lost at every
    # stack it takes: 64 x 256^2 0.553 / 0.619 (fp32), 0.479 / 0.79 (fp64); 512 x 128^2
    # 0.432 / 0.712 (fp64); 200 x 512^2 1.69 / 3.34 (fp32), 2.29 / 4.47 (fp64): one block per
    # matrix streams its panels from memory at a few per cent of a multiprocessor's peak.
    # The blocked factorization (._blocked_potrf_cuda, route "blocked": per block column of
    # 64, the fused kernel on the diagonal blocks, its panel kernel and gemmStridedBatched)
    # takes every stack it fits from order 65 to 768, and from 8 matrices to 1024: on the
    # H200 (route rows, 2026-12-02, tree 6d43f18, ms, fp32 / fp64, blocked against the table's
    # route before it) 64 x 256^2 0.314 / 0.333 against potrfBatched's 0.361 / 0.382;
    # 8 x 512^2 0.492 / 0.527 against 0.640 / 0.677; 200 x 512^2 1.28 / 1.72 against
    # 1.48 / 2.02; 16 x 768^2 0.736 / 0.870 against 1.15 / 1.28; 16 x 1024^2 1.20 / 1.41
    # against 1.80 / 2.09; 8 x 1024^2 0.928 / 1.09 against the looped Xpotrf's 1.07 / 1.34;
    # 512 x 128^2 fp64 0.318 against 0.336 (64 x 128^2 0.213 against 0.212). With
    # trsmBatched for the panels (the first version) it lost at every one of these stacks.
    # Order 128 in float32 from 384 matrices (below, the fused kernel: 0.107 against 0.211 at
    # 64 x 128^2): on the H200 (route rows, 2026-12-02, trees bfd59e8, 7b3d2f7, 751badb, ms,
    # blocked against fused) 512 x 128^2 0.275 / 0.314, 0.205 / 0.265, 0.215 / 0.27;
    # 384 x 128^2 0.202 / 0.251; 1024 x 128^2 0.316 / 0.495; but 256 x 128^2 0.234 / 0.186,
    # 0.161 / 0.171 and 160 x 128^2 0.162-0.203 / 0.134-0.157 (complex64 untimed: fused).
    # Not taken: complex128 (the panel kernel's L11
    # would not fit its shared memory). Fewer than 8 matrices past 768: untimed, looped.
    # Orders 65-128 in float64: the fused kernel (its order-128 build; one wave of 132
    # blocks took 0.117-0.147 ms at 64 x 128^2 against 0.212-0.244 for potrfBatched or the
    # blocked route) up to 132 matrices, the blocked one from 133, where the fused kernel
    # needs a second wave: on the H200 (route rows, 2026-12-02, tree 7b3d2f7, ms, blocked
    # against fused) 132 x 128^2 0.204 / 0.161, 160 x 128^2 0.233 / 0.236, 256 x 128^2
    # 0.194 / 0.249, 512 x 128^2 0.28-0.34 / 0.432 (potrfBatched 0.332).
    # Per-matrix Xpotrf on 4 stream lanes (LANES) against potrfBatched (2026-12-02, fp64,
    # ms): 8 x 1024^2 1.34 / 1.96 (torch 1.95), 8 x 2048^2 4.55 / 6.49 (torch 6.83), but
    # 16 x 1024^2 2.28 / 2.10, 32 x 1024^2 4.33 / 2.74 and 16 x 768^2 1.63 / 1.51.
    "potrf": ((64, 2, "fused"), (128, 384, "blocked", ("float32",)),
              (128, 2, "fused", ("float32", "complex64")),
              (128, 133, "blocked"), (128, 2, "fused", ("float64",)),
              (768, 2, "blocked"), (1024, 8, "blocked"),
              (768, 2, "batched"), (1024, 16, "batched"), (math.inf, 1, "looped")),
    # Triangular solves (solve_triangular, and cho_solve's two substitutions): the fused
    # kernel up to order 64 (at most FUSED_RHS right-hand sides); the streamed one
    # (._stream_trsm_cuda, at most 16 right-hand sides) up to 2048; else cuBLAS
    # <t>trsmBatched, except for a few (<= 8) matrices of order above 2048, where per-matrix
    # cuBLAS trsm / cuSOLVER Xpotrs fill the GPU. (torch loops from order 64 on; on the H200
    # trsmBatched beat the loop 1.6x at 8 x 1024^2 and 1.8x at 8 x 2048^2, issue #16.)
    # The streamed kernel against trsmBatched on the H200 (2026-12-01, tree e7da6c3, cho_solve
    # fp64 with checks, 4 right-hand sides, ms): 200 x 512^2 0.81 / 1.52, 2 x 1024^2
    # 0.58 / 1.38, 2 x 2048^2 2.27 / 3.31, 16 x 2048^2 2.74 / 3.93, but 16 x 4096^2
    # 9.42 / 8.43 (a block per matrix and column group: too few blocks for its serial panels).
    # A single matrix: the wide kernel (._wide_trsm_cuda, a block per panel of 64 rows, at
    # most 16 right-hand sides) up to order 16384, the largest timed; cuBLAS trsm above. On
    # the H200 (route rows, 2026-12-02, tree d3efbf3, cho_solve with 4 right-hand sides,
    # fp32 / fp64, ms) wide against cuBLAS trsm: 1 x 512^2 0.137 / 0.537, 0.152 / 0.697;
    # 1 x 4096^2 0.441 / 1.65, 0.549 / 2.23; 1 x 16384^2 1.66 / 7.03, 2.13 / 8.71.
    "trsm": ((64, 2, "fused"), (2048, 2, "stream"), (2048, 2, "batched"),
             (math.inf, 9, "batched"), (16384, 1, "wide"), (math.inf, 1, "looped")),
    # Householder QR: cuBLAS <t>geqrfBatched for small matrices in numbers (torch's rule:
    # m <= 128 and batch >= max(2, m / 16)); Xgeqrf per matrix otherwise, on stream lanes
    # (at 64 x 256^2 the lanes took half the time of geqrfBatched on the H200, issue #16).
    # The fused row (._fused_qr_cuda: Q and R in one launch, where the library route makes a
    # geqrfBatched call and one orgqr call per matrix): on the H200 (route rows, 2026-12-01
    # 20:45 UTC) 0.34/0.39 ms against 218/236 at 4096 x 16^2 (fp32/fp64) and 0.72/0.85
    # against 80/86 at 1024 x 64^2.
    "geqrf": ((64, 2, "fused"), (32, 2, "batched"), (64, 4, "batched"), (128, 8, "batched"),
              (math.inf, 1, "looped")),
    # SVD: gesvdjBatched takes matrices up to 32 x 32; up to 128, per-matrix Jacobi without
    # the a-posteriori check of gesvdp; above, the driver table of ._svd_drivers per matrix.
    # The fused row (._fused_svd_cuda: one-sided Jacobi, values and vectors in one launch
    # and one read-back, driver="auto" only): on the H200 (route rows) at 4096 x 16^2
    # 0.46/0.94 ms against gesvdjBatched's 2.88/6.65 (fp32/fp64, 21:08 UTC), at 512 x 32^2
    # 0.57/1.21 against 0.97/1.65 (21:08; the single-precision path: float32 columns and
    # rotations, float64 Gram entries; at 20:45, float64 throughout, fp32 took 1.14).
    # Up to order 64 (real and complex64; complex128 to 32) the fused kernel's row class 64
    # (four rows a lane, 512 threads, W and V past 48 KiB): on the H200 (route rows,
    # 2026-12-02, tree 269b5c7, fp32 / fp64, ms) 0.93 / 1.40 against gesvdj's 69.8 / 93.3 at
    # 64 x 64^2, 2.37 / 5.02 against 566 / 778 at 512 x 64^2.
    # Per-matrix Jacobi (gesvdj, no a-posteriori check) up to order 128, the driver table
    # above (same runs, jacobi against looped): 8 x 128^2 20.5 / 36.8, 30.9 / 47.4; 64 x 128^2
    # 166 / 374, 244 / 382; but 32 x 192^2 151 / 128, 218 / 141; 16 x 256^2 109 / 82.1,
    # 160 / 93.2; 4 x 512^2 73.8 / 61.7, 116 / 53.
    "gesvd": ((64, 2, "fused"), (32, 2, "batched"),
              (128, 2, "jacobi"), (math.inf, 1, "looped")),
}


#: Per-matrix loops with no batched routine behind them run on this many streams at once
#: (``op -> ((max_order, streams), ...)``; :mod:`._batched_cuda`): medium matrices leave the
#: GPU idle between the small kernels of one call, and so do large ones in their panel
#: factorizations (``geqr2`` on a few multiprocessors took half of ``Xgeqrf``'s time at
#: 2048^2). On the H200 (issue #16, 2026-12-02, ms, one lane / two / four): ``qr`` 2 x 2048^2
#: fp64 23.3 / 14.8 / 14.7 (torch 22.6), 4 x 2048^2 45.7 / 26.1 / 18.1 (torch 45.2),
#: 2 x 4096^2 59.7 / 37.6 / 37.4 (torch 59.7). ``Xpotrf`` per matrix on one stream grew with
#: the stack (2, 4, 8, 16 x 2048^2 fp64: 1.86, 3.66, 7.05, 14.1 ms).
LANES: dict[str, tuple[tuple[float, int], ...]] = {
    "gesvdj": ((1024, 4),),       # the "jacobi" route of gesvd
    "geqrf": ((math.inf, 4),),    # the "looped" route of geqrf
    "orgqr": ((math.inf, 4),),    # Q of every stack
    "potrf": ((math.inf, 4),),    # the "looped" route of potrf
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
#: most ``max_cols`` columns, as ``(min_ratio, max_cols)``. Stacks keep Householder QR on
#: stream lanes (:data:`LANES`): CholeskyQR2 runs its matrices one after the other, and no
#: stack was timed. On the H200 (benchmarks.decomp_tall_qr,
#: 2026-12-02, ms, CholeskyQR2 / Householder QR (Xgeqrf + orgqr, as torch and CuPy), fp32
#: and fp64) it won at every timed shape from 2 rows a column: 1000000 x 16 2.36 / 18.8 and
#: 2.30 / 22.0; 100000 x 64 1.56 / 3.47 and 2.08 / 3.71; 100000 x 500 8.77 / 22.0 and
#: 9.60 / 22.5; 20000 x 2000 17.3 / 48.8 and 17.5 / 52.3; 16384 x 4096 50.0 / 102 and
#: 48.2 / 108; 8192 x 4096 35.4 / 46.7 and 35.4 / 49.3; 2000 x 200 1.26 / 1.51 and
#: 1.23 / 1.57; but square, 4096 x 4096, 55.2 / 29.9 in float32 (the check rejected it: a
#: random square matrix is too ill-conditioned for single precision) and 29.6 / 30.9.
#: Wider than 4096 columns: untimed.
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
          dtype: object = None, stream: bool = False, wide: bool = False,
          blocked: bool = False) -> str:
    """The route of ``op`` for ``batch`` matrices whose larger dimension is ``n`` (see the
    module docstring); ``"looped"`` for a single matrix. ``fused``: whether a fused kernel
    exists for the stack's order and dtype (:func:`._fused_cuda.fits`); ``rhs``: how many
    right-hand sides a solve has; ``dtype``: the computation's dtype (a row naming dtypes
    applies to those only: never when ``dtype`` is not given); ``stream``: whether the
    streamed triangular solve takes the stack (:func:`._stream_trsm_cuda.fits`; rows
    ``"stream"`` apply only then: :func:`._stream_trsm_cuda.fits` for ``trsm``,
    :func:`._stream_potrf_cuda.fits` for ``potrf``); ``wide``: whether the wide triangular
    solve takes the single matrix (:func:`._wide_trsm_cuda.fits`; rows ``"wide"`` are the
    only ones a single matrix reads); ``blocked``: whether the blocked Cholesky takes the
    stack (:func:`._blocked_potrf_cuda.fits`; rows ``"blocked"`` apply only then)."""
    name_of = None if dtype is None else str(getattr(dtype, "name", dtype))
    for row in TABLE[op]:
        max_order, min_batch, name = row[:3]
        if (name == "wide") != (batch <= 1) or (name == "wide" and not wide):
            continue
        if name == "fused" and (not fused or rhs > FUSED_RHS):
            continue
        if (name == "stream" and not stream) or (name == "blocked" and not blocked):
            continue
        if len(row) > 3 and name_of not in row[3]:
            continue
        if n <= max_order and batch >= min_batch:
            return name
    return "looped"
