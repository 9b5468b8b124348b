"""Blocked Cholesky of a Dask Hermitian positive-definite matrix, its solves and log-determinant,
as a graph of tile tasks on the workers.

Right-looking (``T`` tiles a side): for each step ``k`` a POTRF of the diagonal tile, TRSMs
of the tiles below it, and SYRK/GEMM updates ``A_ij -= L_ik L_jk^H`` of the trailing lower
triangle. A task works on a block of ``g`` consecutive tiles of one column (:func:`row_group`):
on one worker a block is the whole column below the diagonal (one TRSM per step, one update
per column: the fewest, largest kernel calls); on several workers a block is one tile, so a
step's updates spread over the workers and the chain from one diagonal tile to the next is one
tile's TRSM and update, not a column's (``benchmarks/studies/dask_cholesky_sim.py`` simulates
both on ``W`` workers). Each task runs the chunks' own kernels (decomp's GPU engines on CuPy
tiles, LAPACK on NumPy ones).

The matrix must be tiled the same way along both axes (``a.chunks[0] == a.chunks[1]``); only
the triangle named by ``lower`` is read, as LAPACK's ``potrf``.
"""

from __future__ import annotations

from operator import getitem
from typing import Any

import numpy as np

from .._tiles import _tiles_xp
from .._tiles._graph_dask import meta_of, new_array, tiles_for, tokenize, work_dtype

__all__ = ["cholesky", "cholesky_jitter", "cho_factor", "cho_solve", "solve_lower",
           "logdet_cholesky"]


def _check_tiles(a, what="a"):
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{what} must be a square 2-D Dask array, got shape {a.shape}")
    if any(np.isnan(c) for cs in a.chunks for c in cs):
        raise ValueError("chunk sizes must be known (call compute_chunk_sizes() first)")
    if a.chunks[0] != a.chunks[1]:
        raise ValueError(f"{what} must be tiled alike along both axes (square diagonal tiles); "
                         f"got chunks {a.chunks}: rechunk with {what}.rechunk((t, t))")


def _tile_potrf(tiles):
    """The diagonal tile's Cholesky task on the backend of the shared ``tiles`` kernels."""
    if tiles.__name__.endswith("_cuda"):
        from ._cholesky_cuda import tile_potrf
    else:
        from ._cholesky_host import tile_potrf
    return tile_potrf


def _factor_input(a):
    """``(a, dtype, tiles)``: ``a`` checked and in the working dtype, and its tiles."""
    _check_tiles(a)
    dtype = work_dtype(a)
    return (a if a.dtype == dtype else a.astype(dtype)), dtype, tiles_for(a)


def cholesky(a: Any, lower: bool = True) -> Any:
    """Cholesky factor of the Hermitian positive-definite Dask array ``a`` (n, n), lazy.

    ``lower=True``: ``L`` with ``a = L L^H``; ``False``: ``U = L^H`` with ``a = U^H U``; the
    other triangle's tiles are zeros. Tiled as ``a``; chunks of ``a``'s package and dtype
    (integers: float64). A matrix that is not positive definite raises
    :class:`gpulinalg.NotPositiveDefiniteError` (the leading minor of the whole matrix) when
    the result is computed.
    """
    a, dtype, tiles = _factor_input(a)
    name = f"gpulinalg-cholesky-{tokenize(a, bool(lower))}"
    dsk, lkey = _factor_graph(a, tiles, bool(lower), name)
    out = f"{name}-{'l' if lower else 'u'}"
    sizes = a.chunks[0]
    like = meta_of(a, 1, dtype)
    for i in range(len(sizes)):
        for j in range(len(sizes)):
            if i == j:
                dsk[(out, i, j)] = lkey(i, i) if lower else (_tiles_xp.hermitian, lkey(i, i))
            elif (i > j) == lower:
                dsk[(out, i, j)] = lkey(i, j) if lower else (_tiles_xp.hermitian, lkey(j, i))
            else:
                dsk[(out, i, j)] = (_tiles_xp.zeros, like, (sizes[i], sizes[j]))
    return new_array(out, dsk, [a], a.shape, a.chunks, meta_of(a, 2, dtype))


def cholesky_jitter(a: Any, start: float, tries: int) -> tuple[Any, Any]:
    """``(L, jitter)``: lazy lower Cholesky factor of ``a + D`` and the largest entry of ``D``
    (a lazy 0-d float64 array, NumPy chunk).

    ``D`` is diagonal and constant on the rows of each diagonal tile: ``j_k = 0`` where the
    POTRF of tile ``k`` (after the updates of the steps before it) succeeds, else the first of
    ``start * s * 10**i`` (``i < tries``, ``s = mean|diag(a)|``) that makes it succeed; the
    retries happen inside that one task, so nothing already computed is computed again and
    nothing is computed before the result is. Shifting a diagonal tile shifts the Schur
    complement of the steps after it by the same amount, so ``L L^H = a + D`` exactly. Every
    try failing raises :class:`gpulinalg.NotPositiveDefiniteError` when computed.
    """
    a, dtype, tiles = _factor_input(a)
    name = f"gpulinalg-cholesky-jitter-{tokenize(a, float(start), int(tries))}"
    t = a.numblocks[0]
    dsk, lkey = _factor_graph(a, tiles, True, name, jitter=(float(start), int(tries)))
    out = f"{name}-l"
    sizes = a.chunks[0]
    like = meta_of(a, 1, dtype)
    for i in range(t):
        for j in range(t):
            dsk[(out, i, j)] = lkey(i, j) if i >= j else \
                (_tiles_xp.zeros, like, (sizes[i], sizes[j]))
    L = new_array(out, dsk, [a], a.shape, a.chunks, meta_of(a, 2, dtype))
    jname = f"{name}-jitter"
    jdsk = {(jname,): (_tiles_xp.largest, *[(f"{name}-P", k) for k in range(t)])}
    jit = new_array(jname, {**dsk, **jdsk}, [a], (), (), np.empty((), np.float64))
    return L, jit


def row_group(t, workers=None):
    """Tiles per block of a column (:mod:`this module <._cholesky_dask>`): ``t`` (whole
    columns) for one worker, 1 (single tiles) for more. ``workers``: the threads of the active
    ``distributed`` client; without one, 1 (the local schedulers run a task's kernels on every
    core, or on the one GPU, already)."""
    if workers is None:
        from ...distributed import cluster_info
        info = cluster_info()
        workers = info["threads"] if info else 1
    return max(1, t) if int(workers) <= 1 else 1


def _factor_graph(a, tiles, lower, name, jitter=None, group=None):
    """The tasks of the factorization; ``lkey(i, j)`` (``i >= j``) is the task (or key) of
    tile ``L_ij``. Key ``(name-P, k)`` holds ``(block, L_kk, jitter_k)`` after step ``k`` (the
    block of column ``k`` that starts at its diagonal tile); with ``jitter = (start, tries)``
    each POTRF retries with growing jitter. ``group``: tiles per block (:func:`row_group`)."""
    sizes = a.chunks[0]
    t = len(sizes)
    g = row_group(t) if group is None else max(1, int(group))
    offsets = [int(v) for v in np.concatenate([[0], np.cumsum(sizes)])]

    def rows(r, j):  # the tile rows of block r of column j (j <= its last row)
        return range(max(j, r * g), min(t, (r + 1) * g))

    def source(i, j):  # tile (i, j) of the lower triangle of a, read from the named triangle
        return (a.name, i, j) if lower else (_tiles_xp.hermitian, (a.name, j, i))

    def block(k, r, j):  # block r of column j after the updates of steps < k
        if k == 0:
            return (_tiles_xp.stack_panel, [source(i, j) for i in rows(r, j)])
        return (f"{name}-upd", k, r, j)

    def fkey(k):
        return (f"{name}-P", k)

    def factored(r, k):  # block r of column k, factored: (task or key, its first row)
        top = rows(r, k)[0]
        if r == k // g:
            return (getitem, fkey(k), 0), top
        return (f"{name}-T", r, k), top

    def lkey(i, j):
        if i == j:
            return (getitem, fkey(j), 1)
        src, top = factored(i // g, j)
        return (_tiles_xp.rows_of, src, offsets[i] - offsets[top], offsets[i + 1] - offsets[top])

    dsk = {}
    retry = ()
    if jitter is not None:
        dsk[(f"{name}-scale",)] = (_tiles_xp.diag_scale, *[(a.name, k, k) for k in range(t)])
        retry = ((f"{name}-scale",), *jitter)
    last = (t - 1) // g if t else -1
    for k in range(t):
        dsk[fkey(k)] = (_tiles_xp.factor_panel, _tile_potrf(tiles), tiles.trsm_right,
                        block(k, k // g, k), offsets[k], *retry)
        for r in range(k // g + 1, last + 1):
            dsk[(f"{name}-T", r, k)] = (_tiles_xp.solve_block, tiles.trsm_right,
                                        block(k, r, k), fkey(k))
        for j in range(k + 1, t):
            b_src, b_top = factored(j // g, k)
            for r in range(j // g, last + 1):
                a_src, a_top = factored(r, k)
                dsk[(f"{name}-upd", k + 1, r, j)] = (
                    _tiles_xp.update_block, tiles.gemm_sub, tiles.herk_sub, block(k, r, j),
                    a_src, offsets[rows(r, j)[0]] - offsets[a_top], b_src,
                    offsets[j] - offsets[b_top], r == j // g)
    return dsk, lkey


def cho_factor(a: Any, lower: bool = True) -> tuple[Any, bool]:
    """``(cholesky(a, lower), lower)``: the pair :func:`cho_solve` and
    :func:`logdet_cholesky` take (the other triangle holds zeros)."""
    return cholesky(a, lower), bool(lower)


def _pair(c_and_lower):
    if not isinstance(c_and_lower, (tuple, list)) or len(c_and_lower) != 2:
        raise TypeError("c_and_lower must be the pair (c, lower) returned by cho_factor, "
                        f"got {type(c_and_lower).__name__}")
    c, lower = c_and_lower
    _check_tiles(c, "c")
    return c, bool(lower)


def _ltile(c, lower):
    """``L_ij`` (``i >= j``) as a key or task on the factor ``c``."""
    def tile(i, j):
        return (c.name, i, j) if lower else (_tiles_xp.hermitian, (c.name, j, i))
    return tile


def cho_solve(c_and_lower: tuple[Any, bool], b: Any) -> Any:
    """Solve ``a x = b`` from the factor pair of :func:`cho_factor`; ``b`` (n,) or (n, r), a
    Dask array (its rows are re-chunked as ``c``'s tiles, its columns kept). Lazy: a blocked
    forward then backward substitution, one task per (tile row, column block)."""
    c, lower = _pair(c_and_lower)
    if b.ndim not in (1, 2) or b.shape[0] != c.shape[0]:
        raise ValueError(f"b must be (n,) or (n, r) with n = {c.shape[0]}, got {b.shape}")
    vec = b.ndim == 1
    dtype = np.result_type(c.dtype, work_dtype(b))
    b2 = (b[:, None] if vec else b).astype(dtype).rechunk({0: c.chunks[0]})
    c = c.astype(dtype) if c.dtype != dtype else c
    tiles = tiles_for(c)
    name = f"gpulinalg-cho-solve-{tokenize(c, lower, b2)}"
    tile = _ltile(c, lower)
    t = c.numblocks[0]
    dsk = {}
    for cb in range(b2.numblocks[1]):
        for i in range(t):  # forward: L y = b
            dsk[(f"{name}-y", i, cb)] = (
                _tiles_xp.solve_step, tiles.trsm, 0, tile(i, i), (b2.name, i, cb),
                [tile(i, j) for j in range(i)], [(f"{name}-y", j, cb) for j in range(i)])
        for i in range(t - 1, -1, -1):  # backward: L^H x = y
            dsk[(name, i, cb)] = (
                _tiles_xp.solve_step, tiles.trsm, 2, tile(i, i), (f"{name}-y", i, cb),
                [tile(j, i) for j in range(i + 1, t)], [(name, j, cb) for j in range(i + 1, t)])
    x = new_array(name, dsk, [c, b2], b2.shape, b2.chunks, meta_of(c, 2, dtype))
    return x[:, 0] if vec else x


def solve_lower(c_and_lower: tuple[Any, bool], b: Any) -> Any:
    """``L^-1 b`` (forward substitution only) from the factor pair of :func:`cho_factor`;
    ``b`` a 2-D Dask array, its rows re-chunked as ``c``'s tiles. Lazy; what a GP's predictive
    variance needs (``v = L^-1 k(X, x*)``)."""
    c, lower = _pair(c_and_lower)
    if b.ndim != 2 or b.shape[0] != c.shape[0]:
        raise ValueError(f"b must be (n, r) with n = {c.shape[0]}, got {b.shape}")
    dtype = np.result_type(c.dtype, work_dtype(b))
    b2 = b.astype(dtype).rechunk({0: c.chunks[0]})
    c = c.astype(dtype) if c.dtype != dtype else c
    tiles = tiles_for(c)
    name = f"gpulinalg-solve-lower-{tokenize(c, lower, b2)}"
    tile = _ltile(c, lower)
    dsk = {}
    for cb in range(b2.numblocks[1]):
        for i in range(c.numblocks[0]):
            dsk[(name, i, cb)] = (
                _tiles_xp.solve_step, tiles.trsm, 0, tile(i, i), (b2.name, i, cb),
                [tile(i, j) for j in range(i)], [(name, j, cb) for j in range(i)])
    return new_array(name, dsk, [c, b2], b2.shape, b2.chunks, meta_of(c, 2, dtype))


def logdet_cholesky(c_and_lower: tuple[Any, bool]) -> Any:
    """``log det a = 2 sum(log diag(c))`` from the factor pair of :func:`cho_factor`: a lazy
    0-d Dask array in the real dtype of ``c``."""
    c, _ = _pair(c_and_lower)
    real = np.empty(0, c.dtype).real.dtype
    name = f"gpulinalg-logdet-{tokenize(c)}"
    t = c.numblocks[0]
    dsk: dict = {(f"{name}-d", k): (_tiles_xp.logdiag, (c.name, k, k)) for k in range(t)}
    dsk[(name,)] = (_tiles_xp.total, *[(f"{name}-d", k) for k in range(t)]) if t else \
        (_tiles_xp.zeros, meta_of(c, 0, real), ())
    return new_array(name, dsk, [c], (), (), meta_of(c, 0, real))
