"""The wide triangular solve of ``decomp._kernels._wide_trsm_cuda`` on the CPU, block by block in
the order of their tickets (a schedule the device may run: a block only waits for earlier
tickets), with the kernel's index work: the ticket's pass, group and panel, the diagonal
block reversed for the backward pass and padded with the identity, its inverse built from
two 32 x 32 inverses and the coupling block, the tiles of the earlier panels, the panels'
solutions passed through the workspace as tagged words (a block only reads words that carry
its launch's tag), the workspace's figures, identities and tag, and the summary of the last
block (into a mapped host buffer instead, then the call's epoch, where one is given)."""

import ctypes

import numpy as np

from tests.support.fused_emulator import _NONE, _order_bits, _strided, _summarize, cond_bound
from gpulinalg.decomp._kernels._wide_trsm_cuda import HEADER

PR = 64
#: The workspace's tag, its length, its tagged words (the kernel's W_EPOCH, W_WORDS, W_LINES).
W_EPOCH, W_WORDS, W_LINES = HEADER, HEADER + 1, HEADER + 2
_LOW = np.uint64(0xFFFFFFFF)


def _word_index(set_index, rows, cols, per_value):
    """Indices ``(cols, rows, piece)`` of x(r, c) of a panel's set of tagged words."""
    first = W_LINES + set_index * PR * 4 * per_value
    return (first + (cols[:, None] * PR + rows[None, :])[..., None] * per_value
            + np.arange(per_value))


def _put(ws, set_index, values, tag):
    """``values`` (rows, columns) of a panel into its tagged words (32 bits a word)."""
    per_value = values.dtype.itemsize // 4
    pieces = np.ascontiguousarray(values.T).view(np.uint32).reshape(
        values.shape[1], values.shape[0], per_value)
    idx = _word_index(set_index, np.arange(values.shape[0]), np.arange(values.shape[1]),
                      per_value)
    ws[idx] = (np.uint64(tag) << np.uint64(32)) | pieces.astype(np.uint64)


def _take(ws, set_index, rows, cols, dtype, tag, why):
    """x(rows, cols) of a panel from its tagged words, each of which must carry ``tag``."""
    per_value = np.dtype(dtype).itemsize // 4
    w = np.asarray(ws)[_word_index(set_index, rows, cols, per_value)].view(np.ndarray)
    assert ((w >> np.uint64(32)) == tag).all(), why
    pieces = np.ascontiguousarray((w & _LOW).astype(np.uint32))
    return pieces.reshape(len(cols), -1).view(dtype).T


def _bits_to_float(word):
    return float(np.array([word], np.uint64).view(np.float64)[0])


def _inverse(block):
    """The kernel's inverse of a lower triangular 64 x 64 block: the two diagonal 32 x 32
    inverses by substitution (times the diagonal's reciprocals), then X21 = -X22 (L21 X11)."""
    inv = np.zeros_like(block)
    with np.errstate(all="ignore"):
        for o in (0, 32):
            d = block[o:o + 32, o:o + 32]
            xc = np.zeros_like(d)
            rd = 1 / np.diagonal(d)  # the reciprocals first, then products
            for r in range(32):
                s = (np.arange(32) == r).astype(block.dtype) - d[r, :r] @ xc[:r]
                xc[r] = s * rd[r]
            inv[o:o + 32, o:o + 32] = np.tril(xc)
        inv[32:, :32] = -(inv[32:, 32:] @ (block[32:, :32] @ inv[:32, :32]))
    return inv


def wide_trsm(calls, grid, block, args, shared_mem):
    """``gl_wide_trsm``: ``gl_small_trsm``'s arguments and summary with the workspace last."""
    a3, b3, x, summ, n, k, *st = (int(v) if np.isscalar(v) else v for v in args)
    (tr, cj, mode, unit, squared, checks), ws, hostw, epoch = st[9:15], st[15], st[16], st[17]
    calls["wide_trsm"] += 1
    dt = x.dtype
    assert block == (256,) and shared_mem == PR * (PR + 1) * dt.itemsize
    assert int(ws[0]) == 0 and int(ws[1]) == 0, "the workspace was not left at rest"
    panels, groups = -(-n // PR), -(-k // 4)
    passes = 2 if mode == 2 else 1
    assert grid == (panels * groups * passes,)
    assert int(ws[W_WORDS]) == ws.size >= W_LINES + grid[0] * PR * 4 * (dt.itemsize // 4), \
        "a workspace shorter than the launch's tagged words"
    tag = int(ws[W_EPOCH]) + 1
    assert 1 <= tag <= 0xFFFFFFFF
    av = _strided(a3, (n, n), st[1:3])
    bv = _strided(b3, (n, k), st[4:6])
    xv = _strided(x, (n, k), st[7:9])
    m = av.T if tr else av
    first = 1 if mode == 1 else 0
    if checks & 2:  # check_finite: the first pass's blocks read the other triangle too
        calls["wide_trsm_finite"] += 1
    dmax, dmin, zero, fl = 0.0, np.inf, _NONE, 0
    if checks & 2 and not np.isfinite(av).all():
        fl |= 1
    sc, mx = np.zeros(k), np.zeros(k)
    for ticket in range(grid[0]):
        ws[0] += 1
        pas = first + ticket // (groups * panels)
        g, order = (ticket // panels) % groups, ticket % panels
        fw = pas == 0
        pi = order if fw else panels - 1 - order
        c0, kc = 4 * g, min(4, k - 4 * g)
        i0 = pi * PR
        pr = min(PR, n - i0)
        cp = (cj != 0) if fw else (cj == 0)

        def gfun(rows, cols, fw=fw, cp=cp):  # g(r, j) of the pass: m(i, j) or conj(m(j, i))
            v = m[np.ix_(rows, cols)] if fw else m[np.ix_(cols, rows)].T
            return np.conj(v) if cp else v
        own = (pas - first) * groups + g
        rows = np.arange(i0, i0 + pr)
        d = np.eye(PR, dtype=dt)
        blk = gfun(rows, rows)
        tri = np.tril(np.ones((pr, pr), bool)) if fw else np.triu(np.ones((pr, pr), bool))
        blk = np.where(tri, blk, 0)
        fl |= 0 if np.isfinite(blk).all() else 1
        diag = np.abs(np.diagonal(blk)).astype(np.float64)
        if pas == first:
            dmax, dmin = max(dmax, diag.max()), min(dmin, diag.min())
            if (diag == 0).any():
                zero = min(zero, i0 + int(np.argmax(diag == 0)))
        if unit:
            blk[np.arange(pr), np.arange(pr)] = 1
        d[:pr, :pr] = blk
        if not fw:
            d = d[::-1, ::-1]
        inv = _inverse(d)
        tiles = range(pi) if fw else range(panels - 1, pi, -1)
        acc = np.zeros((pr, kc), dt)
        for jp in tiles:
            cols = np.arange(jp * PR, min(n, jp * PR + PR))
            tile = gfun(rows, cols)
            fl |= 0 if np.isfinite(tile).all() else 1
            xs = _take(ws, own * panels + jp, np.arange(len(cols)), np.arange(kc), dt, tag,
                       "a block waited for a later ticket")
            with np.errstate(all="ignore"):
                acc += tile @ xs
        if pas == first:
            rhs = np.array(bv[i0:i0 + pr, c0:c0 + kc])
            fl |= 0 if np.isfinite(rhs).all() else 2
            sc[c0:c0 + kc] = np.maximum(sc[c0:c0 + kc], np.abs(rhs).max(axis=0))
        else:
            rhs = _take(ws, g * panels + pi, np.arange(pr), np.arange(kc), dt, tag,
                        "the backward pass began before its forward rows")
        v = np.zeros((PR, kc), dt)
        v[:pr] = rhs - acc
        if not fw:
            v = v[::-1]
        with np.errstate(all="ignore"):
            y = inv @ v
        if not fw:
            y = y[::-1]
        _put(ws, own * panels + pi, y[:pr], tag)
        xv[i0:i0 + pr, c0:c0 + kc] = y[:pr]
        if pas == (0 if mode == 0 else 1):
            mx[c0:c0 + kc] = np.maximum(mx[c0:c0 + kc], np.abs(y[:pr]).max(axis=0))
    ws[0] = 0
    if tag == 0xFFFFFFFF:  # the tags are spent: every tagged word cleared, the next tag is 1
        ws[W_LINES:] = 0
    ws[W_EPOCH] = 0 if tag == 0xFFFFFFFF else tag
    if checks & 1:
        bd = cond_bound(*((1.0, 1.0) if unit else (dmax, dmin)), sc, mx, squared)
        fl |= 4 if (zero != _NONE and not unit) else 0
        if hostw:  # the mapped host words, then the epoch; the device summary untouched
            assert int(summ[0]) == 0, "a flag set before a launch the mapped words would miss"
            words = np.ctypeslib.as_array((ctypes.c_uint64 * 4).from_address(int(hostw)))
            words[:3] = [fl, _order_bits(bd), _NONE]
            words[3] = epoch
            calls["wide_trsm_mapped"] += 1
        else:
            _summarize(calls, summ, fl, _order_bits(bd), _NONE)
    assert _bits_to_float(int(ws[3])) == np.inf and int(ws[4]) == _NONE
