"""QR and SVD of a tall-and-skinny Dask array (one column of blocks): TSQR on the workers.

Direct TSQR (Benson, Gleich & Demmel 2013) as a reduction tree: a QR of every row block (the
chunks' own kernel: decomp's GPU engine for CuPy chunks, LAPACK for NumPy ones), then QRs of
the stacked ``R`` factors, ``split_every`` at a time, up to one root; the root's ``R`` is the
result's (or, for the SVD, the SVD of the root's ``R``); each node's share of ``Q`` is passed
back down as a small matrix, and every block's ``Q`` is its own block ``Q`` times its share.
Only ``n x n`` matrices move between workers; the input is read once.

Signs are fixed at the root, so results do not depend on the chunking: ``R``'s diagonal is real
and non-negative (SciPy's Householder QR leaves signs to LAPACK; ``Q`` and ``R`` here are those
rows/columns times -1, or a unit phase); the SVD's ``Vh`` has the largest-magnitude entry of
each row real and positive, as :func:`gpulinalg.decomp.svd`.
"""

from __future__ import annotations

import operator
from functools import partial
from typing import Any

import numpy as np

from .._tiles import _tiles_xp
from .._tiles._graph_dask import meta_of, new_array, on_gpu, tokenize, work_dtype
from .._results import QRResult, SVDResult

__all__ = ["tsqr", "qr", "svd", "flip_signs", "SPLIT_EVERY"]

#: Default fan-in of the reduction tree: at most this many ``R`` factors are stacked per QR.
SPLIT_EVERY = 16


def _tile_qr(a):
    """The QR tile task of ``a``'s chunks: the GPU engine's for CuPy chunks, SciPy's for NumPy."""
    if on_gpu(a):
        from ._qr_cuda import tile_qr
    else:
        from ._qr_host import tile_qr
    return tile_qr


def _check_tall(a):
    if a.ndim != 2:
        raise ValueError(f"expected a 2-D Dask array, got shape {a.shape}")
    if any(np.isnan(c) for cs in a.chunks for c in cs):
        raise ValueError("chunk sizes must be known (call compute_chunk_sizes() first)")
    if a.numblocks[1] != 1:
        raise ValueError("TSQR needs one column of blocks (a tall-and-skinny array); got "
                         f"chunks {a.chunksize} in {a.numblocks} blocks: rechunk with "
                         "a.rechunk({1: -1})")


def tsqr(a: Any, *, compute_svd: bool = False, split_every: int | None = None) -> tuple:
    """TSQR of the Dask array ``a`` (m, n) with one column of blocks.

    Parameters
    ----------
    a : (m, n) dask.array.Array
        NumPy or CuPy chunks, chunked along rows only.
    compute_svd : bool, default False
        Return the SVD ``(U, S, Vh)`` instead of ``(Q, R)``.
    split_every : int, optional
        Fan-in of the reduction tree (default :data:`SPLIT_EVERY`).

    Returns
    -------
    (Q, R) or (U, S, Vh)
        Lazy Dask arrays with ``k = min(m, n)``: ``Q``/``U`` (m, k) chunked as ``a``'s rows,
        ``R`` (k, n), ``S`` (k,) and ``Vh`` (k, n) in one chunk each; chunks of ``a``'s
        package, in ``a``'s dtype (integers: float64), ``S`` real.
    """
    _check_tall(a)
    split_every = SPLIT_EVERY if split_every is None else int(split_every)
    if split_every < 2:
        raise ValueError(f"split_every must be >= 2, got {split_every}")
    dtype = work_dtype(a)
    if a.dtype != dtype:
        a = a.astype(dtype)
    m, n = (int(x) for x in a.shape)
    token = tokenize(a, compute_svd, split_every)
    name = f"gpulinalg-tsqr-{token}"
    dsk, levels = _tree(a, _tile_qr(a), n, split_every, compute_svd, name)
    _down(dsk, levels, name)
    k = min(m, n)
    q = new_array(f"{name}-q", dsk, [a], (m, k), (a.chunks[0], (k,)), meta_of(a, 2, dtype))
    root = (f"{name}-node-{len(levels) - 1}", 0)
    real = np.empty(0, dtype).real.dtype
    parts = [("r", (k, n), ((k,), (n,)), dtype)] if not compute_svd else \
        [("s", (k,), ((k,),), real), ("vh", (k, n), ((k,), (n,)), dtype)]
    res = [q]
    for i, (tag, shape, chunks, dt) in enumerate(parts, 1):
        key = (f"{name}-{tag}",) + (0,) * len(shape)
        res.append(new_array(key[0], {key: (operator.getitem, root, i)}, [q], shape, chunks,
                             meta_of(a, len(shape), dt)))
    return tuple(res)


def _tree(a, qr_fn, n, split_every, compute_svd, name):
    """The upward sweep. Level 0: a QR per block; level ``L``: QRs of up to ``split_every``
    stacked ``R`` factors of level ``L - 1`` (read through :func:`._tiles_xp.r_only`, so a
    node's ``Q`` stays on its worker for the downward sweep), until one node (the root) is left.

    ``levels[L][j] = (rows, children)``: the rows of node ``j``'s ``R`` and the indices of its
    children on level ``L - 1`` (in stacking order)."""
    dsk = {(f"{name}-node-0", i): (qr_fn, (a.name, i, 0)) for i in range(a.numblocks[0])}
    levels = [[(min(int(c), n), []) for c in a.chunks[0]]]
    while True:
        below = levels[-1]
        level = len(levels)
        groups = [list(range(i, min(i + split_every, len(below))))
                  for i in range(0, len(below), split_every)]
        last = len(groups) == 1
        fn = partial(_tiles_xp.root_qr, qr_fn, compute_svd) if last \
            else partial(_tiles_xp.node_qr, qr_fn)
        for c in range(len(below)):  # a parent reads its children's R alone: Q stays put
            dsk[(f"{name}-r-{level - 1}", c)] = (_tiles_xp.r_only, (f"{name}-node-{level - 1}", c))
        for g, kids in enumerate(groups):
            dsk[(f"{name}-node-{level}", g)] = (fn, *[(f"{name}-r-{level - 1}", c)
                                                      for c in kids])
        levels.append([(min(sum(below[c][0] for c in kids), n), kids) for kids in groups])
        if last:
            return dsk, levels


def _down(dsk, levels, name):
    """The downward sweep: each node's share ``W`` of the final factor (as many rows as its
    ``R``), ending with each block's ``Q @ W`` as ``(name-q, i, 0)``."""
    top = len(levels) - 1
    dsk[(f"{name}-w-{top}", 0)] = (operator.getitem, (f"{name}-node-{top}", 0), 0)
    for level in range(top, 0, -1):
        for p, (_, kids) in enumerate(levels[level]):
            start = 0
            for c in kids:
                rows = levels[level - 1][c][0]
                key = (f"{name}-q", c, 0) if level == 1 else (f"{name}-w-{level - 1}", c)
                dsk[key] = (_tiles_xp.down, (f"{name}-node-{level - 1}", c),
                            (f"{name}-w-{level}", p), start, start + rows)
                start += rows


def qr(a: Any, mode: str = "reduced", *, split_every: int | None = None) -> Any:
    """QR of a tall-and-skinny Dask array, as :func:`gpulinalg.decomp.qr` for NumPy arrays.

    ``mode``: ``"economic"`` / ``"reduced"`` (``QRResult(Q, R)``, Q (m, k), R (k, n)) or
    ``"r"`` (R only); ``"full"`` / ``"complete"`` (an ``m x m`` Q) raises
    ``NotImplementedError``. ``R``'s diagonal is real
    and non-negative (see the module notes). Results are lazy Dask arrays.
    """
    if mode not in ("economic", "reduced", "r", "full", "complete"):
        raise ValueError(f"mode must be 'economic', 'full' or 'r', got {mode!r}")
    if mode in ("full", "complete"):
        raise NotImplementedError(f"mode={mode!r} (an m x m Q) is not supported for Dask "
                                  "arrays; use mode='economic'")
    q, r = tsqr(a, split_every=split_every)
    return r if mode == "r" else QRResult(q, r)


def svd(a: Any, full_matrices: bool = False, compute_uv: bool = True, *,
        split_every: int | None = None) -> Any:
    """SVD of a tall-and-skinny Dask array by TSQR: ``SVDResult(U, S, Vh)`` (or ``S`` alone
    with ``compute_uv=False``), lazy; signs as :func:`gpulinalg.decomp.svd` (the
    largest-magnitude entry of each row of ``Vh`` real and positive).

    ``full_matrices=True`` raises ``NotImplementedError``. A short-and-fat array (one row of
    blocks) is handled through its conjugate transpose.
    """
    if full_matrices:
        raise NotImplementedError("full_matrices=True is not supported for Dask arrays")
    if a.ndim == 2 and a.numblocks[1] > 1 and a.numblocks[0] == 1:
        return _svd_wide(a, compute_uv, split_every)
    u, s, vh = tsqr(a, compute_svd=True, split_every=split_every)
    return SVDResult(u, s, vh) if compute_uv else s


def _svd_wide(a, compute_uv, split_every):
    """``a = (a^H)^H``: the TSQR SVD of the tall ``a^H`` with the roles of U and Vh swapped;
    signs re-fixed on the (small) ``Vh``."""
    v, s, uh = tsqr(a.conj().T if a.dtype.kind == "c" else a.T, compute_svd=True,
                    split_every=split_every)
    if not compute_uv:
        return s
    u, vh = uh.conj().T, v.conj().T
    u, vh = flip_signs(u, vh)
    return SVDResult(u, s, vh)


def flip_signs(u, vh):
    """``(U, Vh)`` with the largest-magnitude entry of each row of ``Vh`` made real and positive
    (``U``'s columns take the inverse phase): one small reduction over ``Vh``'s blocks."""
    k = int(vh.shape[0])
    if k == 0 or int(vh.shape[1]) == 0:
        return u, vh
    if vh.numblocks[0] != 1:
        vh = vh.rechunk({0: -1})
    name = f"gpulinalg-flip-{tokenize(u, vh)}"
    dsk = {(f"{name}-peak", j): (_tiles_xp.column_peaks, (vh.name, 0, j), k, True)
           for j in range(vh.numblocks[1])}
    dsk[(name, 0)] = (_tiles_xp.peaks_phase, *[(f"{name}-peak", j)
                                               for j in range(vh.numblocks[1])])
    phase = new_array(name, dsk, [vh], (k,), ((k,),), meta_of(vh, 1, vh.dtype))
    conj = phase.conj() if vh.dtype.kind == "c" else phase
    return u * phase[None, :], vh * conj[:, None]
