"""CPU emulations of the matrix-free GP solver's fused kernels (``gl_gp_product``,
``gl_gp_factor_contract`` of ``gpulinalg/gp/gp_product.cu``): what each promises, read
through the raw arguments and the compiler options its launcher passes, with the launch's
shape checked against them. The entries are made in the options' arithmetic (``GL_REAL``),
the sums in float64."""

import numpy as np


def _defines(options):
    out = {}
    for o in options:
        if o.startswith("-D"):
            k, _, v = o[2:].partition("=")
            out[k] = v
    return out


def _kernel_values(kind, r2):
    """``(s, h)`` of gp_functions.cu's ``gl_sh``."""
    r = np.sqrt(r2)
    if kind == 0:
        s = np.exp(-0.5 * r2)
        return s, s
    if kind == 1:
        s = np.exp(-r)
        return s, np.where(r > 0, s / np.where(r > 0, r, 1), 0)
    q = np.sqrt((3 if kind == 2 else 5) * r2)
    e = np.exp(-q)
    if kind == 2:
        return (1 + q) * e, 3 * e
    return (1 + q + q * q / 3) * e, 5 / 3 * (1 + q) * e


def _entries(defs, z, n):
    real = np.float32 if defs["GL_REAL"] == "float" else np.float64
    d = int(defs["GL_D"])
    assert z.dtype == real and z.shape == (n, d) and z.flags.c_contiguous
    zz = np.asarray(z)
    diff = zz[:, None, :] - zz[None, :, :]  # in GL_REAL, as the kernel's differences
    r2 = (diff * diff).sum(-1, dtype=real)
    s, h = _kernel_values(int(defs["GL_KIND"]), r2)
    return diff, s.astype(real), h.astype(real), real


def _check_launch(defs, grid, block, n):
    assert block == (256,), block
    bi = int(defs["GL_BI"])
    assert bi % 32 == 0 and int(defs["GL_BJ"]) % 8 == 0
    assert grid == (-(-n // bi),), (grid, n, bi)


def product(calls, options, grid, block, args, shared_mem):
    """``out[i, q] = sum_j c s(r_ij) v[j, q]`` for ``q < t``."""
    defs = _defines(options)
    z, v, out, n, t, ldv, ldo, c = args
    n, t, ldv, ldo = int(n), int(t), int(ldv), int(ldo)
    calls["gp_product"] += 1
    _check_launch(defs, grid, block, n)
    tp = int(defs["GL_TP"])
    assert tp % 8 == 0 and t <= tp <= 64 and shared_mem in (0, None)
    assert v.dtype == out.dtype == np.float64 and ldv >= t and ldo >= t
    assert v.flags.c_contiguous and out.flags.c_contiguous and v.shape[1] == ldv
    _, s, _, real = _entries(defs, z, n)
    assert isinstance(c, real)
    k = (c * s).astype(np.float64)
    out[:, :t] = k @ np.asarray(v)[:, :t].astype(real).astype(np.float64)


def factor_contract(calls, options, grid, block, args, shared_mem):
    """``acc[0] += sum W c s``, ``acc[1 + d] += sum W c h (z_id - z_jd)^2``, ``W = a b^T``."""
    defs = _defines(options)
    z, a, b, acc, n, m, c = args
    n, m = int(n), int(m)
    calls["gp_factor_contract"] += 1
    _check_launch(defs, grid, block, n)
    diff, s, h, real = _entries(defs, z, n)
    assert shared_mem == m * (int(defs["GL_BI"]) + 1) * np.dtype(real).itemsize
    assert a.shape == b.shape == (n, m) and a.flags.c_contiguous and b.flags.c_contiguous
    assert a.dtype == b.dtype == acc.dtype == np.float64 and acc.shape == (int(defs["GL_D"]) + 1,)
    w = np.asarray(a).astype(real).astype(np.float64) @ \
        np.asarray(b).astype(real).astype(np.float64).T
    wc = w * float(c)
    acc[0] += (wc * s).sum()
    acc[1:] += np.einsum("ij,ijd->d", wc * h, (diff * diff).astype(np.float64))


def _pick_first_max(v):
    """argmax's rule: a NaN wins, ties go to the first."""
    nan = np.flatnonzero(np.isnan(v))
    return int(nan[0]) if nan.size else int(np.argmax(v))


def pivot_select(calls, options, grid, block, args, shared_mem):
    """The pivot among the candidates, the floor at step 0, ``live[m]``."""
    vals, idx, indexed, count, state, live, m, rank_tol = args
    count, m = int(count), int(m)
    calls["gp_pivot_select"] += 1
    assert grid == (1,) and block == (256,) and shared_mem in (0, None)
    assert vals.dtype == state.dtype == np.float64 and idx.dtype == np.int64
    v = np.asarray(vals)[:count]
    at = _pick_first_max(v)
    i = int(np.asarray(idx)[at]) if int(indexed) else at
    if m == 0:
        state[2] = float(rank_tol) * v[at]
    ok = bool(v[at] > state[2])
    state[0], state[1], state[3] = float(i), v[at], float(ok)
    live[m] = ok


def pivot_row(calls, options, grid, block, args, shared_mem):
    """Row ``m`` of the factor, the diagonal's update, per-block maxima of 256 entries."""
    defs = _defines(options)
    z, rows, diag, state, part_v, part_i, n, m, c = args
    n, m = int(n), int(m)
    calls["gp_pivot_row"] += 1
    assert block == (256,) and grid == (-(-n // 256),) and shared_mem in (0, None)
    assert z.dtype == np.float64 and z.shape == (n, int(defs["GL_D"])) and z.flags.c_contiguous
    assert rows.shape[1] == n and rows.flags.c_contiguous and rows.shape[0] > m
    ok, p = bool(state[3]), int(state[0])
    v = np.zeros(n)
    if ok:
        zz = np.asarray(z)
        diff = zz - zz[p]
        s, _ = _kernel_values(int(defs["GL_KIND"]), (diff * diff).sum(-1))
        v = (float(c) * s - np.asarray(rows)[:m].T @ np.asarray(rows)[:m, p]) / np.sqrt(state[1])
        diag -= v * v
        diag[p] = 0.0
    rows[m] = v
    d = np.asarray(diag)
    for b in range(grid[0]):
        seg = d[b * 256:(b + 1) * 256]
        at = _pick_first_max(seg)
        part_v[b], part_i[b] = seg[at], b * 256 + at


def build(calls, options, grid, block, args, shared_mem):
    """``gl_gp_build``: ``K = c s(r) + diag(white + noise)``, made in float64, stored in
    ``GL_STORED``."""
    defs = _defines(options)
    z, noise, k, flag, n, c, white, step = args
    n = int(n)
    calls["gp_build"] += 1
    assert block == (32, 8) and grid == (-(-n // 32), -(-n // 32))
    assert k.dtype == (np.float32 if defs.get("GL_STORED") == "float" else np.float64)
    assert z.dtype == np.float64 and k.shape == (n, n) and k.flags.c_contiguous
    zz = np.asarray(z)
    diff = zz[:, None, :] - zz[None, :, :]
    s, _ = _kernel_values(int(defs["GL_KIND"]), (diff * diff).sum(-1))
    full = float(c) * s
    full[np.diag_indices(n)] += float(white) + (np.asarray(noise)[:n] if int(step) else
                                                 float(noise[0]))
    if not np.isfinite(full).all():
        flag[0] = 1
    k[...] = full


def weight_contract(calls, options, grid, block, args, shared_mem):
    """``gl_gp_weight_contract``: ``acc[0] += sum W c s``, ``acc[1 + d] += sum W c h (z_id -
    z_jd)^2`` over the whole of ``W`` (``GL_STORED``), in float64."""
    defs = _defines(options)
    w, z, acc, n, c = args
    n = int(n)
    calls["gp_weight_contract"] += 1
    assert block == (32, 8) and grid == (-(-n // 32), -(-n // 32))
    assert w.dtype == (np.float32 if defs.get("GL_STORED") == "float" else np.float64)
    assert w.shape == (n, n) and w.flags.c_contiguous and z.dtype == np.float64
    assert acc.shape == (int(defs["GL_D"]) + 2,)
    zz = np.asarray(z)
    diff = zz[:, None, :] - zz[None, :, :]
    s, h = _kernel_values(int(defs["GL_KIND"]), (diff * diff).sum(-1))
    wc = np.asarray(w).astype(np.float64) * float(c)
    acc[0] += (wc * s).sum()
    acc[1:-1] += np.einsum("ij,ijd->d", wc * h, diff * diff)
