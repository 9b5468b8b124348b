"""The row permutation that ``getrf``'s pivots make, on the host.

Pivots here are SciPy's: 0-based, ``piv[i]`` is the row swapped with row ``i`` at step ``i``.
"""

import numpy as np

__all__ = ["row_permutation"]


def row_permutation(piv, m=None):
    """``perm`` (int64, ``(..., m)``) with ``(P A)[..., i, :] == A[..., perm[i], :]`` for the
    host pivots ``piv`` (``(..., k)``) applied in order to ``m`` rows (default ``k``).

    A few long pivot vectors go through LAPACK's ``laswp`` (one C loop each); many short ones
    through one loop over the ``k`` steps, each a swap vectorized over the batch.

    >>> row_permutation(np.array([2, 2, 2])).tolist()
    [2, 0, 1]
    """
    piv = np.asarray(piv).astype(np.int64, copy=False)
    k = piv.shape[-1]
    m = k if m is None else m
    batch = piv.shape[:-1]
    nb = int(np.prod(batch, dtype=np.int64))
    if nb and nb * 8 <= k:
        from scipy.linalg import lapack  # a Python loop of k steps took 18 ms at k = 8192
        rows = np.arange(m, dtype=np.float64)[:, None]
        out = [lapack.dlaswp(rows, p.astype(np.int32))[:, 0] for p in piv.reshape(-1, k)]
        return np.stack(out).astype(np.int64).reshape(batch + (m,))
    perm = np.broadcast_to(np.arange(m, dtype=np.int64), batch + (m,)).copy()
    p2, v2 = perm.reshape(-1, m), piv.reshape(-1, k)
    at = np.arange(len(p2))
    for i in range(k):
        j = v2[:, i]
        a, b = p2[:, i].copy(), p2[at, j]
        p2[:, i], p2[at, j] = b, a
    return perm
