"""What one task of the row-panel randomized SVD on Dask (:mod:`._randomized_dask`) does,
written once for NumPy and CuPy blocks (each function finds the array module from its blocks).

A *row panel* is one row of blocks of ``A`` (all its column chunks): one task reads it, forms
``Y_i = (A_i - 1 mu^T) Z`` and, in a fused pass, ``T_i = (A_i - 1 mu^T)^H Y_i`` straight away
(the panel's share of ``A^H A Z``), with the column sums ``1^T Y_i`` in double precision where a
centring needs them; a tree of :func:`merge` sums the panels' shares; one small task
(:func:`power_root`, :func:`basis_root`, :func:`final_root`) turns the sums into the next thin
matrix. Only ``n x l`` and ``l x l`` matrices leave a panel's worker: the panel-sized ``Y_i``
and ``Q_i`` of the basis pass (whose orthonormal basis is a TSQR of ``Y``: :func:`local_qr` per
panel, :func:`stack_qr` of the stacked ``R_i``, :func:`basis_block`) stay there for the next
task of the same panel, and the reductions read the panels' results through :func:`light`.

How a task walks its panel is the backend's choice, made by the graph builder and passed in:
the rows per step of a fused task and of :func:`basis_block` (``step``; ``None``: the whole
panel at once) and the panel QR of the basis pass (``qr_fn``), from :mod:`._rowpass_host`
(NumPy: cache-sized row steps, a TSQR of steps in place by LAPACK) or :mod:`._rowpass_cuda`
(CuPy: whole panels). The functions here never ask which array module they were given.

PCA's first pass does not know the column means yet: each panel centres on its own means
(``local``) and :func:`merge` moves the shares to the merged means (Chan, Golub & LeVeque's
update, extended to the products: with ``d = mu_G - mu_x`` and ``w = d^T Z``,
``Y -> Y - 1 w``, ``T -> T - conj(d) c + rows conj(d) w``, ``c -> c - rows w``; a locally
centred panel's column sums vanish, which removes the ``A^H 1`` term).

Column sums of a tall block (the moments, ``1^T Y_i``) go through :func:`colsum`: row groups of
about ``sqrt(rows)`` first, then the groups. A GPU reduction over the leading axis of a C-ordered
``rows x n`` array gets at most ``n / 32`` thread blocks, each thread walking a whole column
(CuPy: 2 blocks for ``n = 20``, milliseconds for a 250k-row panel); the grouped form has
``rows / 32`` of them and reads at memory speed.
"""

import numpy as np

from ..._runtime.validation import namespace
from ._sketch_xp import hermitian

__all__ = ["colsum", "omega", "panel", "row_steps", "panel_h", "light", "merge", "part_y",
           "combine", "part_t", "part_h", "power_root", "basis_root", "local_qr", "stack_qr",
           "basis_block", "final_root", "take_y", "u_block", "vh_block", "item", "cast_slice",
           "variances"]


def _hi(dtype):
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def omega(gaussian, sizes, l, dtype, seeds):
    """The Gaussian ``(sum(sizes), l)`` matrix, block ``j`` (``sizes[j]`` rows) drawn by
    ``gaussian`` from ``seeds[j]`` (the numbers of the per-block sketch of the other paths)."""
    parts = [gaussian((int(r), l), dtype, int(s)) for r, s in zip(sizes, seeds)]
    return parts[0] if len(parts) == 1 else namespace(parts[0]).concatenate(parts, axis=0)


def colsum(a, dtype=None):
    """The column sums ``(n,)`` of the 2-D ``a`` (rows, n), accumulated in ``dtype`` (default
    ``a``'s): a C-ordered ``a`` is summed in row groups of about ``sqrt(rows)`` (a view
    ``(rows // g, g, n)``), then over the groups and the leftover rows."""
    xp = namespace(a)
    rows, n = (int(v) for v in a.shape)
    g = 1 << ((rows - 1).bit_length() + 1) // 2 if rows > 1 else 1  # >= sqrt(rows)
    if rows < 4 * g or not a.flags.c_contiguous:  # a few rows, or no cheap view
        return xp.sum(a, axis=0, dtype=dtype)
    full = rows // g * g
    out = xp.sum(xp.sum(a[:full].reshape(full // g, g, n), axis=1, dtype=dtype), axis=0)
    return out if full == rows else out + xp.sum(a[full:], axis=0, dtype=dtype)


def _column_moments(xp, block):
    """``(mean, m2)`` of the columns of ``block`` in double precision (centred on the mean)."""
    rows = int(block.shape[0])
    mean = colsum(block, _hi(block.dtype)) / max(rows, 1)
    c = mean.astype(block.dtype)
    d = block - c[None, :]
    sq = d.real * d.real + d.imag * d.imag if d.dtype.kind == "c" else xp.multiply(d, d, out=d)
    shift = mean - c
    return mean, colsum(sq, np.float64) - rows * (shift * xp.conj(shift)).real


def panel(z, mean, sizes, local, fused, *blocks, step=None):
    """One row panel (``blocks``: its column chunks, ``sizes`` their widths). ``z`` (n, l):
    the thin right factor; ``mean`` (n,) double or ``None``; ``local``: centre on the panel's
    own column means (PCA's first pass; ``mean`` is then ``None``); ``fused``: also form
    ``T_i``, :func:`row_steps` of ``step`` rows at a time (``None``: the whole panel; several
    steps sum ``T_i`` in double precision, in place). Returns a dict: ``rows``, ``y`` (rows, l;
    not kept by a fused pass), ``c`` (l,) double where a centring needs it (else ``None``),
    ``t`` (n, l) or ``None``, and with ``local`` the panel's ``mean`` and ``m2`` (n,)."""
    xp = namespace(blocks[0])
    dtype = blocks[0].dtype
    hi = _hi(dtype)
    rows = int(blocks[0].shape[0])
    out = {"rows": rows, "c": None, "t": None}
    if local:
        mom = [_column_moments(xp, b) for b in blocks]
        mean = xp.concatenate([m for m, _ in mom]) if len(mom) > 1 else mom[0][0]
        out["mean"] = mean
        out["m2"] = xp.concatenate([s for _, s in mom]) if len(mom) > 1 else mom[0][1]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    shift = None if mean is None else (mean @ z.astype(hi)).astype(dtype)
    if not fused:
        out["y"] = _centred_y(blocks, z, starts, shift)
        return out
    t = c = None
    steps = row_steps(rows, step)
    for r0, r1 in steps:
        part = [b[r0:r1] for b in blocks] if r1 - r0 < rows else list(blocks)
        y = _centred_y(part, z, starts, shift)
        if shift is not None:
            cy = colsum(y, hi)
            c = cy if c is None else c + cy
        ty = _stacked_t(xp, y, part, starts, dtype)
        if t is None:
            t = ty.astype(hi) if len(steps) > 1 else ty
        else:  # in place: a new large array per step costs more than the step saves
            t += ty
    if shift is not None:
        t = t.astype(hi) - xp.conj(mean)[:, None] * c[None, :]
    out["c"], out["t"] = c, t
    return out


def row_steps(rows, step=None):
    """``[(start, stop)]``: the row steps of ``step`` rows of a panel of ``rows`` rows (the
    last one shorter); one step, the whole panel, when ``step`` is ``None``.

    >>> row_steps(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    >>> row_steps(10), row_steps(0, 4)
    ([(0, 10)], [(0, 0)])
    """
    if step is None or rows == 0:
        return [(0, rows)]
    size = max(int(step), 1)
    return [(r, min(r + size, rows)) for r in range(0, rows, size)]


def _centred_y(blocks, z, starts, shift):
    """``sum_j B_j Z_j - 1 shift`` for the column blocks ``blocks`` of (a step of) a panel."""
    y = None
    for j, b in enumerate(blocks):
        p = b @ z[starts[j]:starts[j + 1]]
        y = p if y is None else y + p  # noqa: PLR6104 (y may be a view of z for one chunk)
    return y if shift is None else y - shift[None, :]


def _stacked_t(xp, y, blocks, starts, dtype):
    """``[B_0 B_1 ...]^H y`` for the column blocks ``blocks`` of one row panel (``starts``:
    their first columns): one product per block into its rows of the (n, c) result."""
    if len(blocks) == 1:
        return hermitian(hermitian(y) @ blocks[0]) if dtype.kind == "c" else blocks[0].T @ y
    t = xp.empty((int(starts[-1]), int(y.shape[1])), dtype)
    for j, b in enumerate(blocks):
        t[starts[j]:starts[j + 1]] = hermitian(hermitian(y) @ b) if dtype.kind == "c" \
            else b.T @ y
    return t


def panel_h(q, mean, sizes, *blocks):
    """The Rayleigh-Ritz pass of one row panel: ``T_i = (A_i - 1 mu^T)^H Q_i`` (n, c) with
    ``Q_i`` the panel's rows of the orthonormal basis (:func:`basis_block`, in the blocks'
    dtype): a dict as :func:`panel`'s with ``t``, and ``q`` (``Q_i``, for :func:`u_block`)."""
    xp = namespace(blocks[0])
    dtype = blocks[0].dtype
    hi = _hi(dtype)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    t = _stacked_t(xp, q, blocks, starts, dtype)
    if mean is not None:
        t = t.astype(hi) - xp.conj(mean)[:, None] * colsum(q, hi)[None, :]
    return {"rows": int(blocks[0].shape[0]), "t": t, "c": None, "q": q}


def light(part):
    """``part`` (a panel task's dict) without its panel-sized entries (``y``, ``q``): what a
    reduction over the panels reads, so that only thin matrices move to the worker that
    reduces (the panel-sized ones stay where their panel is, for the tasks that use them)."""
    return {k: v for k, v in part.items() if k not in ("y", "q")}


def merge(z, *parts):
    """The sum of :func:`panel` results (and of merges), with the locally centred shares moved
    to the merged column means when they carry ``mean`` (``z`` is then the pass's right
    factor). ``t`` is summed in double precision; ``y`` is not kept. Parts of a split panel
    (:func:`part_t`, :func:`part_h`) add their ``pieces`` (rows of ``t``) where they belong;
    the panel's first part carries its ``rows``, ``c`` and moments."""
    rows = sum(p["rows"] for p in parts)
    out = {"rows": rows, "t": None, "c": None}
    if any("mean" in p for p in parts):
        first = next(p for p in parts if "mean" in p)
        xp = namespace(first["mean"])
        mu = sum(p["rows"] * p["mean"] for p in parts if "mean" in p) / max(rows, 1)
        zh = None if z is None else z.astype(_hi(z.dtype))
        c = t = m2 = None
        for p in parts:
            if "mean" not in p:  # a merge of pieces alone: no moments, its t as it is
                if p["t"] is not None:
                    t = p["t"].astype(_hi(p["t"].dtype)) if t is None else t + p["t"]
                continue
            d = mu - p["mean"]
            r = p["rows"]
            pm = p["m2"] + r * (d * xp.conj(d)).real
            m2 = pm if m2 is None else m2 + pm
            if p["t"] is not None:
                w = d @ zh
                pc = p["c"] - r * w
                pt = p["t"].astype(zh.dtype) - xp.outer(xp.conj(d), p["c"]) \
                    + r * xp.outer(xp.conj(d), w)
                c, t = (pc, pt) if t is None else (c + pc, t + pt)
            elif "pieces" in p and p["c"] is not None:  # a split panel: t is in its pieces
                w = d @ zh
                pc = p["c"] - r * w
                pt = r * xp.outer(xp.conj(d), w) - xp.outer(xp.conj(d), p["c"])
                c = pc if c is None else c + pc
                t = pt if t is None else t + pt
        out.update(mean=mu, m2=m2, c=c, t=t)
        return _add_pieces(out, parts)
    ts = [p["t"] for p in parts if p["t"] is not None]
    if ts:
        t = ts[0].astype(_hi(ts[0].dtype))
        for p in ts[1:]:
            t = t + p
        out["t"] = t
    return _add_pieces(out, parts)


def _add_pieces(out, parts):
    """``out`` with the split panels' pieces of ``t`` added to their rows (double precision)."""
    for p in parts:
        for start, piece in p.get("pieces", ()):
            if out["t"] is None:
                xp = namespace(piece)
                out["t"] = xp.zeros((p["n"], int(piece.shape[1])), _hi(piece.dtype))
            out["t"][start:start + int(piece.shape[0])] += piece
    return out


def part_y(z, starts, local, *blocks):
    """One worker's share of a split row panel's ``Y_i``: ``sum_j A_ij Z_j`` over its column
    blocks (``starts``: their first columns), in the blocks' dtype (thin, ``rows x l``); with
    ``local`` also each block's column moments (:func:`panel`)."""
    y = None
    for s, b in zip(starts, blocks):
        p = b @ z[s:s + int(b.shape[1])]
        y = p if y is None else y + p
    out = {"rows": int(blocks[0].shape[0]), "y": y, "starts": tuple(starts)}
    if local:
        xp = namespace(blocks[0])
        mom = [_column_moments(xp, b) for b in blocks]
        out["mean"], out["m2"] = [m for m, _ in mom], [v for _, v in mom]
    return out


def combine(z, mean, local, fused, *parts):
    """A split row panel's :func:`panel` result (with ``y`` also when ``fused``, for
    :func:`part_t`) from its workers' :func:`part_y`: ``Y_i`` summed in double precision,
    centred as :func:`panel` centres it."""
    y = parts[0]["y"]
    dtype = y.dtype
    hi = _hi(dtype)
    xp = namespace(y)
    if len(parts) > 1:
        y = y.astype(hi)
        for p in parts[1:]:
            y = y + p["y"]
        y = y.astype(dtype)
    out = {"rows": parts[0]["rows"], "t": None}
    if local:
        mom = sorted(((s, m, v) for p in parts for s, m, v in zip(p["starts"], p["mean"],
                                                                  p["m2"])), key=lambda e: e[0])
        mean = xp.concatenate([m for _, m, _ in mom])
        out["mean"], out["m2"] = mean, xp.concatenate([v for _, _, v in mom])
    if mean is not None:
        y = y - (mean @ z.astype(hi)).astype(dtype)[None, :]
    out["c"] = colsum(y, hi) if fused and (mean is not None) else None
    out["y"] = y
    return out


def _pieces(x, mean, cx, starts, blocks):
    """``[(start, (A_ij - 1 mu_j^T)^H x)]`` for the column blocks at ``starts``; ``cx``: the
    double precision column sums of ``x`` where ``mean`` is given."""
    xp = namespace(x)
    out = []
    for s, b in zip(starts, blocks):
        t = hermitian(hermitian(x) @ b) if b.dtype.kind == "c" else b.T @ x
        if mean is not None:
            t = t.astype(_hi(b.dtype)) - xp.conj(mean[s:s + int(b.shape[1])])[:, None] \
                * cx[None, :]
        out.append((s, t))
    return out


def part_t(comb, mean, n, first, starts, *blocks):
    """One worker's rows of a split panel's ``T_i = (A_i - 1 mu^T)^H Y_i`` (fused pass; its
    own column blocks, ``comb`` the panel's :func:`combine`): ``pieces`` for :func:`merge`,
    ``n`` the column count; the ``first`` part also carries the panel's ``rows``, ``c`` and
    local moments."""
    mean = comb.get("mean", mean)
    out = {"rows": 0, "t": None, "c": None, "n": n,
           "pieces": _pieces(comb["y"], mean, comb["c"], starts, blocks)}
    if first:
        out.update(rows=comb["rows"], c=comb["c"])
        if "mean" in comb:
            out.update(mean=comb["mean"], m2=comb["m2"])
    return out


def part_h(q, mean, n, first, starts, *blocks):
    """One worker's rows of a split panel's Rayleigh-Ritz ``T_i = (A_i - 1 mu^T)^H Q_i``
    (:func:`panel_h`); the ``first`` part also carries ``rows`` and ``q`` (for
    :func:`u_block`)."""
    cq = None if mean is None else colsum(q, _hi(q.dtype))
    out = {"rows": 0, "t": None, "c": None, "n": n, "pieces": _pieces(q, mean, cq, starts, blocks)}
    if first:
        out.update(rows=int(blocks[0].shape[0]), q=q)
    return out


def _moments(merged, n, dtype):
    """``(mean (n,) double, total variance 0-d double)`` of a merged local pass, or Nones."""
    if "mean" not in merged:
        return None, None
    rows = merged["rows"]
    return merged["mean"], merged["m2"].sum() / max(rows - 1, 1)


def power_root(merged, dtype):
    """The next right factor of a fused pass: the orthonormal ``Q`` (n, l) of ``A^H A Z``
    (Householder QR in double precision of the summed ``T``), in ``dtype``; with the means
    and total variance of a local pass: ``{"z", "mean", "total"}``."""
    t = merged["t"]
    xp = namespace(t)
    q = xp.linalg.qr(t.astype(_hi(t.dtype)), mode="reduced")[0]
    mean, total = _moments(merged, q.shape[0], dtype)
    return {"z": xp.ascontiguousarray(q.astype(dtype)), "mean": mean, "total": total}


def basis_root(merged, dtype):
    """The basis pass's root: the moments of a locally centred pass (as :func:`power_root`),
    else Nones. The basis itself is :func:`local_qr` -> :func:`stack_qr` (a TSQR of ``Y``)."""
    mean, total = _moments(merged, None, dtype)
    return {"mean": mean, "total": total}


def local_qr(part, root, z, qr_fn=None):
    """The first level of the TSQR of ``Y``: the Householder QR, in double precision, of the
    panel's ``Y_i`` (:func:`take_y`): ``{"q": (m_i, c_i), "r": (c_i, l)}``, ``c_i = min(m_i,
    l)``. Householder, not Cholesky QR: a rank-deficient ``Y`` (``k`` above the rank of ``A``)
    still gives orthonormal columns. ``qr_fn(y, dtype) -> (q, r)``: the backend's reduced QR
    of the panel in ``dtype`` (``panel_qr`` of :mod:`._rowpass_host` or :mod:`._rowpass_cuda`,
    passed by the graph builder); ``None``: the array module's ``linalg.qr``."""
    y = take_y(part, root, z)
    xp = namespace(y)
    rows, l = (int(v) for v in y.shape)
    hi = _hi(y.dtype)
    if rows == 0:
        return {"q": xp.zeros((0, 0), hi), "r": xp.zeros((0, l), hi)}
    if qr_fn is None:
        q, r = xp.linalg.qr(y.astype(hi), mode="reduced")
    else:
        q, r = qr_fn(y, hi)
    return {"q": q, "r": r}


def stack_qr(*parts):
    """The second level: the QR (double precision, on the host) of the panels' stacked ``R_i``;
    ``{"s": [S_i]}``, ``S_i`` (c_i, c) the rows of its ``Q`` that belong to panel ``i``, so
    that ``Q_i = q_i S_i`` (:func:`basis_block`) are the rows of an orthonormal ``Q`` (m, c),
    ``c = min(m, l)``, with ``range(Q) = range(Y)`` where ``Y`` has full rank."""
    rs = [_host(p["r"]) for p in parts]
    xp = namespace(parts[0]["r"])
    stacked = np.concatenate(rs, axis=0)
    if stacked.shape[0] == 0:
        return {"s": [_like(xp, np.zeros((0, 0), stacked.dtype)) for _ in rs]}
    qs = np.linalg.qr(stacked, mode="reduced")[0]
    cuts = np.cumsum([0] + [r.shape[0] for r in rs])
    return {"s": [_like(xp, qs[cuts[i]:cuts[i + 1]]) for i in range(len(rs))]}


def basis_block(part, root, i, dtype, step=None):
    """Panel ``i``'s rows of the orthonormal basis: ``Q_i = q_i S_i`` (:func:`local_qr`,
    :func:`stack_qr`) in ``dtype``; with ``step`` (the backend's rows per step), ``step`` rows
    of ``q_i`` at a time into the result (no double precision ``Q_i`` is made)."""
    q, s = part["q"], root["s"][i]
    rows = int(q.shape[0])
    if step is None or rows <= step:
        return (q @ s).astype(dtype)
    out = namespace(q).empty((rows, int(s.shape[1])), dtype)
    for r0, r1 in row_steps(rows, step):
        out[r0:r1] = q[r0:r1] @ s
    return out


def _host(x):
    return x if type(x) is np.ndarray else x.get()


def _like(xp, x):
    return xp.asarray(np.ascontiguousarray(x))


def take_y(part, root, z):
    """Panel ``i``'s ``Y_i`` centred on the merged means (when its pass centred locally)."""
    y = part["y"]
    if "mean" not in part:
        return y
    hi = _hi(y.dtype)
    w = (root["mean"] - part["mean"]) @ z.astype(hi)
    return y - w.astype(y.dtype)[None, :]


def final_root(merged, k, dtype):
    """Rayleigh-Ritz: ``B^H = A^H Q`` (the summed ``T``, (n, c); ``Q`` the orthonormal basis)
    -> its SVD by a double precision QR and the small SVD of ``R`` on the host; returns
    ``{"m", "s", "vh"}``: ``U = Q m`` (``m`` (c, k) double: ``V_b`` with the sign fix), ``S``
    (k,) real, ``Vh`` (k, n) in ``dtype``; the largest-magnitude entry of each row of ``Vh`` is
    real and positive. Directions past the rank of ``A`` give zero values with orthonormal
    vectors."""
    hi = _hi(dtype)
    bh = merged["t"].astype(hi)
    xp = namespace(bh)
    n, r = (int(v) for v in bh.shape)
    qb, rb = xp.linalg.qr(bh, mode="reduced")
    ur, s, vrh = np.linalg.svd(_host(rb))
    vh = hermitian(qb @ _like(xp, ur)).astype(hi)  # (r, n): right vectors of A
    m = _like(xp, vrh.conj().T)  # (c, r): left vectors of A are Q m
    kk = min(k, r)
    vh, m, s = vh[:kk], m[:, :kk], s[:kk]
    if kk:
        peak = vh[xp.arange(kk), xp.argmax(xp.abs(vh), axis=1)]
        phase = peak / xp.where(xp.abs(peak) == 0, 1, xp.abs(peak))
        phase = xp.where(xp.abs(peak) == 0, 1, phase)
        vh = vh * xp.conj(phase)[:, None]
        m = m * phase[None, :]
    real = np.empty(0, dtype).real.dtype
    return {"m": m, "s": _like(xp, s.astype(real)), "vh": xp.ascontiguousarray(vh.astype(dtype))}


def u_block(part, root, dtype):
    """``U_i = Q_i m`` computed in double precision, in ``dtype`` (``Q_i``: the Rayleigh-Ritz
    panel's ``q``, :func:`panel_h`)."""
    hi = _hi(dtype)
    return (part["q"].astype(hi) @ root["m"].astype(hi)).astype(dtype)


def vh_block(root, start, stop):
    """Columns ``start:stop`` of ``Vh``."""
    return namespace(root["vh"]).ascontiguousarray(root["vh"][:, start:stop])


def item(d, key, dtype=None):
    """``d[key]`` (cast to ``dtype`` when given)."""
    v = d[key]
    return v if dtype is None else v.astype(dtype)


def cast_slice(x, start, stop, dtype):
    """``x[start:stop]`` (1-D) in ``dtype`` (a column chunk of PCA's mean)."""
    return namespace(x).ascontiguousarray(x[start:stop].astype(dtype))


def variances(s, total, rows, small, what):
    """PCA's variances from the singular values ``s`` (k,) of the centred ``rows x n`` matrix
    and the total variance ``total`` (0-d double), ``small = min(rows, n)``: the explained
    variances (``what="ev"``), their ratios to ``total`` (``"ratio"``) or the noise variance
    (``"noise"``, 0-d: the mean of the variance left to the ``small - k`` other directions),
    in ``s``'s dtype."""
    ev = s * s / max(rows - 1, 1)
    if what == "ev":
        return ev
    if what == "ratio":
        return (ev / total).astype(ev.dtype)
    k = int(s.shape[0])
    return ((total - ev.sum()) / (small - k)).astype(ev.dtype) if k < small else ev.sum() * 0
