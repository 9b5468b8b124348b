"""What one task of a Dask engine (``*_dask``) does to its blocks, written once for NumPy and
CuPy blocks: each function finds the array module from its blocks (``namespace``), so a CuPy
block stays on the worker's GPU and a NumPy block on its CPU; nothing is converted.

The backend's own kernels (QR, Cholesky, triangular solves, the Gaussian generator) come in as
arguments, from :mod:`._tiles_host` or :mod:`._tiles_cuda`, chosen by the graph builder.
"""

import numpy as np

from ..._runtime.errors import NotPositiveDefiniteError
from ..._runtime.validation import namespace
from .._checks import hermitian

__all__ = ["complex_gaussian", "r_only", "node_qr", "root_qr", "down", "column_peaks",
           "peaks_phase", "scale_columns", "matmul_small", "zeros", "logdiag",
           "solve_step", "total", "diag_scale", "potrf_retry", "largest",
           "hermitian", "sketch_moments", "sum_first", "combine_moments", "moments_mean",
           "moments_total", "cholqr_inverse", "mat_part", "sum_times", "rmat_part",
           "add_pairs", "rmat_finish", "stack_panel", "factor_panel", "solve_block",
           "update_block", "rows_of"]


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


def r_only(node):
    """``(None, R)`` of a TSQR node's ``(Q, R, ...)``: what its parent reads (the parent's
    worker then fetches ``R``, never ``Q``)."""
    return None, node[1]


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


def largest(*steps):
    """The largest jitter of the ``(panel, L, j)`` steps of :func:`factor_panel` (0.0 for
    none)."""
    return np.float64(max([float(p[2]) for p in steps], default=0.0))


# -- blocked Cholesky by blocks of tile columns: each task writes only the block it owns -------

def stack_panel(tiles):
    """The C-ordered block of consecutive tiles of one column, stacked (one copy)."""
    xp = namespace(tiles[0])
    out = xp.empty((sum(int(t.shape[0]) for t in tiles), int(tiles[0].shape[1])),
                   dtype=tiles[0].dtype)
    row = 0
    for t in tiles:
        out[row:row + t.shape[0]] = t
        row += t.shape[0]
    return out


def factor_panel(potrf_fn, trsm_right_fn, panel, offset, scale=None, start=0.0, tries=0):
    """Step ``k`` on the block of its column that starts at the diagonal tile: ``(panel, L_kk,
    j)``, the diagonal tile's lower Cholesky factor (C order; with ``scale``, of the tile plus
    ``j I`` as :func:`potrf_retry`) and the block's tiles below it solved in place, ``X <- X
    L_kk^-H`` (one TRSM)."""
    w = panel.shape[1]
    top = panel[:w]
    if scale is None:
        l, j = potrf_fn(top, offset), 0.0
    else:
        l, j = potrf_retry(potrf_fn, top, offset, scale, start, tries)
    if not l.flags.c_contiguous:
        l = l.copy(order="C")
    if panel.shape[0] > w and w:
        trsm_right_fn(l, panel[w:])
    return panel, l, np.float64(j)


def solve_block(trsm_right_fn, block, step):
    """A block of tiles below the diagonal of step ``k``'s column, solved in place with the
    factor of step ``k`` (:func:`factor_panel`'s ``L_kk``): ``X <- X L_kk^-H``."""
    trsm_right_fn(step[1], block)
    return block


def update_block(gemm_fn, herk_fn, block, a_src, a_start, b_src, b_start, diag):
    """The update of step ``k`` applied in place to a block of column ``j``: ``block -= A
    B^H``, ``A`` the rows of step ``k``'s factored block ``a_src`` from ``a_start`` (as many as
    ``block`` has), ``B`` tile row ``j`` of column ``k`` (``b_src`` from ``b_start``). ``diag``:
    the block starts at column ``j``'s diagonal tile, whose lower triangle takes ``-= B B^H``."""
    w = block.shape[1]
    a = a_src[a_start:a_start + block.shape[0]]
    b = b_src[b_start:b_start + w]
    if not (w and b.shape[1]):
        return block
    if diag:
        herk_fn(block[:w], b)
        if block.shape[0] > w:
            gemm_fn(block[w:], a[w:], b)
    else:
        gemm_fn(block, a, b)
    return block


def rows_of(block, start, stop):
    """Rows ``start:stop`` of a factored block: one tile of ``L`` (a C-contiguous view)."""
    return block[start:stop]


# -- randomized PCA: the moments from the first sketch pass, the Cholesky-QR normalizer --------

def _hi(dtype):
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def sketch_moments(block, omega):
    """``(block @ omega, (rows, mean, m2))`` from one read of ``block``: the column means in
    double precision and the column sums of ``|x - mean|^2`` (float64), centred on the
    block's own mean (``omega=None``: no product)."""
    xp = namespace(block)
    rows = int(block.shape[0])
    mean = xp.sum(block, axis=0, dtype=_hi(block.dtype)) / max(rows, 1)
    c = mean.astype(block.dtype)
    d = block - c[None, :]
    if d.dtype.kind == "c":
        sq = d.real * d.real + d.imag * d.imag
    else:
        sq = xp.multiply(d, d, out=d)
    shift = mean - c  # the sum of squares about c, moved to the exact mean
    m2 = xp.sum(sq, axis=0, dtype=np.float64) - rows * (shift * xp.conj(shift)).real
    part = None if omega is None else block @ omega
    return part, (rows, mean, m2)


def sum_first(*pairs):
    """The sum of the first entries of ``pairs`` (one row block's share of a product)."""
    out = pairs[0][0]
    for p in pairs[1:]:
        out = out + p[0]
    return out


def combine_moments(*pairs):
    """``(rows, mean, m2)`` of a column block from its row blocks' :func:`sketch_moments`
    (Chan, Golub & LeVeque's pairwise update)."""
    moms = [p[1] for p in pairs]
    total = sum(r for r, _, _ in moms)
    mean0 = moms[0][1]
    if total == 0:
        return 0, mean0 * 0, moms[0][2] * 0
    mean = sum(r * mu for r, mu, _ in moms) / total
    m2 = moms[0][2] * 0
    for r, mu, s in moms:
        dev = mu - mean
        m2 = m2 + s + r * (dev * namespace(dev).conj(dev)).real
    return total, mean, m2


def moments_mean(moments, dtype):
    """The column means of :func:`combine_moments` in ``dtype``."""
    return moments[1].astype(dtype)


def moments_total(rows, *moments):
    """The sum of the column variances (``ddof=1``) of every column block: a 0-d float64."""
    out = moments[0][2].sum() if moments else np.float64(0.0)
    for mom in moments[1:]:
        out = out + mom[2].sum()
    return out / max(rows - 1, 1)


def _to_host(x):
    return np.asarray(x) if isinstance(x, np.ndarray) else x.get()


def cholqr_inverse(gram, rows, dtype):
    """``R^-1`` (upper triangular, ``dtype``, in ``gram``'s package) with
    ``R^H R = gram + s I``: the shifted Cholesky QR of a thin matrix of ``rows`` rows whose
    Gram matrix is ``gram`` (double precision), ``s = 11 (rows l + l (l + 1)) eps tr(gram)``
    (Fukaya et al. 2020, as the single-GPU normalizer). Computed on the host (``l x l``); a
    zero or non-finite ``gram`` gives the identity (the sketch carries its NaNs on)."""
    g = _to_host(gram).astype(_hi(dtype))
    l = g.shape[0]
    scale = float(np.trace(g).real) if l else 0.0
    rinv = np.eye(l, dtype=g.dtype)
    if l and np.isfinite(g).all() and scale > 0:
        shift = 11.0 * (rows * l + l * (l + 1)) * np.finfo(g.dtype).eps * scale
        try:
            r = np.linalg.cholesky(g + shift * np.eye(l)).conj().T
            rinv = np.linalg.solve(r, np.eye(l, dtype=g.dtype))
        except np.linalg.LinAlgError:  # a Gram matrix past double precision: scale only
            rinv = np.diag(1 / np.sqrt(np.maximum(np.diagonal(g).real, shift))).astype(g.dtype)
    out = np.ascontiguousarray(rinv.astype(dtype))
    return out if isinstance(gram, np.ndarray) and type(gram) is np.ndarray else \
        namespace(gram).asarray(out)


def mat_part(block, z, mu, rz):
    """``(block - 1 mu^T) z rz`` as ``block @ z - 1 (mu^T z)`` (``mu``/``rz`` may be None)."""
    y = block @ z
    if mu is not None:
        y = y - (mu @ z)[None, :]
    return y if rz is None else y @ rz


def sum_times(rz, *parts):
    """``(sum of parts) @ rz`` (``rz`` may be None)."""
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out if rz is None else out @ rz


def rmat_part(block, q, mu, shift, gram):
    """``((block - 1 mu^T)^H (q - 1 shift), G)`` with ``G = (q - 1 shift)^H (q - 1 shift)``
    in double precision when ``gram`` (else ``None``); conjugates only the thin block."""
    xp = namespace(block)
    if shift is not None:
        q = q - shift[None, :]
    if block.dtype.kind == "c":
        t = hermitian(hermitian(q) @ block)
    else:
        t = block.T @ q
    if mu is not None:
        t = t - xp.conj(mu)[:, None] * q.sum(axis=0)[None, :]
    g = None
    if gram:
        qh = q.astype(_hi(q.dtype))
        g = hermitian(qh) @ qh
    return t, g


def add_pairs(*pairs):
    """The entrywise sum of :func:`rmat_part` pairs (``None`` stays ``None``)."""
    t, g = pairs[0]
    for pt, pg in pairs[1:]:
        t = t + pt
        g = None if g is None else g + pg
    return t, g


def rmat_finish(pair, gram_pair, rows, dtype):
    """The summed product of ``pair``, times ``R^-1`` of :func:`cholqr_inverse` from the Gram
    matrix of ``gram_pair`` (when given)."""
    if gram_pair is None:
        return pair[0]
    return pair[0] @ cholqr_inverse(gram_pair[1], rows, dtype)
