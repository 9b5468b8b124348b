"""What the Dask engines (``*_dask``) share: the lazy import of Dask, the tile kernels of the
chunks' array package, and building a :class:`dask.array.Array` from a graph layer.

Dask is imported inside functions only: ``import gpulinalg`` (and this module) work without it.
"""

import numpy as np

from ..._runtime import arrays as _arrays
from ..._runtime import validation as _v

__all__ = ["dask_array", "pair_tiled", "tiles_for", "work_dtype", "meta_of", "new_array",
           "tokenize", "persist", "compute", "block_owners"]


def dask_array():
    """``dask.array`` (imported on first use)."""
    import dask.array as da
    return da


def pair_tiled(a, b, a_square):
    """``(a, b)`` as Dask arrays when one of them is: the other wrapped (not copied), its rows
    chunked as the Dask one's rows (``a`` in square tiles where ``a_square``, else one column of
    blocks; ``b``'s columns in one block)."""
    from ..._runtime.validation import is_dask
    da = dask_array()
    if not is_dask(a):
        rows = b.chunks[0]
        a = da.from_array(a, chunks=(rows, rows) if a_square else (rows, -1), asarray=False)
    if not is_dask(b):
        b = da.from_array(b, chunks=(a.chunks[0],) + (-1,) * (b.ndim - 1), asarray=False)
    return a, b


def on_gpu(a):
    """Whether ``a``'s chunks are CuPy arrays (``False``: NumPy); ``TypeError`` for others."""
    kind = _arrays.kind_of(a._meta)
    if kind in (_arrays.Kind.NUMPY, _arrays.Kind.CUPY):
        return kind is _arrays.Kind.CUPY
    raise TypeError("Dask arrays need NumPy or CuPy chunks, got chunks of type "
                    f"{type(a._meta).__module__}.{type(a._meta).__name__}")


def tiles_for(a):
    """The shared tile kernels (``_tiles_host`` or ``_tiles_cuda``) of ``a``'s chunks."""
    if on_gpu(a):
        from . import _tiles_cuda
        return _tiles_cuda
    from . import _tiles_host
    return _tiles_host


def work_dtype(a):
    """The dtype the computation runs in (float32/64, complex64/128; integers -> float64)."""
    return _v.float_dtype(np.dtype(a.dtype))


def meta_of(a, ndim, dtype):
    """An empty array of ``ndim`` dimensions and ``dtype`` in the package of ``a``'s chunks."""
    return _v.namespace(a._meta).empty((0,) * ndim, dtype=dtype)


def tokenize(*args):
    from dask.base import tokenize as _tokenize
    return _tokenize(*args)


def new_array(name, dsk, deps, shape, chunks, meta):
    """A Dask array of the layer ``dsk`` (keys ``(name, i, ...)``) over the collections
    ``deps``."""
    from dask.array import Array
    from dask.highlevelgraph import HighLevelGraph
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=list(deps))
    return Array(graph, name, chunks=chunks, shape=shape, meta=meta)


def persist(x, enabled):
    """``x`` computed and held by the cluster (``persist`` then wait), when ``enabled``; ``x``
    as it is otherwise. Lets a multi-pass algorithm read its input once per pass. A tuple of
    collections is persisted in one call (tasks they share run once)."""
    if not enabled:
        return x
    import dask
    many = isinstance(x, tuple)
    out = dask.persist(*x) if many else (x.persist(),)
    try:
        from distributed import futures_of, wait
    except ImportError:  # the local schedulers persist synchronously
        return out if many else out[0]
    futures = [f for c in out for f in futures_of(c)]
    if futures:  # none under a local scheduler (no client to wait on)
        wait(futures)
    return out if many else out[0]


def compute(*xs):
    """``xs`` (Dask arrays) computed together, as arrays of the chunks' package: one
    ``dask.compute`` of one task that gathers every block (shared passes run once, and one
    gathering task instead of one finalizing task per array)."""
    import dask
    from dask.array.core import finalize
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph
    name = f"gpulinalg-gather-{tokenize(*xs)}"
    layer = {name: (tuple, [(finalize, x.__dask_keys__()) for x in xs])}
    graph = HighLevelGraph.from_collections(name, layer, dependencies=list(xs))
    return dask.compute(Delayed(name, graph))[0]


def block_owners(a, depth=4):
    """``{(i, j, ...): [worker, ...]}``: the workers holding each block of ``a`` (or, for a
    block not held itself, the blocks it is computed from, up to ``depth`` tasks back), when a
    synchronous distributed client holds some of ``a``'s graph in futures (a persisted input);
    ``None`` otherwise (no ``distributed``, no futures: nothing is known of placement)."""
    try:
        from distributed import futures_of
    except ImportError:
        return None
    futures = futures_of(a)
    if not futures or getattr(futures[0].client, "asynchronous", False):
        return None
    held = {k: sorted(v) for k, v in futures[0].client.who_has(futures).items()}
    graph = None
    out = {}
    for key in _flat_keys(a.__dask_keys__()):
        ws = held.get(key)
        if ws is None:
            graph = dict(a.__dask_graph__()) if graph is None else graph
            ws = _holders(graph, key, held, depth)
        out[key[1:]] = ws
    return out


def _flat_keys(keys):
    for k in keys:
        if isinstance(k, list):
            yield from _flat_keys(k)
        else:
            yield k


def _holders(graph, key, held, depth):
    from dask.core import get_dependencies
    found, level, seen = set(), [key], {key}
    for _ in range(depth):
        nxt = []
        for k in level:
            for d in get_dependencies(graph, k) if k in graph else ():
                if d in held:
                    found.update(held[d])
                elif d not in seen:
                    seen.add(d)
                    nxt.append(d)
        level = nxt
    return sorted(found)
