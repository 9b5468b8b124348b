"""Row panels split across workers: the tasks of the row-panel randomized SVD / PCA
(:mod:`._randomized_dask`) for a panel whose blocks are held by several Dask workers.

A persisted input's blocks sit where the scheduler put them, and it places neighbouring root
tasks on alternate workers: on two workers most row panels of a grid chunked both ways have
blocks on both. One task per panel would then pull the missing blocks (GBs). Instead, each
worker's column blocks of such a panel (a *group*) get their own tasks, which the scheduler
runs where their blocks are (nothing is pinned: a task goes to the worker holding most of its
input's bytes, and a group's blocks outweigh every thin matrix it reads; see
:class:`Placement` for the first run on a cluster), so only thin matrices cross between
workers:

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
from .._tiles._graph_dask import block_owners

__all__ = ["Placement", "placement", "fused", "basis", "rayleigh_ritz"]


class Placement:
    """Where a persisted input's blocks are, by row panel: ``groups[i]`` the column block
    indices of panel ``i`` grouped by the worker holding them, ``workers[i]`` those workers.

    Nothing is pinned: a task runs where most of its input's bytes are, so a group's tasks run
    on its worker. (Loose worker restrictions as layer annotations would survive a worker
    leaving, but Dask's array optimization flattens the graph and drops them.) On a cluster
    that has not yet run these tasks the scheduler takes each to last 0.5 s
    (``distributed.scheduler.unknown-task-duration``) and may balance that estimated load by
    moving blocks; once their durations are known, blocks stay (docs/dask.md)."""

    def __init__(self, groups, workers):
        self.groups, self.workers = groups, workers

    @property
    def token(self):
        """The split panels' groups (``None`` where a panel is on one worker), or ``None``
        when no panel is split: what the graph's keys depend on."""
        split = tuple(g if len(g) > 1 else None for g in self.groups)
        return split if any(split) else None

    def split(self, i):
        """Panel ``i``'s column groups when its blocks are on several workers, else ``None``."""
        return self.groups[i] if len(self.groups[i]) > 1 else None


def placement(a):
    """The :class:`Placement` of ``a``'s blocks, or ``None`` when it is not known (no
    distributed client, an input not held in futures) or all of ``a`` is on one worker.

    A block held by several workers (replicas) goes to its panel's majority worker when that
    is one of them, else to the holder with the most of the panel; a block whose holder is
    unknown goes to the majority worker."""
    owners = block_owners(a)
    if owners is None:
        return None
    nr, nc = a.numblocks
    groups, workers = [], []
    for i in range(nr):
        holders = [owners.get((i, j)) or [] for j in range(nc)]
        count = Counter(w for ws in holders for w in ws)
        if not count:
            return None
        rank = sorted(count, key=lambda w: (-count[w], w))
        by: dict = {}
        for j, ws in enumerate(holders):
            w = min(ws, key=rank.index) if ws else rank[0]
            by.setdefault(w, []).append(j)
        groups.append(tuple(tuple(g) for g in by.values()))
        workers.append(tuple(by))
    if len({w for ws in workers for w in ws}) < 2:
        return None
    return Placement(tuple(groups), tuple(workers))


def _starts(a, cols):
    starts = np.concatenate([[0], np.cumsum(a.chunks[1])]).astype(int)
    return tuple(int(starts[j]) for j in cols)


def _blocks(a, i, cols):
    return [(a.name, i, j) for j in cols]


def _partials(dsk, name, a, i, place, zk, local):
    keys = []
    for g, cols in enumerate(place.groups[i]):
        keys.append((f"{name}-y", i, g))
        dsk[keys[-1]] = (_rowpass_xp.part_y, zk, _starts(a, cols), local, *_blocks(a, i, cols))
    return keys


def fused(dsk, name, a, i, place, zk, mk, local):
    """The fused pass's tasks of split panel ``i`` into ``dsk``; the keys of its parts for the
    merge tree (the first carries the panel's counts and moments)."""
    comb = (_rowpass_xp.combine, zk, mk, local, True,
            *_partials(dsk, name, a, i, place, zk, local))
    return _parts(dsk, name, a, i, place, _rowpass_xp.part_t, comb, mk)


def basis(dsk, name, a, i, place, zk, mk, local):
    """The basis pass of split panel ``i``: its groups' ``Y_i^g`` tasks into ``dsk``; returns
    the task (not a key) that combines them into a :func:`._rowpass_xp.panel` result."""
    return (_rowpass_xp.combine, zk, mk, local, False,
            *_partials(dsk, name, a, i, place, zk, local))


def rayleigh_ritz(dsk, name, a, i, place, q, mk):
    """The Rayleigh-Ritz tasks of split panel ``i`` (``q``: a key or task giving ``Q_i``) into
    ``dsk``; the keys of its parts (the first carries ``Q_i`` for ``U``)."""
    return _parts(dsk, name, a, i, place, _rowpass_xp.part_h, q, mk)


def _parts(dsk, name, a, i, place, part, head, mk):
    """One ``part(head, mk, n, first, starts, *blocks)`` task per column group of split panel
    ``i`` into ``dsk`` (on the worker holding the group); their keys, the first group's first."""
    n = int(a.shape[1])
    keys = []
    for g, cols in enumerate(place.groups[i]):
        keys.append((f"{name}-p", i, g))
        dsk[keys[-1]] = (part, head, mk, n, g == 0, _starts(a, cols), *_blocks(a, i, cols))
    return keys
