"""Randomized SVD and PCA of a Dask array chunked in both directions (Halko, Martinsson &
Tropp 2011, Alg. 4.4 + 5.1), on the workers.

* ``Omega`` is drawn block by block on the chunks' backend (decomp's Gaussian kernel on the GPU
  for CuPy chunks, its NumPy twin for NumPy ones) from a 64-bit seed of ``random_state`` and the
  block's index: the same numbers whatever the scheduler or the chunks' package.
* Products with ``A^H`` conjugate only the thin block: ``A^H Q = (Q^H A)^H`` (Dask's own
  ``svd_compressed`` uses ``A^T``, wrong for complex input: dask/dask#7639).
* Power iterations (``"auto"``/``"CholQR"``, as the single-GPU default) normalize by shifted
  Cholesky QR: the Gram matrix ``Y^H Y`` in double precision (one small reduction over the
  sketch's blocks) and ``R^-1`` applied to the thin product that follows
  (``A^H Y R^-1 = (A^H Y) R^-1``), so no basis is formed and no QR tree is run between passes;
  ``"QR"`` orthonormalizes each sketch by TSQR (:func:`._tsqr_dask.tsqr`). The final basis is
  always TSQR's, and the Rayleigh-Ritz step is the TSQR SVD of the tall ``B^H = A^H Q``;
  nothing ``m x n`` is formed but ``A`` itself.
* ``persist=True`` computes each pass's sketch on the cluster before the next pass is built, so
  every pass reads the input once and nothing but thin sketches is kept; ``persist=False``
  (default) returns one lazy graph.
* PCA centres implicitly: ``(X - 1 mu^T) z = X z - 1 (mu^T z)`` and
  ``(X - 1 mu^T)^H q = X^H q - conj(mu) (1^T q)``; ``X - mu`` is never formed. The column
  means and the total variance come from the first sketch pass: one task per block computes
  ``X_ij Omega_j`` and the block's column moments (sum and centred sum of squares, combined
  across blocks by Chan's formula), so fitting reads ``X`` ``2 n_iter + 2`` times in all.
* Signs: the largest-magnitude entry of each row of ``Vh`` is real and positive (as the
  single-GPU :func:`gpulinalg.decomp.truncated_svd`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from . import _panels_dask, _rowpass_xp
from .._tiles import _tiles_xp
from .._tiles._graph_dask import meta_of, new_array, on_gpu, persist, tokenize, work_dtype
from .._results import SVDResult
from ._sketch_options import _MASK64
from ._truncated_plan import LowRankSVDResult, resolve_plan
from ..qr._tsqr_dask import flip_signs, tsqr

__all__ = ["randomized_svd", "pca", "transform", "residual_norm", "gaussian"]

_NORMALIZERS = {"auto": "CholQR", "cholqr": "CholQR", "qr": "QR", "none": "none"}


class _Operator:
    """``A`` (or ``A - 1 mu^T`` with ``centre``) seen through products with thin Dask blocks.

    With ``centre`` the means come from the first product (:meth:`first`), which also gives
    the total variance of the columns (``total``): one read of ``A`` for all three."""

    def __init__(self, a, centre=False):
        self.a, self.centre = a, bool(centre)
        self.mean = self.total = None
        self.complex = a.dtype.kind == "c"
        self.shape = tuple(int(x) for x in a.shape)

    def first(self, omega):
        """``(Y, shift)``: ``A Omega = Y - 1 shift`` (``shift`` (l,) or ``None``; centred with
        ``centre``), the moments of ``A`` from the same tasks."""
        if not self.centre:
            return _matmat(self, omega), None
        y, self.mean, self.total = _sketch_moments(self.a, omega)
        return y, (self.mean @ omega).rechunk(-1)

    def moments(self):
        """The means and total variance alone (when no product is taken: ``k = 0``)."""
        if self.centre and self.mean is None:
            _, self.mean, self.total = _sketch_moments(self.a, None)

    def matmat(self, z):
        y = self.a @ z
        return y if self.mean is None else y - (self.mean @ z)[None, :]

    def rmatmat(self, q):
        if self.complex:
            t = (q.conj().T @ self.a).conj().T
        else:
            t = self.a.T @ q
        if self.mean is None:
            return t
        mu = self.mean.conj() if self.complex else self.mean
        return t - mu[:, None] * q.sum(axis=0)[None, :]


def _sketch_moments(a, omega):
    """``(A Omega, mean, total)``: one task per block of ``a`` computes its share of the
    product and its column moments (:func:`._tiles_xp.sketch_moments`); ``mean`` (n,) in
    ``a``'s dtype, ``total`` the 0-d float64 sum of the column variances (``ddof=1``).
    ``omega=None``: the moments alone (``A Omega`` is then ``None``)."""
    m, n = (int(v) for v in a.shape)
    nr, nc = a.numblocks
    name = f"gpulinalg-sketch-moments-{tokenize(a, omega)}"
    dsk = {}
    for i in range(nr):
        for j in range(nc):
            dsk[(f"{name}-t", i, j)] = (_tiles_xp.sketch_moments, (a.name, i, j),
                                        None if omega is None else (omega.name, j, 0))
    for j in range(nc):
        dsk[(f"{name}-m", j)] = (_tiles_xp.combine_moments,
                                 *[(f"{name}-t", i, j) for i in range(nr)])
    mdsk = {(f"{name}-mean", j): (_tiles_xp.moments_mean, (f"{name}-m", j), a.dtype)
            for j in range(nc)}
    mdsk[(f"{name}-var",)] = (_tiles_xp.moments_total, m, *[(f"{name}-m", j)
                                                           for j in range(nc)])
    if omega is None:
        deps, base = [a], dsk
        y = None
    else:
        l = int(omega.shape[1])
        ydsk = {(f"{name}-y", i, 0): (_tiles_xp.sum_first, *[(f"{name}-t", i, j)
                                                             for j in range(nc)])
                for i in range(nr)}
        y = new_array(f"{name}-y", {**dsk, **ydsk}, [a, omega], (m, l), (a.chunks[0], (l,)),
                      meta_of(a, 2, a.dtype))
        deps, base = [y], {}
    mean = new_array(f"{name}-mean", {**base, **mdsk}, deps, (n,), (a.chunks[1],),
                     meta_of(a, 1, a.dtype))
    total = new_array(f"{name}-var", {**base, **mdsk}, deps, (), (), meta_of(a, 0, np.float64))
    return y, mean, total


def _cholqr_inverse(y, rows):
    """Lazy ``R^-1`` (l, l) of the shifted Cholesky QR of the thin Dask array ``y`` (one column
    of blocks, ``rows`` rows): the Gram matrix in double precision, one small task."""
    hi = np.complex128 if y.dtype.kind == "c" else np.float64
    yh = y.astype(hi)
    g = (yh.conj().T if y.dtype.kind == "c" else yh.T) @ yh
    return g.map_blocks(_tiles_xp.cholqr_inverse, rows, np.dtype(y.dtype), dtype=y.dtype,
                        meta=meta_of(y, 2, y.dtype))


def _matmat(op, z, rz=None):
    """``(A - 1 mu^T) z rz`` (lazy, (m, l), chunked as ``A``'s rows) for ``z`` chunked as
    ``A``'s columns: one task per block of ``A`` (product and centring fused), the column
    blocks' shares summed (and ``rz`` applied) in one more task per row block when ``A`` has
    several."""
    a, mu = op.a, op.mean
    nr, nc = a.numblocks
    l = int(z.shape[1])
    name = f"gpulinalg-matmat-{tokenize(a, z, mu, rz)}"
    rk = None if rz is None else (rz.name, 0, 0)
    dsk = {}
    for i in range(nr):
        for j in range(nc):
            args = ((a.name, i, j), (z.name, j, 0), None if mu is None else (mu.name, j))
            if nc == 1:
                dsk[(name, i, 0)] = (_tiles_xp.mat_part, *args, rk)
            else:
                dsk[(f"{name}-p", i, j)] = (_tiles_xp.mat_part, *args, None)
        if nc > 1:
            dsk[(name, i, 0)] = (_tiles_xp.sum_times, rk, *[(f"{name}-p", i, j)
                                                            for j in range(nc)])
    deps = [a, z] + [d for d in (mu, rz) if d is not None]
    return new_array(name, dsk, deps, (op.shape[0], l), (a.chunks[0], (l,)),
                     meta_of(a, 2, a.dtype))


def _rmatmat(op, q, *, shift=None, normalize=False, split_every=None):
    """``(A - 1 mu^T)^H (q - 1 shift)`` (lazy, (n, l), chunked as ``A``'s columns), times
    ``R^-1`` of the shifted Cholesky QR of ``q - 1 shift`` with ``normalize``; ``q`` chunked as
    ``A``'s rows. One task per block of ``A`` (product, centring and, in column block 0, the
    Gram matrix of the row block fused), summed over the row blocks by a tree of fan-in
    ``split_every``; ``R^-1`` comes from the Gram matrix inside the last task."""
    from ..qr._tsqr_dask import SPLIT_EVERY
    a, mu = op.a, op.mean
    nr, nc = a.numblocks
    l = int(q.shape[1])
    fan = max(int(split_every or SPLIT_EVERY), 2)
    name = f"gpulinalg-rmatmat-{tokenize(a, q, mu, shift, normalize, fan)}"
    sk = None if shift is None else (shift.name, 0)
    dsk = {}
    roots = []
    for j in range(nc):
        level = [(f"{name}-p", i, j) for i in range(nr)]
        for i in range(nr):
            dsk[level[i]] = (_tiles_xp.rmat_part, (a.name, i, j), (q.name, i, 0),
                             None if mu is None else (mu.name, j), sk, normalize and j == 0)
        depth = 0
        while len(level) > 1:
            depth += 1
            nxt = []
            for g in range(0, len(level), fan):
                key = (f"{name}-s{depth}", g // fan, j)
                dsk[key] = (_tiles_xp.add_pairs, *level[g:g + fan])
                nxt.append(key)
            level = nxt
        roots.append(level[0])
    for j in range(nc):
        dsk[(name, j, 0)] = (_tiles_xp.rmat_finish, roots[j], roots[0] if normalize else None,
                             op.shape[0], a.dtype)
    deps = [a, q] + [d for d in (mu, shift) if d is not None]
    return new_array(name, dsk, deps, (op.shape[1], l), (a.chunks[1], (l,)),
                     meta_of(a, 2, a.dtype))


def _tile_gaussian(a):
    """The Gaussian block task of ``a``'s chunks' backend (the same numbers for a seed)."""
    if on_gpu(a):
        from ._sketch_cuda import tile_gaussian
    else:
        from ._sketch_host import tile_gaussian
    return tile_gaussian


def _rowpass_engine(a):
    """How a task walks a row panel of ``a``'s chunks (:mod:`._rowpass_host` for NumPy,
    :mod:`._rowpass_cuda` for CuPy): its step sizes and panel QR, passed to the tasks."""
    if on_gpu(a):
        from . import _rowpass_cuda as engine
    else:
        from . import _rowpass_host as engine
    return engine


def _panel_fn(a, l):
    """:func:`._rowpass_xp.panel` with the fused pass's row step of ``a``'s backend for a thin
    factor of ``l`` columns (the whole panel where it has none)."""
    step = _rowpass_engine(a).fused_step(int(a.shape[1]) * a.dtype.itemsize, l)
    return _rowpass_xp.panel if step is None else partial(_rowpass_xp.panel, step=step)


def _basis_step(a, c):
    """The backend's rows per step of :func:`._rowpass_xp.basis_block` (``q_i``: ``c``
    double precision columns), or ``None``."""
    hi = np.dtype(np.complex128 if a.dtype.kind == "c" else np.float64)
    return _rowpass_engine(a).block_step(c, hi.itemsize)


def gaussian(a, n_rows, row_chunks, l, dtype, seed):
    """A lazy standard normal ``(n_rows, l)`` Dask array chunked ``(row_chunks, (l,))`` on the
    backend of ``a``'s chunks; block ``i`` is drawn from ``seed`` and ``i`` alone."""
    tile = _tile_gaussian(a)
    token = tokenize(seed, row_chunks, l, np.dtype(dtype).str, tile.__module__)
    name = f"gpulinalg-gaussian-{token}"
    dsk = {}
    for i, rows in enumerate(row_chunks):
        s = int(np.random.SeedSequence([seed & _MASK64, i]).generate_state(1, np.uint64)[0])
        dsk[(name, i, 0)] = (tile, (int(rows), l), np.dtype(dtype), s)
    return new_array(name, dsk, [], (n_rows, l), (tuple(row_chunks), (l,)), meta_of(a, 2, dtype))


def _check(a):
    if a.ndim != 2:
        raise ValueError(f"expected a 2-D Dask array, got shape {a.shape}")
    if any(np.isnan(c) for cs in a.chunks for c in cs):
        raise ValueError("chunk sizes must be known (call compute_chunk_sizes() first)")
    dtype = work_dtype(a)
    return (a if a.dtype == dtype else a.astype(dtype)), dtype


def _normalizer(name):
    key = str(name).lower() if isinstance(name, str) else name
    if key not in _NORMALIZERS:
        raise ValueError("power_iteration_normalizer must be 'auto', 'CholQR', 'QR' or 'none' "
                         "for Dask "
                         f"arrays, got {name!r}")
    return _NORMALIZERS[key]


def _empty(a, shape, dtype):
    name = f"gpulinalg-zeros-{tokenize(shape, np.dtype(dtype).str, a._meta.__class__)}"
    key = (name,) + (0,) * len(shape)
    like = meta_of(a, 1, dtype)
    return new_array(name, {key: (_tiles_xp.zeros, like, shape)}, [], shape,
                     tuple((s,) for s in shape), meta_of(a, len(shape), dtype))


def _range(op, a, l, n_iter, normalizer, seed, keep, split_every):
    """Orthonormal ``Q`` (m, l) for the range of ``(A A^H)^n_iter A Omega``."""
    m, n = op.shape
    y, shift = op.first(gaussian(a, n, a.chunks[1], l, op.a.dtype, seed))
    if op.mean is not None and keep:  # the moments come from the same tasks: persist together
        y, shift, op.mean, op.total = persist((y, shift, op.mean, op.total), keep)
    else:
        y = persist(y, keep)
    for _ in range(n_iter):
        if normalizer == "QR":
            if shift is not None:
                y = y - shift[None, :]
            z = _rmatmat(op, tsqr(y, split_every=split_every)[0], split_every=split_every)
            z = persist(tsqr(z, split_every=split_every)[0], keep)
            y = persist(_matmat(op, z), keep)
        elif normalizer == "CholQR":  # A^H (Y R^-1) = (A^H Y) R^-1: no basis formed
            z = persist(_rmatmat(op, y, shift=shift, normalize=True, split_every=split_every),
                        keep)
            y = persist(_matmat(op, z, _cholqr_inverse(z, n)), keep)
        else:
            z = persist(_rmatmat(op, y, shift=shift, split_every=split_every), keep)
            y = persist(_matmat(op, z), keep)
        shift = None
    if shift is not None:
        y = y - shift[None, :]
    return persist(tsqr(y, split_every=split_every)[0], keep)


def _svd(op, a, k, l, n_iter, normalizer, seed, keep, split_every):
    if normalizer == "CholQR":
        return _rowpass_svd(op, a, k, l, n_iter, seed, keep, split_every)
    q = _range(op, a, l, n_iter, normalizer, seed, keep, split_every)
    bh = _rmatmat(op, q, split_every=split_every)  # B^H = A^H Q
    ub, s, vbh = tsqr(bh, compute_svd=True, split_every=split_every)
    U = q @ vbh.conj().T[:, :k]
    Vh = ub[:, :k].conj().T
    U, Vh = flip_signs(U, Vh)
    return U, s[:k], Vh


# -- the row-panel engine ("auto"/"CholQR"): q + 2 task layers over A ------------------------

def _omega(a, l, dtype, seed):
    """``Omega`` (n, l) in one chunk on the backend of ``a``'s chunks: block ``j`` (the rows of
    column chunk ``j``) drawn from ``seed`` and ``j``, as :func:`gaussian`."""
    tile = _tile_gaussian(a)
    sizes = tuple(int(c) for c in a.chunks[1])
    seeds = tuple(int(np.random.SeedSequence([seed & _MASK64, j]).generate_state(1, np.uint64)[0])
                  for j in range(len(sizes)))
    name = f"gpulinalg-omega-{tokenize(seeds, sizes, l, np.dtype(dtype).str, tile.__module__)}"
    dsk = {(name, 0, 0): (_rowpass_xp.omega, tile, sizes, l, np.dtype(dtype), seeds)}
    n = sum(sizes)
    return new_array(name, dsk, [], (n, l), ((n,), (l,)), meta_of(a, 2, dtype))


ROWPASS_SPLIT_EVERY = 32  # the row-panel engine's default merge fan-in (small n x l sums)


def _layer(a, kind, thin, mean, local, split_every, name=None, place=None):
    """One task per row panel of ``a`` and a tree of merges: ``(dsk, top, name, heads)``,
    ``top`` a task (a :func:`._rowpass_xp.merge` of the tree's last level, to run inside the
    root's task), ``heads`` the key per panel that carries its ``Q_i`` (``"rr"``).
    ``place`` (:func:`._panels_dask.placement`): a panel split across workers gets tasks per
    worker instead (:mod:`._panels_dask`).

    ``kind``: ``"fused"`` (``Y_i = A_i Z`` and ``A_i^H Y_i``), ``"basis"`` (``Y_i`` alone) or
    ``"rr"`` (``A_i^H Q_i``, ``thin`` is then the orthonormal basis ``Q`` or, unpersisted,
    :func:`_basis`'s tuple, whose ``Q_i`` is formed in the task). The merges read the parts
    through :func:`._rowpass_xp.light` (a panel's ``Y_i`` / ``Q_i`` stays on its worker)."""
    nr, nc = a.numblocks
    fan = max(int(split_every or ROWPASS_SPLIT_EVERY), 2)
    sizes = tuple(int(c) for c in a.chunks[1])
    split = None if place is None else place.token
    token = tokenize(a, thin if hasattr(thin, "name") else thin[:2], mean, local, fan,
                     *(() if split is None else (split,)))
    name = name or f"gpulinalg-rowpass-{kind}-{token}"
    mk = None if mean is None else (mean.name, 0)
    panel_fn = _panel_fn(a, int(thin.shape[1])) if kind == "fused" else _rowpass_xp.panel
    bstep = None if kind != "rr" or hasattr(thin, "name") else thin[4]
    dsk = {}
    level = []
    for i in range(nr):
        blocks = [(a.name, i, j) for j in range(nc)]
        q = None
        if kind == "rr":
            q = (thin.name, i, 0) if hasattr(thin, "name") else \
                (_rowpass_xp.basis_block, (thin[0], i), thin[1], i, a.dtype, bstep)
        if place is not None and place.split(i):
            level += _split_panel(dsk, name, a, i, place, kind, thin, q, mk, local)
            continue
        if kind == "rr":
            task = (_rowpass_xp.panel_h, q, mk, sizes, *blocks)
        else:
            task = (panel_fn, (thin.name, 0, 0), mk, sizes, local, kind == "fused", *blocks)
        dsk[(f"{name}-p", i)] = task
        level.append((f"{name}-p", i))
    heads = [next(k for k in level if k[1] == i) for i in range(nr)]
    if kind != "fused":  # the merges read the parts without their Y_i / Q_i
        for key in level:
            dsk[(f"{name}-l", *key[1:])] = (_rowpass_xp.light, key)
        level = [(f"{name}-l", *key[1:]) for key in level]
    zk = (thin.name, 0, 0) if local else None
    depth = 0
    while len(level) > fan:
        depth += 1
        nxt = []
        for g in range(0, len(level), fan):
            key = (f"{name}-m{depth}", g // fan)
            dsk[key] = (_rowpass_xp.merge, zk, *level[g:g + fan])
            nxt.append(key)
        level = nxt
    return dsk, (_rowpass_xp.merge, zk, *level), name, heads


def _split_panel(dsk, name, a, i, place, kind, thin, q, mk, local):
    """The tasks of a row panel split across workers (:mod:`._panels_dask`); its keys."""
    if kind == "rr":
        return _panels_dask.rayleigh_ritz(dsk, name, a, i, place, q, mk)
    if kind == "fused":
        return _panels_dask.fused(dsk, name, a, i, place, (thin.name, 0, 0), mk, local)
    dsk[(f"{name}-p", i)] = _panels_dask.basis(dsk, name, a, i, place, (thin.name, 0, 0), mk,
                                               local)
    return [(f"{name}-p", i)]


def _moment_arrays(a, root, deps, name):
    """The lazy column means (n,) (double precision, one chunk) and the total variance (0-d)
    of a locally centred pass's root."""
    n = int(a.shape[1])
    hi = np.complex128 if a.dtype.kind == "c" else np.float64
    mean = new_array(f"{name}-mean", {(f"{name}-mean", 0): (_rowpass_xp.item, root, "mean")},
                     deps, (n,), ((n,),), meta_of(a, 1, hi))
    total = new_array(f"{name}-total", {(f"{name}-total",): (_rowpass_xp.item, root, "total")},
                      deps, (), (), meta_of(a, 0, np.float64))
    return mean, total


def _rowpass_svd(op, a, k, l, n_iter, seed, keep, split_every):
    """Randomized SVD by row panels: ``n_iter`` fused passes (``A`` then ``A^H`` in the same
    task per row panel, the next factor orthonormalized by one small QR), a basis pass
    (``Y = A Z``, ``Q`` from a TSQR of the thin ``Y``: each panel's task ends with its
    Householder QR) and the Rayleigh-Ritz pass (``A^H Q``, its SVD in one small task):
    ``n_iter + 2`` layers over ``A``, ``2 n_iter + 2`` reads of each block."""
    m, n = op.shape
    dtype = a.dtype
    meta = meta_of(a, 2, dtype)
    z = _omega(a, l, dtype, seed)
    mean = None
    local = op.centre
    place = _panels_dask.placement(a)  # None unless the input is held by 2+ workers
    for _ in range(n_iter):
        dsk, top, name, _ = _layer(a, "fused", z, mean, local, split_every, place=place)
        deps = [a, z] + ([mean] if mean is not None else [])
        if local:  # the root also gives the moments
            root = (f"{name}-root",)
            dsk[root] = (_rowpass_xp.power_root, top, dtype)
            dsk[(f"{name}-z", 0, 0)] = (_rowpass_xp.item, root, "z")
            z = new_array(f"{name}-z", dsk, deps, (n, l), ((n,), (l,)), meta)
            mean, op.total = _moment_arrays(a, root, [z], name)
            z, mean, op.total = persist((z, mean, op.total), keep)
            local = False
        else:
            dsk[(f"{name}-z", 0, 0)] = (_rowpass_xp.item, (_rowpass_xp.power_root, top, dtype),
                                        "z")
            z = persist(new_array(f"{name}-z", dsk, deps, (n, l), ((n,), (l,)), meta), keep)
    q, mean = _basis(op, a, z, mean, local, keep, split_every, place)
    dsk, top, name, heads = _layer(a, "rr", q, mean, False, split_every, place=place)
    if hasattr(q, "name"):
        deps = [a, q] + ([mean] if mean is not None else [])
    else:  # the basis pass's tasks go into this layer
        dsk.update(q[2])
        deps = q[3]
    root = (f"{name}-root",)
    dsk[root] = (_rowpass_xp.final_root, top, k, dtype)
    nr = a.numblocks[0]
    for i in range(nr):
        dsk[(f"{name}-u", i, 0)] = (_rowpass_xp.u_block, heads[i], root, dtype)
    U = new_array(f"{name}-u", dsk, deps, (m, k), (a.chunks[0], (k,)), meta)
    real = np.empty(0, dtype).real.dtype
    S = new_array(f"{name}-s", {(f"{name}-s", 0): (_rowpass_xp.item, root, "s")}, [U], (k,),
                  ((k,),), meta_of(a, 1, real))
    starts = np.concatenate([[0], np.cumsum(a.chunks[1])]).astype(int)
    vdsk = {(f"{name}-vh", 0, j): (_rowpass_xp.vh_block, root, int(starts[j]),
                                   int(starts[j + 1])) for j in range(a.numblocks[1])}
    Vh = new_array(f"{name}-vh", vdsk, [U], (k, n), ((k,), a.chunks[1]), meta)
    if op.centre:  # in the input's dtype, chunked as its columns: one task per chunk
        mname = f"gpulinalg-pca-mean-{tokenize(mean, np.dtype(dtype).str)}"
        mdsk = {(mname, j): (_rowpass_xp.cast_slice, (mean.name, 0), int(starts[j]),
                             int(starts[j + 1]), dtype) for j in range(a.numblocks[1])}
        op.mean = new_array(mname, mdsk, [mean], (n,), (a.chunks[1],), meta_of(a, 1, dtype))
    return U, S, Vh


def _basis(op, a, z, mean, local, keep, split_every, place=None):
    """The basis pass: the TSQR of ``Y = (A - 1 mu^T) Z``; ``(q, mean)``. ``q``: the orthonormal
    ``Q`` (m, c) as a Dask array when persisted (``keep``), else ``(part name, root key, graph,
    dependencies, step)``: the Rayleigh-Ritz tasks form ``Q_i`` themselves (:func:`_layer`), in
    the backend's steps. Each panel's QR is the backend's (:func:`_rowpass_engine`).
    ``local`` (no power iteration in PCA): the panels centre on their own means and a merge
    root gives the means and the total variance."""
    m, n = op.shape
    dtype = a.dtype
    nr = a.numblocks[0]
    c = min(m, int(z.shape[1]))
    engine = _rowpass_engine(a)
    bstep = _basis_step(a, c)
    split = None if place is None else place.token
    token = tokenize(a, z, mean, local, split_every, *(() if split is None else (split,)))
    name = f"gpulinalg-rowpass-basis-{token}"
    deps = [a, z] + ([mean] if mean is not None else [])
    sroot = (f"{name}-sroot",)  # the TSQR of Y: orthonormal Q even where Y is rank-deficient
    if local:
        dsk, top, _, _ = _layer(a, "basis", z, None, True, split_every, name, place)
        root = (f"{name}-root",)
        dsk[root] = (_rowpass_xp.basis_root, top, dtype)
        for i in range(nr):
            dsk[(f"{name}-qr", i)] = (_rowpass_xp.local_qr, (f"{name}-p", i), root,
                                      (z.name, 0, 0), engine.panel_qr)
    else:  # each panel's task ends with its QR: no merge, no root
        mk = None if mean is None else (mean.name, 0)
        sizes = tuple(int(s) for s in a.chunks[1])
        dsk = {}
        for i in range(nr):
            if place is not None and place.split(i):
                part = _panels_dask.basis(dsk, name, a, i, place, (z.name, 0, 0), mk, False)
            else:
                part = (_rowpass_xp.panel, (z.name, 0, 0), mk, sizes, False, False,
                        *[(a.name, i, j) for j in range(a.numblocks[1])])
            dsk[(f"{name}-qr", i)] = (_rowpass_xp.local_qr, part, None, None, engine.panel_qr)
    for i in range(nr):  # the root reads the R_i alone: each Q_i stays on its panel's worker
        dsk[(f"{name}-r", i)] = (_rowpass_xp.light, (f"{name}-qr", i))
    dsk[sroot] = (_rowpass_xp.stack_qr, *[(f"{name}-r", i) for i in range(nr)])
    meta = meta_of(a, 2, dtype)
    if keep or local:
        for i in range(nr):
            dsk[(f"{name}-q", i, 0)] = (_rowpass_xp.basis_block, (f"{name}-qr", i), sroot, i,
                                        dtype, bstep)
        q = new_array(f"{name}-q", dsk, deps, (m, c), (a.chunks[0], (c,)), meta)
        if local:  # the moments come from the same tasks: persisted together
            mean, op.total = _moment_arrays(a, root, [q], name)
            q, mean, op.total = persist((q, mean, op.total), keep)
        elif mean is not None:
            q, mean = persist((q, mean), keep)
        else:
            q = persist(q, keep)
        return q, mean
    return (f"{name}-qr", sroot, dsk, deps, bstep), mean


def randomized_svd(a: Any, k: int, *, n_oversamples: int = 10, n_iter: int | str = "auto",
                   power_iteration_normalizer: str = "auto", random_state: Any = None,
                   error_estimate: bool = False, persist: bool = False,
                   split_every: int | None = None) -> SVDResult | LowRankSVDResult:
    """Top-``k`` SVD of the Dask array ``a`` (m, n), chunked in any way (NumPy or CuPy chunks).

    Parameters as :func:`gpulinalg.decomp.truncated_svd` (``method="randomized"``);
    ``power_iteration_normalizer``: ``"auto"``/``"CholQR"`` (the row-panel engine: one
    Householder QR of the summed ``A^H A Z`` per power iteration, a TSQR of the final sketch),
    ``"QR"`` (TSQR of each sketch) or ``"none"``.
    ``persist``: compute each pass on the cluster before building the next (needs
    the cluster to hold the thin sketches, reads the input once per pass; the call then blocks).

    Returns
    -------
    SVDResult(U, S, Vh) or LowRankSVDResult(U, S, Vh, error)
        Lazy Dask arrays: ``U`` (m, k) chunked as ``a``'s rows, ``S`` (k,), ``Vh`` (k, n)
        chunked as ``a``'s columns; ``error`` a lazy 0-d estimate of ``||A - U S Vh||_2``.
    """
    a, dtype = _check(a)
    return _run(_Operator(a), a, dtype, k, n_oversamples, n_iter, power_iteration_normalizer,
                random_state, error_estimate, persist, split_every)


def _run(op, a, dtype, k, n_oversamples, n_iter, normalizer, random_state, error_estimate,
         keep, split_every):
    m, n = op.shape
    plan = resolve_plan((m, n), k, method="randomized", n_oversamples=n_oversamples,
                        n_iter=n_iter, random_state=random_state, dtype=dtype)
    normalizer = _normalizer(normalizer)
    real = np.empty(0, dtype).real.dtype
    if plan.k == 0 or m == 0 or n == 0:
        op.moments()
        U, S, Vh = (_empty(a, (m, plan.k), dtype), _empty(a, (plan.k,), real),
                    _empty(a, (plan.k, n), dtype))
        err = _empty(a, (), real)
    else:
        U, S, Vh = _svd(op, a, plan.k, plan.sketch, plan.n_iter, normalizer, plan.seed, keep,
                        split_every)
        err = residual_norm(op, a, U, S, Vh, seed=plan.seed + 1,
                            split_every=split_every) if error_estimate else None
    return LowRankSVDResult(U, S, Vh, err) if error_estimate else SVDResult(U, S, Vh)


def residual_norm(op, a, U, S, Vh, *, n_probe=4, n_power=3, seed=0, split_every=None):
    """Lazy estimate of ``||A - U diag(S) Vh||_2`` by block power iteration on the residual
    (as the single-GPU ``residual_norm``): ``2 n_power + 1`` more passes over ``A``."""
    m, n = op.shape
    sv = S.astype(U.dtype)[:, None] * Vh
    svh, uh = sv.conj().T, U.conj().T

    def apply(x):
        return op.matmat(x) - U @ (sv @ x)

    def apply_h(y):
        return op.rmatmat(y) - svh @ (uh @ y)

    p = min(n_probe, n)
    x = tsqr(gaussian(a, n, a.chunks[1], p, U.dtype, seed), split_every=split_every)[0]
    for _ in range(n_power):
        x = tsqr(apply_h(apply(x)), split_every=split_every)[0]
    s = tsqr(apply(x), compute_svd=True, split_every=split_every)[1]
    return s[0]


def pca(x: Any, n_components: int | None = None, *, n_oversamples: int = 10,
        iterated_power: int | str = "auto", power_iteration_normalizer: str = "auto",
        random_state: Any = None, persist: bool = False,
        split_every: int | None = None) -> dict:
    """Randomized PCA of the Dask array ``x`` (n_samples, n_features), centred implicitly.

    Returns a dict of lazy Dask arrays named as scikit-learn's fitted attributes without the
    trailing underscore: ``components`` (k, n_features), ``explained_variance``,
    ``explained_variance_ratio``, ``singular_values`` (k,), ``mean`` (n_features,),
    ``noise_variance`` (0-d), plus ``U`` (n_samples, k) (the scores are ``U * singular_values``)
    and the ints ``n_samples``, ``n_features``. ``n_components``: an int (``None``: all).
    Compute them together (``dask.compute(*d.values())``) to share the passes over ``x``.
    """
    x, dtype = _check(x)
    m, n = (int(v) for v in x.shape)
    small = min(m, n)
    k = small if n_components is None else n_components
    op = _Operator(x, centre=m > 0)
    U, S, Vh = _run(op, x, dtype, k, n_oversamples, iterated_power,
                    power_iteration_normalizer, random_state, False, persist, split_every)
    mean = op.mean if m else _empty(x, (n,), dtype)
    k = int(S.shape[0])
    if m > 1 and S.numblocks == (1,):  # one small task each (no Dask elementwise layers)
        name = f"gpulinalg-pca-var-{tokenize(S, op.total, m, small)}"
        ev, ratio, noise = (new_array(f"{name}-{w}", {(f"{name}-{w}",) + (0,) * len(shape): (
            _rowpass_xp.variances, (S.name, 0), (op.total.name,), m, small, w)},
            [S, op.total], shape, tuple((d,) for d in shape), meta_of(x, len(shape), S.dtype))
            for w, shape in (("ev", (k,)), ("ratio", (k,)), ("noise", ())))
    else:
        denom = max(m - 1, 1)
        ev = S ** 2 / denom
        total = op.total if m > 1 else ev.sum().astype(np.float64)
        real = ev.dtype
        ratio = (ev / total).astype(real) if m > 1 else ev * 0
        noise = ((total - ev.sum()) / (small - k)).astype(real) if k < small else ev.sum() * 0
    return {"components": Vh, "explained_variance": ev, "explained_variance_ratio": ratio,
            "singular_values": S, "mean": mean, "noise_variance": noise, "U": U,
            "n_samples": m, "n_features": n}


def transform(x: Any, components: Any, mean: Any, scale: Any = None) -> Any:
    """Lazy ``(x - mean) @ components.T`` (times ``scale`` per column), computed as
    ``x @ components.T - mean @ components.T``; ``components``, ``mean`` and ``scale``: arrays
    of the package of ``x``'s chunks (a fitted PCA's attributes)."""
    import dask.array as da
    ct = da.from_array(components.T, chunks=(x.chunks[1], -1), asarray=False)
    out = x.astype(components.dtype) @ ct - (mean @ components.T)[None, :]
    return out * scale[None, :] if scale is not None else out

