"""What one task of a Dask engine (``*_dask``) does to its blocks, written once for NumPy and
CuPy blocks: each function finds the array module from its blocks (``namespace``), so a CuPy
block stays on the worker's GPU and a NumPy block on its CPU; nothing is converted.

The backend's own kernels (QR, Cholesky, triangular solves, the Gaussian generator) come in as
arguments, from :mod:`._tiles_host` or :mod:`._tiles_cuda`, chosen by the graph builder.
"""

import numpy as np

from .._runtime.errors import NotPositiveDefiniteError
from .._runtime.validation import namespace
from ._sketch_xp import hermitian

__all__ = ["complex_gaussian", "node_qr", "root_qr", "down", "column_peaks", "peaks_phase",
           "scale_columns", "matmul_small", "update", "right_trsm", "zeros", "logdiag",
           "solve_step", "total", "diag_scale", "potrf_retry", "largest",
           "hermitian"]


def complex_gaussian(gaussian_real, shape, dtype, seed):
    """``gaussian_real`` for a real ``dtype``; a circular unit-variance complex block from two
    real draws (as :func:`._sketch_xp.gaussian`) for a complex one."""
    dtype = np.dtype(dtype)
    if dtype.kind != "c":
        return gaussian_real(shape, dtype, seed)
    real = gaussian_real((2, *shape), dtype.char.lower(), seed)
    return ((real[0] + 1j * real[1]) * np.sqrt(0.5)).astype(dtype)


def _concat_r(children):
    rs = [c[1] for c in children]
    return rs[0] if len(rs) == 1 else namespace(rs[0]).concatenate(rs, axis=0)


def node_qr(qr_fn, *children):
    """QR of the R factors of ``children`` (``(Q, R, ...)`` tuples) stacked: an inner node of
    the TSQR reduction tree."""
    return qr_fn(_concat_r(children))


def _unit_phase(xp, x):
    """``x / |x|`` (1 where ``x`` is 0): a sign for real ``x``, a unit phase for complex."""
    mag = xp.abs(x)
    return xp.where(mag > 0, x / xp.where(mag > 0, mag, 1), 1).astype(x.dtype)


def root_qr(qr_fn, compute_svd, *children):
    """The root of the TSQR tree: ``(W, R)`` with ``R``'s diagonal made real and non-negative,
    or with ``compute_svd`` ``(W, S, Vh)`` with the largest-magnitude entry of each row of
    ``Vh`` real and positive; ``W`` is what the root's children multiply their ``Q`` by."""
    q, r = qr_fn(_concat_r(children))
    xp = namespace(r)
    k = r.shape[0]
    if not compute_svd:
        phase = _unit_phase(xp, xp.diagonal(r)[:k]) if k else xp.ones(0, r.dtype)
        return q * phase[None, :], r * xp.conj(phase)[:, None]
    if k == 0:
        return q, xp.zeros(0, r.real.dtype), r
    u, s, vh = xp.linalg.svd(r, full_matrices=False)
    idx = xp.argmax(xp.abs(vh), axis=1)
    phase = _unit_phase(xp, vh[xp.arange(k), idx])
    return q @ (u * phase[None, :]), s, vh * xp.conj(phase)[:, None]


def down(node, w, start, stop):
    """``Q_node @ w[start:stop]``: a node's share of the orthonormal factor, passed down the
    tree (``node`` is its ``(Q, R)`` tuple, ``w`` its parent's share)."""
    return node[0] @ w[start:stop]


def column_peaks(block, k, rows=False):
    """``(2, k)`` array: the largest magnitude in each of the first ``k`` columns of ``block``
    (with ``rows``: of its first ``k`` rows) and the entry that has it (the first such), for a
    reduction across blocks."""
    xp = namespace(block)
    cols = block[:k].T if rows else block[:, :k]
    out = xp.zeros((2, k), dtype=block.dtype)
    if cols.shape[0] == 0:
        out[0] = -1  # an empty block never wins
        return out
    idx = xp.argmax(xp.abs(cols), axis=0)
    val = cols[idx, xp.arange(k)]
    out[0], out[1] = xp.abs(val), val
    return out


def peaks_phase(*peaks):
    """The unit phase of the largest-magnitude entry of each column, from the per-block
    :func:`column_peaks` in row order (ties: the first block wins, as ``argmax``)."""
    xp = namespace(peaks[0])
    stacked = xp.stack([p[0].real for p in peaks])  # (blocks, k)
    vals = xp.stack([p[1] for p in peaks])
    win = xp.argmax(stacked, axis=0)
    k = vals.shape[1]
    return _unit_phase(xp, vals[win, xp.arange(k)]) if k else vals[0]


def scale_columns(block, phase, conj):
    """``block * phase`` along its columns (``conj(phase)`` with ``conj``)."""
    xp = namespace(block)
    return block * (xp.conj(phase) if conj else phase)[None, :]


def matmul_small(block, small, phase=None):
    """``block @ small`` (``small``'s columns scaled by ``phase`` first, when given)."""
    if phase is not None:
        small = small * phase[None, :]
    return block @ small


def update(c, li, lj):
    """``c - li @ lj^H``: the trailing update of a Cholesky tile (SYRK when ``li is lj``)."""
    return c - li @ hermitian(lj)


def right_trsm(trsm_fn, l, a):
    """``X`` with ``X @ l^H = a``, i.e. ``(l^-1 a^H)^H``, for a lower triangular tile ``l``."""
    return hermitian(trsm_fn(l, namespace(a).ascontiguousarray(hermitian(a)), 0))


def zeros(like, shape):
    """A zero tile of ``shape`` in the array module and dtype of ``like``."""
    return namespace(like).zeros(shape, dtype=like.dtype)


def logdiag(l):
    """``2 * sum(log|diag(l)|)`` of a diagonal Cholesky tile, as a 0-d array of its module."""
    xp = namespace(l)
    d = xp.diagonal(l)
    return 2 * xp.sum(xp.log(xp.abs(d)))


def solve_step(trsm_fn, trans, l_diag, b, ls, ys):
    """One block row of a blocked triangular solve: ``trsm(l_diag, b - sum(op(ls[j]) @ ys[j]))``
    with ``op`` the identity (``trans=0``, forward) or ``^H`` (``trans=2``, backward)."""
    for lj, yj in zip(ls, ys):
        b = b - (hermitian(lj) if trans else lj) @ yj
    return trsm_fn(l_diag, b, trans)


def total(*parts):
    """The sum of 0-d arrays (one per diagonal tile)."""
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def diag_scale(*diag_tiles):
    """``mean(|diag|)`` over the diagonal tiles of a matrix, as a Python float (1.0 when it is
    0, NaN or the matrix is empty): the scale of the jitter schedule."""
    total, n = 0.0, 0
    for t in diag_tiles:
        d = namespace(t).diagonal(t)
        total += float(namespace(t).abs(d).sum())
        n += d.shape[0]
    scale = total / n if n else 1.0
    return scale if scale > 0 and np.isfinite(scale) else 1.0


def potrf_retry(potrf_fn, tile, offset, scale, start, tries):
    """``(L, j)``: the lower Cholesky factor of ``tile + j I`` for the first ``j`` of
    ``0, start * scale * 10**i`` (``i < tries``) that works, as the single-GPU jitter schedule
    (:func:`gpulinalg.gp._solve_xp.jitter_schedule`) but for this one (Schur-updated) diagonal
    tile; raises :class:`NotPositiveDefiniteError` (naming the leading minor of the whole
    matrix) when every try fails."""
    shifts = [0.0] + [start * scale * 10.0 ** i for i in range(tries)]
    failure = None
    for j in shifts:
        t = tile
        if j:
            t = tile.copy()
            idx = namespace(t).arange(t.shape[0])
            t[idx, idx] += j
        try:
            return potrf_fn(t, offset), j
        except NotPositiveDefiniteError as exc:
            failure = exc
    raise NotPositiveDefiniteError(
        failure.minor, message=f"matrix is not positive definite even with jitter "
        f"{shifts[-1]:.3g} on the diagonal of the tile at row {offset} (leading minor "
        f"{failure.minor} failed); increase the noise term")


def largest(*pairs):
    """The largest jitter of the ``(L, j)`` pairs of :func:`potrf_retry` (0.0 for none)."""
    return np.float64(max([float(p[1]) for p in pairs], default=0.0))
