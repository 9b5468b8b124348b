"""Row panels split across workers: the tasks of the row-panel randomized SVD / PCA
(:mod:`._randomized_dask`) for a panel whose blocks are held by several Dask workers.

A persisted input's blocks sit where the scheduler put them, and it places neighbouring root
tasks on alternate workers: on two workers most row panels of a grid chunked both ways have
blocks on both. One task per panel would then pull the missing blocks (GBs). Instead, each
worker's column blocks of such a panel (a *group*) get their own tasks, which the scheduler
runs where their blocks are (nothing is pinned: a task goes to the worker holding most of its
input's bytes, and a group's blocks outweigh every thin matrix it reads), so only thin
matrices cross between workers:

* fused pass: :func:`._rowpass_xp.part_y` per group (``Y_i^g = A_ig Z_g``, ``m_i x l``), then
  per group :func:`._rowpass_xp.part_t` (``Y_i`` summed in double precision from the groups'
  shares and centred, :func:`._rowpass_xp.combine`, inside the task; then ``A_ig^H Y_i``: the
  group's own rows of the ``n x l`` share, no sum across groups);
* basis pass: the groups' ``Y_i^g`` combined inside the panel's QR task (or, centring
  locally, in one task per panel whose result is a :func:`._rowpass_xp.panel` result);
* Rayleigh-Ritz pass: :func:`._rowpass_xp.part_h` per group (``A_ig^H Q_i``).

A panel held by one worker keeps its single task; with no panel split (one worker, row-panel
chunks, no distributed client, an input not held in futures) the graph is the one-task-per-
panel graph exactly.
"""

from collections import Counter

import numpy as np

from . import _rowpass_xp
from ._graph_dask import block_owners

__all__ = ["panel_groups", "fused", "basis", "rayleigh_ritz"]


def panel_groups(a):
    """Per row panel of ``a``: ``None`` (its blocks on one worker, or unknown), or the column
    block indices grouped by the worker holding them (tuples, in column order of their first
    block). ``None`` for the whole array when no panel is split.

    A block held by several workers (replicas) goes to the panel's majority worker when that
    is one of them, else to the holder with the most of the panel; a block whose holder is
    unknown goes to the majority worker."""
    owners = block_owners(a)
    if owners is None:
        return None
    nr, nc = a.numblocks
    out = []
    for i in range(nr):
        holders = [owners.get((i, j)) or [] for j in range(nc)]
        count = Counter(w for ws in holders for w in ws)
        if not count:
            out.append(None)
            continue
        rank = sorted(count, key=lambda w: (-count[w], w))
        groups: dict = {}
        for j, ws in enumerate(holders):
            w = min(ws, key=rank.index) if ws else rank[0]
            groups.setdefault(w, []).append(j)
        out.append(tuple(tuple(g) for g in groups.values()) if len(groups) > 1 else None)
    return tuple(out) if any(out) else None


def _starts(a, cols):
    starts = np.concatenate([[0], np.cumsum(a.chunks[1])]).astype(int)
    return tuple(int(starts[j]) for j in cols)


def _blocks(a, i, cols):
    return [(a.name, i, j) for j in cols]


def _partials(dsk, name, a, i, groups, zk, local):
    keys = []
    for g, cols in enumerate(groups):
        keys.append((f"{name}-y", i, g))
        dsk[keys[-1]] = (_rowpass_xp.part_y, zk, _starts(a, cols), local, *_blocks(a, i, cols))
    return keys


def fused(dsk, name, a, i, groups, zk, mk, local):
    """The fused pass's tasks of split panel ``i`` into ``dsk``; the keys of its parts for the
    merge tree (the first carries the panel's counts and moments)."""
    comb = (_rowpass_xp.combine, zk, mk, local, True,
            *_partials(dsk, name, a, i, groups, zk, local))
    n = int(a.shape[1])
    keys = []
    for g, cols in enumerate(groups):
        keys.append((f"{name}-p", i, g))
        dsk[keys[-1]] = (_rowpass_xp.part_t, comb, mk, n, g == 0, _starts(a, cols),
                         *_blocks(a, i, cols))
    return keys


def basis(dsk, name, a, i, groups, zk, mk, local):
    """The basis pass of split panel ``i``: its groups' ``Y_i^g`` tasks into ``dsk``; returns
    the task (not a key) that combines them into a :func:`._rowpass_xp.panel` result."""
    return (_rowpass_xp.combine, zk, mk, local, False,
            *_partials(dsk, name, a, i, groups, zk, local))


def rayleigh_ritz(dsk, name, a, i, groups, q, mk):
    """The Rayleigh-Ritz tasks of split panel ``i`` (``q``: a key or task giving ``Q_i``) into
    ``dsk``; the keys of its parts (the first carries ``Q_i`` for ``U``)."""
    n = int(a.shape[1])
    keys = []
    for g, cols in enumerate(groups):
        keys.append((f"{name}-p", i, g))
        dsk[keys[-1]] = (_rowpass_xp.part_h, q, mk, n, g == 0, _starts(a, cols),
                         *_blocks(a, i, cols))
    return keys
