"""A CPU emulation of the fused small-stack SVD kernel ``gl_small_svd`` of
``gpulinalg.decomp._kernels._fused_svd_cuda``, step by step as the kernel (all matrices of the
launch in lock step, the pairs of a round at once): the load as W = A or A^H, NaN/Inf matrices to
NaN, the power-of-two scaling, one-sided Jacobi in the round-robin order with the kernel's rotation
and skip test (double types: float64 / complex128 throughout; single types: columns, rotations
and their angle in single precision from float64 Gram entries and a float64 ``zeta``), the sweep
cap, the descending order, the completion
of the big side (least covered row, Gram-Schmidt twice), flip_signs' phases, the summary and
the outputs through their raw strides. ``_cusolver_emulator`` dispatches the kernel here."""

import numpy as np

ZERO_S = 1e-280
NONE = (1 << 64) - 1


def _strided(x, shape, strides):
    item = x.itemsize
    return np.lib.stride_tricks.as_strided(x, shape, tuple(int(v) * item for v in strides))


def _f64(x):
    """``x`` in float64 / complex128."""
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _pairs(kp, r):
    """The kernel's pairs of round ``r`` (segment ``pr``: p < q)."""
    out = []
    for pr in range(kp // 2):
        p = kp - 1 if pr == 0 else (r + pr) % (kp - 1)
        q = r if pr == 0 else (r - pr + kp - 1) % (kp - 1)
        out.append((min(p, q), max(p, q)))
    return out


def _angle(zeta, single):
    """``(cs, sn)`` of the rotation from ``zeta`` as the kernel: float64, or (``single``)
    float32 from the float64 ``zeta``."""
    if not single:
        tt = np.where(np.abs(zeta) > 1e100, 0.5 / zeta,
                      np.copysign(1.0, zeta) / (np.abs(zeta) + np.sqrt(1.0 + zeta * zeta)))
        cs = 1.0 / np.sqrt(1.0 + tt * tt)
        return cs, cs * tt
    f, one = np.float32, np.float32(1)
    z = zeta.astype(f)
    tt = np.where(np.abs(zeta) > 1e15, (0.5 / zeta).astype(f),
                  np.copysign(one, z) / (np.abs(z) + np.sqrt(one + z * z)))
    cs = one / np.sqrt(one + tt * tt)
    return cs, cs * tt


def _jacobi(w, v, k, kp, tol, max_sweeps, active, vecs):
    """Sweeps on the (nb, MB, .) W and V in place (their dtype: the kernel's storage type);
    returns (sweeps, converged) per matrix."""
    single = w.dtype in (np.float32, np.complex64)
    nb = len(w)
    sweeps = np.zeros(nb, np.int64)
    converged = np.zeros(nb, bool)
    active = active.copy()
    with np.errstate(all="ignore"):
        while active.any():
            rotated = np.zeros(nb, bool)
            for r in range(kp - 1):
                pq = [(p, q) for p, q in _pairs(kp, r) if q < k]
                if not pq:
                    continue
                p, q = (np.array(x) for x in zip(*pq))
                wp, wq = w[:, :, p], w[:, :, q]
                dp, dq = _f64(wp), _f64(wq)  # the Gram entries in float64 (exact products)
                app = (np.abs(dp) ** 2).sum(axis=1)
                aqq = (np.abs(dq) ** 2).sum(axis=1)
                apq = (dp.conj() * dq).sum(axis=1)
                g = np.abs(apq)
                do = active[:, None] & (g > tol * np.sqrt(app) * np.sqrt(aqq))
                gz = np.where(do, g, 1.0)
                zeta = (aqq - app) / (2.0 * gz)
                cs, sn = _angle(zeta, single)
                e = (apq / gz).astype(w.dtype)
                se, sc = (sn * e)[:, None], (sn * e.conj())[:, None]
                cs, d = cs[:, None], do[:, None, :]
                w[:, :, p] = np.where(d, cs * wp - sc * wq, wp)
                w[:, :, q] = np.where(d, se * wp + cs * wq, wq)
                if vecs:
                    vp, vq = v[:, :, p], v[:, :, q]
                    v[:, :, p] = np.where(d, cs * vp - sc * vq, vp)
                    v[:, :, q] = np.where(d, se * vp + cs * vq, vq)
                rotated |= do.any(axis=1)
            sweeps[active] += 1
            converged[active & ~rotated] = True
            active &= rotated & (sweeps < max_sweeps)
    return sweeps, converged


def _complete(w, sv, k, big, wcols):
    """Columns of zero s_j, and ``k..wcols-1``, completed to an orthonormal basis (one
    matrix's W, columns already normalized)."""
    have = [c for c in range(k) if sv[c] > ZERO_S]
    for c in range(wcols):
        if c < k and sv[c] > ZERO_S:
            continue
        q = w[:big, sorted(have)]
        rn = (np.abs(q) ** 2).sum(axis=1)
        at = int(np.argmin(rn))
        x = -q @ q[at].conj()
        x[at] += 1
        for j in sorted(have):
            x = x - w[:big, j] * (w[:big, j].conj() @ x)
        w[:, c] = 0
        w[:big, c] = x / np.sqrt((np.abs(x) ** 2).sum())
        have.append(c)


def small_svd(calls, grid, block, args, shared_mem):
    """``gl_small_svd`` on NumPy arrays (see the module docstring)."""
    a3, u, s, vh, summ, m, n, uc, vr, wc, tol, max_sweeps, *st = (
        int(x) if isinstance(x, (int, np.integer)) else x for x in args)
    tol = float(tol)
    calls["small_svd"] += 1
    nb, dt = grid[0], a3.dtype
    wide, big, k = m < n, max(m, n), min(m, n)
    kp = k + (k & 1)
    from gpulinalg.decomp._kernels._fused_svd_cuda import SIZES, _layout, rows_per_lane
    mb = next(size for size in SIZES if big <= size)
    single, rows = _layout(dt)[5], rows_per_lane(dt, mb)
    cdt = dt if single else (np.complex128 if dt.kind == "c" else np.float64)
    lanes = mb // rows  # lanes per pair in the sweeps
    assert block[0] == 32 * max(1, -(-(kp // 2) * lanes // 32))
    assert shared_mem == mb * (wc + kp) * np.dtype(cdt).itemsize
    assert wc >= max(kp, vr if wide else uc)
    av = _strided(a3, (nb, m, n), st[0:3])
    w = np.zeros((nb, mb, wc), cdt)
    w[:, :big, :k] = av.conj().swapaxes(1, 2) if wide else av
    bad = ~np.isfinite(av).all(axis=(1, 2))
    parts = np.maximum(np.abs(av.real), np.abs(av.imag)).astype(np.float64).max(axis=(1, 2),
                                                                                initial=0.0)
    top = np.where(bad, 0.0, parts)
    ex = np.where(top > 0, np.frexp(top)[1], 0)
    w[:, :, :k] = w[:, :, :k] * np.ldexp(1.0, -ex)[:, None, None]  # in float64, rounded once
    v = np.zeros((nb, mb, kp), cdt)
    for i in range(min(kp, mb)):
        v[:, i, i] = 1
    vecs = uc > 0
    sweeps, converged = _jacobi(w, v, k, kp, tol, max_sweeps, ~bad, vecs)
    sv = np.sqrt((np.abs(_f64(w[:, :, :k])) ** 2).sum(axis=1))
    perm = np.argsort(-sv, axis=1, kind="stable")
    sout = _strided(s, (nb, k), (st[6], 1))
    sout[...] = np.ldexp(np.take_along_axis(sv, perm, axis=1), ex[:, None])
    sout[bad] = np.nan
    fail = ~bad & ~converged
    first = (int(np.argmax(fail)) << 32 | int(sweeps[np.argmax(fail)])) if fail.any() else NONE
    summ[4] = np.uint64((1 if bad.any() else 0) | (2 if fail.any() else 0))
    summ[5], summ[6] = np.uint64(sweeps.max(initial=0)), np.uint64(first)
    calls["summary"] += 1
    if not vecs:
        return
    uv = _strided(u, (nb, m, uc), st[3:6])
    vv = _strided(vh, (nb, vr, n), st[7:10])
    wcols = vr if wide else uc
    for b in range(nb):
        if bad[b]:
            uv[b], vv[b] = np.nan, np.nan
            continue
        wb, vb, sb = w[b], v[b], sv[b]
        with np.errstate(all="ignore"):
            wb[:, :k] = np.where(sb > ZERO_S, _f64(wb[:, :k]) / sb, 0)
        if wcols > k or not (sb > ZERO_S).all():
            _complete(wb, sb, k, big, wcols)
        ph = np.ones(k, cdt)
        for r in range(k):
            x = wb[:big, perm[b, r]] if wide else vb[:k, perm[b, r]]
            at = int(np.argmax(np.abs(x.astype(dt))))
            g = abs(x[at])
            ph[r] = np.conj(x[at] / g) if g > 0 else 1
        cols = np.concatenate([perm[b], np.arange(k, wcols)]).astype(int)
        phs = np.concatenate([ph, np.ones(wcols - k, cdt)])
        big_side = wb[:big, cols] * phs
        small_side = vb[:k, perm[b]] * ph
        uv[b] = small_side if wide else big_side
        vv[b] = (big_side if wide else small_side).conj().T

