"""CPU emulations of decomp's fused and streamed kernels (``gl_small_potrf``, ``gl_small_qr``,
``gl_small_trsm``, ``gl_stream_trsm``): the results, codes and summaries the kernels promise,
through their raw strides. ``calls``: the counter of ``_cusolver_emulator``, which dispatches
the kernels here."""

import numpy as np


def _strided(x, shape, strides):
    item = x.itemsize
    return np.lib.stride_tricks.as_strided(x, shape, tuple(int(s) * item for s in strides))


_NONE = (1 << 64) - 1


def _summarize(calls, summ, flags, word1, word2):
    """What the last block of a fused launch leaves in the read-back words of the summary
    (``summ[4:7]``); the accumulating words stay at their identities, as on the device."""
    # word 0 may hold a flag a kernel set before the launch (the flat finiteness check)
    summ[4], summ[5], summ[6] = np.uint64(flags | int(summ[0])), np.uint64(word1), np.uint64(word2)
    summ[0] = 0
    calls["summary"] += 1


def cond_bound(dmax, dmin, scale, xn, squared):
    """The conditioning rule's bound of one matrix from the kernels' figures: the diagonal's
    largest and smallest magnitude, each column's largest entry of ``b`` (``scale``) and of
    the solution (``xn``); squared for ``cho_solve``. NaN sticks, as in the kernels."""
    with np.errstate(all="ignore"):
        diag = dmax / (dmin if dmin > 0 else 1.0)
        ratio = np.where(scale > 0, xn / np.where(scale > 0, scale, 1.0), 0.0)
        rhs = (dmax * dmax) * ratio if squared else dmax * ratio
        return np.max(np.append(rhs, diag * diag if squared else diag))


def _order_bits(v):
    """The kernel's gl_order_bits: NaN above everything, other non-negative doubles as bits."""
    if np.isnan(v):
        return 0x7FF8000000000000
    return int(np.array([abs(v)], np.float64).view(np.uint64)[0])


def small_potrf(calls, grid, args):
    """The fused Cholesky of ``_fused_cuda`` (one matrix per block), step by step as the
    kernel: the same codes (``k + 1``, or ``nonfinite + k`` for a NaN/Inf pivot) and flags,
    folded into the summary (the first failed matrix of each kind, packed)."""
    a3, w, summ, n, nb, *st = (int(x) if np.isscalar(x) else x for x in args)
    (sab, sar, sac, swb, swr, swc), (lower, clean, nonfinite) = st[:6], st[6:]
    calls["small_potrf"] += 1
    assert grid == (nb,) and summ.dtype == np.uint64 and summ.shape == (8,)
    av = _strided(a3, (nb, n, n), (sab, sar, sac))
    wv = _strided(w, (nb, n, n), (swb, swr, swc))
    tri = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    flags, minor, pivot = 0, _NONE, _NONE
    for b in range(nb):
        src = np.array(av[b])
        flags |= int(not np.isfinite(src).all())
        s = np.tril(src if lower else src.conj().T).astype(src.dtype)
        code = 0
        with np.errstate(all="ignore"):
            for k in range(n):
                d = s[k, k].real
                if not (d > 0) or not np.isfinite(d):
                    code = k + 1 if np.isfinite(d) else nonfinite + k
                    break
                s[k + 1:, k + 1:] -= np.tril(np.outer(s[k + 1:, k] / d, s[k + 1:, k].conj()))
        packed = (b << 32) | code
        if 0 < code < nonfinite:
            minor = min(minor, packed)
        elif code >= nonfinite:
            pivot = min(pivot, packed)
        if code:
            continue  # nothing written (in place: the input stays)
        wv[b][~tri] = 0 if clean else src[~tri]
        r = np.sqrt(np.diagonal(s).real)
        fac = np.tril(s / r[None, :])
        fac[np.arange(n), np.arange(n)] = r
        wv[b][tri] = (fac if lower else fac.conj().T)[tri]
    _summarize(calls, summ, flags, minor, pivot)


def small_qr(calls, grid, block, args, shared_mem):
    """The fused QR of ``_fused_qr_cuda`` (one matrix per block), step by step as the kernel:
    LAPACK's geqr2 (larfg's signs, the norm in float64 scaled by the largest part) in the
    matrix's dtype, then org2r in place; outputs through their raw strides."""
    a3, q, r, h, tau, m, n, qc, rr, raw, *st = (int(x) if np.isscalar(x) else x for x in args)
    calls["small_qr"] += 1
    nb, k, dt = grid[0], min(m, n), a3.dtype
    assert block[0] % 32 == 0 and block[0] <= 256 and shared_mem >= max(n, qc) * m * dt.itemsize
    av = _strided(a3, (nb, m, n), st[0:3])
    rv = _strided(r, (nb, rr, n), st[6:9])
    for b in range(nb):
        s = np.zeros((m, max(n, qc)), dt)
        s[:, :n] = av[b]
        tv = np.zeros(k, dt)
        with np.errstate(all="ignore"):
            for j in range(k):
                col = s[j:, j].astype(np.complex128)
                sc = np.max(np.maximum(np.abs(col.real), np.abs(col.imag)))
                if np.any(np.isnan(col)):
                    sc = np.nan
                alpha = s[j, j]
                if (m - j > 1 and not np.all(s[j + 1:, j] == 0)) or np.imag(alpha) != 0:
                    nrm = sc * np.sqrt(np.sum(np.abs(col / sc) ** 2))
                    beta = dt.type(-nrm if np.real(alpha) >= 0 else nrm)
                    tv[j] = (beta - alpha) * dt.type(1 / np.real(beta))
                    s[j + 1:, j] *= dt.type(1) / (alpha - beta)
                    s[j, j] = beta
                    v = s[j:, j].copy()
                    v[0] = 1
                    s[j:, j + 1:n] -= np.conj(tv[j]) * np.outer(v, v.conj() @ s[j:, j + 1:n])
        for i in range(rr):
            rv[b, i] = np.where(np.arange(n) >= i, s[i, :n], 0)
        if raw:
            _strided(h, (nb, m, n), st[9:12])[b] = s[:, :n]
            _strided(tau, (nb, k), (st[12], 1))[b] = tv
        if not qc:
            continue
        s[:, k:qc] = np.eye(m, qc)[:, k:qc]
        with np.errstate(all="ignore"):
            for j in range(k - 1, -1, -1):
                v = s[j:, j].copy()
                v[0] = 1
                s[j:, j + 1:qc] -= tv[j] * np.outer(v, v.conj() @ s[j:, j + 1:qc])
                s[j + 1:, j] *= -tv[j]
                s[j, j] = 1 - tv[j]
                s[:j, j] = 0
        _strided(q, (nb, m, qc), st[3:6])[b] = s[:, :qc]


def small_trsm(calls, grid, args):
    """The fused triangular / Cholesky solves of ``_fused_cuda``, with the rule of
    ``_triangular_xp`` per matrix folded into the summary as the kernel does."""
    a3, b3, x, summ, n, k, *st = (int(x) if np.isscalar(x) else x for x in args)
    (tr, cj, mode, unit, squared, summarize) = st[9:]
    calls["small_trsm"] += 1
    nb = grid[0]
    assert summ.dtype == np.uint64 and summ.shape == (8,)
    av = _strided(a3, (nb, n, n), st[0:3])
    bv = _strided(b3, (nb, n, k), st[3:6])
    xv = _strided(x, (nb, n, k), st[6:9])
    flags, bound = 0, 0.0
    for b in range(nb):
        a, y = np.array(av[b]), np.array(bv[b])
        m = np.tril(a.T if tr else a)
        m = m.conj() if cj else m
        if unit:
            m[np.arange(n), np.arange(n)] = 1
        d = np.ones(n) if unit else np.abs(np.diagonal(a)).astype(np.float64)
        flags |= (1 if not np.isfinite(a).all() else 0) | (2 if not np.isfinite(y).all() else 0)
        flags |= 4 if (d == 0).any() else 0
        scale = np.abs(y).max(axis=0).astype(np.float64)
        with np.errstate(all="ignore"):
            if mode != 1:
                for j in range(n):
                    y[j] /= m[j, j]
                    y[j + 1:] -= m[j + 1:, j, None] * y[j]
            if mode != 0:
                for j in reversed(range(n)):
                    y[j] /= m[j, j].conj()
                    y[:j] -= m[j, :j, None].conj() * y[j]
            xv[b] = y
            xn = np.abs(y).max(axis=0).astype(np.float64)
        cond = cond_bound(d.max(), d.min(), scale, xn, squared)
        bound = np.nan if np.isnan(cond) or np.isnan(bound) else max(bound, cond)
    if summarize:
        _summarize(calls, summ, flags, _order_bits(bound), _NONE)


def stream_trsm(calls, grid, block, args, shared_mem):
    """The streamed solve of ``_stream_trsm_cuda``: ``gl_small_trsm``'s arguments with the
    group size ``kg`` before ``checks``, a block per matrix and group of ``kg`` columns, the
    columns of a group in dynamic shared memory; the same results and summary."""
    *head, kg, checks = args
    n, k, kg = int(args[4]), int(args[5]), int(kg)
    groups = -(-k // kg)
    calls["stream_trsm"] += 1
    assert block in ((256,), (512,)) and grid[0] % groups == 0 and 1 <= kg <= 4
    assert shared_mem == n * kg * head[2].itemsize
    small_trsm(calls, (grid[0] // groups,), (*head, checks))
