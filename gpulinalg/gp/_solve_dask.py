"""The Dask route of :func:`gpulinalg.gp.exact_gp_solve`: a lazy graph on the user's cluster.

The blocked Cholesky, its solves and log-determinant are decomp's Dask engine
(:mod:`gpulinalg.decomp.cholesky._cholesky_dask`); this module adds a fixed jitter to the diagonal
tiles and the Gaussian log marginal likelihood as lazy Dask expressions. Nothing is computed here.

Jitter on Dask. A number adds exactly that to the diagonal tiles; ``None`` adds none.
``"auto"`` retries inside the graph
(:func:`gpulinalg.decomp.cholesky._cholesky_dask.cholesky_jitter`): only a diagonal tile whose POTRF
fails (after the updates of the steps before it) is shifted, by the first of
``JITTER_START * eps * mean|diag(K)| * 10**i`` (``i < JITTER_TRIES``, the single-GPU schedule) that
lets it factor, and only that task is re-run; the factor is then of ``K + D`` with ``D`` diagonal
and constant on each tile's rows (0 on tiles that factored as they were), ``logdet`` and the
likelihood are those of ``K + D``, and ``jitter`` is a lazy 0-d array holding the largest shift.
Refactoring the whole matrix with one uniform jitter, as the single-GPU path does, would recompute
every step before the failing tile: the price of computing the factorization once more per retry.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime.validation import namespace
from ..decomp._engines import cholesky_dask as _cholesky_dask
from ._results import GPSolveResult
from ._solve_xp import JITTER_START, JITTER_TRIES, check_jitter

__all__ = ["exact_gp_solve"]

_LOG_2PI = math.log(2 * math.pi)


def exact_gp_solve(K: Any, y: Any, *, jitter: float | str | None) -> GPSolveResult:
    """``GPSolveResult`` of lazy Dask arrays for a Dask ``K`` (or ``y``): ``alpha`` and ``L``
    lazy arrays, ``logdet`` and ``log_marginal_likelihood`` lazy 0-d arrays, ``jitter`` the
    float added or, for ``"auto"``, a lazy 0-d array (see the module's docstring). A ``K`` that
    no tried jitter makes positive definite raises :class:`gpulinalg.NotPositiveDefiniteError`
    when the result is computed."""
    import dask.array as da

    if not isinstance(K, da.Array):
        K = da.from_array(_arrays.to_kind(K, _arrays.kind_of(y._meta)),
                          chunks=(y.chunks[0], y.chunks[0]), asarray=False)
    if not isinstance(y, da.Array):
        y = da.from_array(_arrays.to_kind(y, _arrays.kind_of(K._meta)),
                          chunks=(K.chunks[0],) + tuple(-1 for _ in y.shape[1:]), asarray=False)
    if _arrays.kind_of(K._meta) is not _arrays.kind_of(y._meta):
        raise TypeError("K and y are Dask arrays with chunks of different packages "
                        f"({_arrays.kind_of(K._meta).value}, {_arrays.kind_of(y._meta).value}); "
                        "convert one (map_blocks)")
    L, used = factor(K, jitter)
    alpha = _cholesky_dask.cho_solve((L, True), y)
    logdet = _cholesky_dask.logdet_cholesky((L, True))
    n = y.shape[0]
    t = y.shape[1] if y.ndim == 2 else 1
    y2, a2 = y.reshape(n, t), alpha.reshape(n, t)
    lml = -0.5 * (y2 * a2).sum() - 0.5 * t * logdet - 0.5 * t * n * _LOG_2PI
    return GPSolveResult(alpha, L, logdet, lml, used)


def factor(K: Any, jitter: float | str | None) -> tuple[Any, Any]:
    """``(L, jitter used)`` of the Dask ``K`` (tiled alike along both axes): a float for a
    fixed jitter (or none), a lazy 0-d array for ``"auto"``."""
    jitter = check_jitter(jitter)
    if jitter == "auto":
        eps = float(np.finfo(_cholesky_dask.work_dtype(K)).eps)
        return _cholesky_dask.cholesky_jitter(K, JITTER_START * eps, JITTER_TRIES)
    used = float(jitter)
    if used:
        K = K.map_blocks(_add_to_diagonal, used, dtype=K.dtype, meta=K._meta)
    return _cholesky_dask.cholesky(K, lower=True), used


def _add_to_diagonal(block: Any, value: float, block_info: Any = None) -> Any:
    """``block`` plus ``value`` on the diagonal of ``K`` (diagonal tiles only; K is tiled alike
    along both axes, so a diagonal tile is square and its diagonal is K's)."""
    if block_info is None:
        return block
    i, j = block_info[0]["chunk-location"]
    if i != j:
        return block
    out = block.copy()
    idx = namespace(out).arange(min(out.shape))
    out[idx, idx] += value
    return out
