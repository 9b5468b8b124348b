"""Randomized SVD and PCA of Dask arrays chunked both ways (the engines, called
directly; ``truncated_svd`` / ``PCA`` in test_dask_api.py), on a 2-worker CPU cluster with NumPy
chunks, against NumPy, the single-GPU engine's CPU twin and scikit-learn."""

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

from gpulinalg.decomp.lowrank import _randomized_dask as rsvd  # noqa: E402



def _low_rank(rng, m, n, dtype=np.float64, r=30, decay=0.7):
    cplx = np.dtype(dtype).kind == "c"

    def basis(k):
        z = rng.standard_normal((k, r)) + (1j * rng.standard_normal((k, r)) if cplx else 0)
        return np.linalg.qr(z)[0]
    s = decay ** np.arange(r)
    return ((basis(m) * s) @ basis(n).conj().T).astype(dtype), s


@pytest.mark.parametrize("dtype, chunks", [
    (np.float64, (37, 23)), (np.float64, (200, 90)), (np.complex128, (64, 90)),
    (np.complex128, (71, 31)), (np.float32, (64, 47)), (np.complex64, (200, 47))])
def test_randomized_svd_recovers_the_spectrum(client, rng, dtype, chunks):
    a, s = _low_rank(rng, 200, 90, dtype, decay=0.5)
    x = da.from_array(a, chunks=chunks)
    res = rsvd.randomized_svd(x, 5, n_iter=2, random_state=0, error_estimate=True)
    assert all(isinstance(v, da.Array) for v in res)
    assert res.U.chunks[0] == x.chunks[0] and res.Vh.chunks[1] == x.chunks[1]
    U, S, Vh, err = client.compute(list(res), sync=True)
    tol = 1e-10 if np.dtype(dtype).itemsize * (2 if np.dtype(dtype).kind == "f" else 1) >= 16 \
        else 1e-4
    np.testing.assert_allclose(S, s[:5], rtol=tol)
    assert S.dtype == np.empty(0, dtype).real.dtype and U.dtype == dtype
    np.testing.assert_allclose(U.conj().T @ U, np.eye(5), atol=tol)
    np.testing.assert_allclose(U.conj().T @ a, S[:, None] * Vh, atol=tol * 10)
    assert abs(float(err) - s[5]) <= 0.05 * s[5]
    peak = Vh[np.arange(5), np.argmax(np.abs(Vh), axis=1)]
    assert np.all(peak.real > 0) and np.allclose(peak.imag, 0, atol=tol)


def test_matches_the_single_gpu_engine_on_its_cpu_twin(client, rng):
    from gpulinalg.decomp import truncated_svd
    a, _ = _low_rank(rng, 150, 60)
    U, S, Vh = client.compute(list(rsvd.randomized_svd(da.from_array(a, chunks=(75, 30)), 4,
                                                       n_iter=3, random_state=3)), sync=True)
    ref = truncated_svd(a, 4, method="exact")
    np.testing.assert_allclose(S, ref.S, rtol=1e-10)
    np.testing.assert_allclose(U, ref.U, atol=1e-8)  # same signs
    np.testing.assert_allclose(Vh, ref.Vh, atol=1e-8)


def test_same_seed_same_result_whatever_the_scheduler(client, rng):
    a = rng.standard_normal((80, 40))
    x = da.from_array(a, chunks=(30, 15))
    r1 = client.compute(list(rsvd.randomized_svd(x, 3, n_iter=1, random_state=7)), sync=True)
    r2 = dask.compute(*rsvd.randomized_svd(x, 3, n_iter=1, random_state=7), scheduler="sync")
    for p, q in zip(r1, r2):
        np.testing.assert_allclose(p, q, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("normalizer", ["none", "QR", "qr", "CholQR", "auto"])
def test_persist_between_passes_and_normalizers(client, rng, normalizer):
    a, s = _low_rank(rng, 120, 50)
    x = da.from_array(a, chunks=(50, 20))
    U, S, Vh = rsvd.randomized_svd(x, 3, n_iter=2, random_state=1, persist=True,
                                   power_iteration_normalizer=normalizer)
    np.testing.assert_allclose(S.compute(), s[:3], rtol=1e-8)


def test_k_zero_and_empty(client):
    x = da.from_array(np.ones((10, 6)), chunks=(4, 4))
    U, S, Vh = client.compute(list(rsvd.randomized_svd(x, 0)), sync=True)
    assert U.shape == (10, 0) and S.shape == (0,) and Vh.shape == (0, 6)
    e = da.from_array(np.ones((0, 6)), chunks=(4, 4))
    U, S, Vh, err = client.compute(list(rsvd.randomized_svd(e, 0, error_estimate=True)),
                                   sync=True)
    assert U.shape == (0, 0) and float(err) == 0.0


def test_bad_arguments():
    x = da.ones((10, 6), chunks=5)
    with pytest.raises(ValueError, match="power_iteration_normalizer"):
        rsvd.randomized_svd(x, 2, power_iteration_normalizer="LU")
    with pytest.raises(ValueError, match="k must be"):
        rsvd.randomized_svd(x, 7)


def test_pca_matches_scikit_learn(client, rng):
    skl = pytest.importorskip("sklearn.decomposition")
    a, _ = _low_rank(rng, 300, 40, r=20, decay=0.8)
    a = a + 5.0 + 1e-7 * rng.standard_normal(a.shape)  # a mean far from 0: centring matters
    x = da.from_array(a, chunks=(150, 20))
    out = rsvd.pca(x, 4, iterated_power=3, random_state=0)
    assert all(isinstance(out[k], da.Array) for k in ("components", "mean", "U"))
    keys = [k for k, v in out.items() if isinstance(v, da.Array)]
    got = dict(zip(keys, client.compute([out[k] for k in keys], sync=True)))
    ref = skl.PCA(4, svd_solver="full").fit(a)
    np.testing.assert_allclose(got["components"], ref.components_, atol=1e-8)
    for name in ("explained_variance", "explained_variance_ratio", "singular_values", "mean",
                 "noise_variance"):
        np.testing.assert_allclose(got[name], getattr(ref, name + "_"), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(got["U"] * got["singular_values"], ref.transform(a), atol=1e-8)
    scores = rsvd.transform(x, got["components"], got["mean"])
    assert isinstance(scores, da.Array)
    np.testing.assert_allclose(scores.compute(), ref.transform(a), atol=1e-8)


def test_pca_never_forms_the_centred_matrix(client, rng, monkeypatch):
    a = rng.standard_normal((60, 40)) + 3.0
    x = da.from_array(a, chunks=(20, 40))
    seen = []
    sub = da.Array.__sub__

    def spy(self, other):
        seen.append(tuple(self.shape))
        return sub(self, other)
    monkeypatch.setattr(da.Array, "__sub__", spy)
    out = rsvd.pca(x, 2, random_state=0, iterated_power=1)
    assert (60, 40) not in seen  # the row panels shift only thin (m_i, l) / (n, l) blocks
    assert type(out["components"]._meta) is np.ndarray


def test_complex_pca_centres_with_the_conjugate_mean(client, rng):
    a = rng.standard_normal((50, 8)) + 1j * rng.standard_normal((50, 8)) + (2 - 1j)
    out = rsvd.pca(da.from_array(a, chunks=(25, 5)), 3, random_state=0, iterated_power=6)
    s, ev = dask.compute(out["singular_values"], out["explained_variance"])
    s_ref = np.linalg.svd(a - a.mean(axis=0), compute_uv=False)
    np.testing.assert_allclose(s, s_ref[:3], rtol=1e-6)
    np.testing.assert_allclose(ev, s_ref[:3] ** 2 / 49, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_pca_moments_come_from_the_first_sketch_pass(client, rng, dtype):
    """The mean and total variance (odd chunks, a mean far from 0) match NumPy's, and every
    block of X is read by n_iter + 2 tasks only (one per row-panel layer: n_iter fused passes,
    the basis and the Rayleigh-Ritz pass): no separate pass for the moments."""
    from dask.core import get_dependencies
    a = (rng.standard_normal((97, 31)) * 10 * 0.5 ** np.arange(31) + 100.0).astype(dtype)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(a.shape)
    x = da.from_array(a, chunks=(37, 13))
    out = rsvd.pca(x, 3, iterated_power=2, random_state=0)
    names = ("explained_variance", "mean", "explained_variance_ratio", "noise_variance")
    got = dict(zip(names, client.compute([out[k] for k in names], sync=True)))
    tol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-10
    np.testing.assert_allclose(got["mean"], a.astype(np.complex128 if a.dtype.kind == "c"
                                                     else np.float64).mean(axis=0), rtol=tol)
    a64 = a.astype(np.complex128)
    total = (np.abs(a64 - a64.mean(axis=0)) ** 2).sum() / 96  # sum of the column variances
    ev = got["explained_variance"]
    np.testing.assert_allclose(got["explained_variance_ratio"], ev / total, rtol=10 * tol)
    np.testing.assert_allclose(got["noise_variance"], (total - ev.sum()) / 28, rtol=10 * tol)
    graph = dict(dask.base.collections_to_expr([out[k] for k in names]).__dask_graph__())
    readers = {k: 0 for k in graph if isinstance(k, tuple) and k[0] == x.name}
    for key in graph:
        for dep in get_dependencies(graph, key):
            if dep in readers:
                readers[dep] += 1
    assert set(readers.values()) == {2 + 2}


def test_pca_persist_reads_x_once_for_the_sketch_and_the_moments(client, rng):
    """With ``persist=True`` the moments are persisted with the first sketch: computing the
    mean afterwards runs no task on X's blocks again."""
    a = rng.standard_normal((90, 12)) + 2.0
    x = client.persist(da.from_array(a, chunks=(30, 12)))
    out = rsvd.pca(x, 2, iterated_power=1, random_state=0, persist=True)
    with distributed.get_task_stream(client) as ts:
        mean = client.compute(out["mean"], sync=True)
    np.testing.assert_allclose(mean, a.mean(axis=0), rtol=1e-12)
    assert not [r for r in ts.data if "rowpass" in str(r["key"])]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("chunks", [(40, 20), (120, 50), (25, 50)])
def test_k_above_the_rank_still_gives_orthonormal_vectors(client, rng, dtype, chunks):
    """A rank-2 matrix asked for k = 5: the last three values are (about) zero and U, Vh stay
    orthonormal, as scikit-learn's and SciPy's (the basis is a TSQR of Y, not Y W from its
    Gram matrix, which left zero columns in U)."""
    cplx = np.dtype(dtype).kind == "c"
    left = rng.standard_normal((120, 2)) + (1j * rng.standard_normal((120, 2)) if cplx else 0)
    a = (left @ rng.standard_normal((2, 50))).astype(dtype)
    U, S, Vh = dask.compute(*rsvd.randomized_svd(da.from_array(a, chunks=chunks), 5, n_iter=2,
                                                 random_state=0))
    tol = 50 * np.finfo(dtype).eps
    exact = np.linalg.svd(a.astype(np.complex128 if cplx else np.float64), compute_uv=False)
    np.testing.assert_allclose(S[:2], exact[:2], rtol=tol)
    assert np.all(S[2:] <= tol * S[0])
    assert np.abs(U.conj().T @ U - np.eye(5)).max() < tol
    assert np.abs(Vh @ Vh.conj().T - np.eye(5)).max() < tol


def test_zero_matrix_and_fewer_rows_than_the_sketch(client, rng):
    """All-zero input: zero values, orthonormal vectors; m = 8 rows under l = k + 10 columns of
    the sketch: the basis has min(m, l) columns and the values are exact."""
    U, S, Vh = dask.compute(*rsvd.randomized_svd(da.from_array(np.zeros((30, 20)), chunks=10), 3,
                                                 n_iter=1, random_state=0))
    assert np.all(S == 0) and np.abs(U.T @ U - np.eye(3)).max() < 1e-12
    a = rng.standard_normal((8, 50))
    U, S, Vh = dask.compute(*rsvd.randomized_svd(da.from_array(a, chunks=(3, 20)), 3, n_iter=1,
                                                 random_state=0))
    np.testing.assert_allclose(S, np.linalg.svd(a, compute_uv=False)[:3], rtol=1e-12)
    assert np.abs(U.T @ U - np.eye(3)).max() < 1e-12


def test_values_far_below_the_largest_are_kept(client, rng):
    """A spectrum over eleven decades, fp64: every value comes back with a relative error
    far below one (the Gram-matrix basis dropped those below ~sqrt(l eps) s_1 as zeros)."""
    m, n, r = 300, 80, 12
    s = np.logspace(0, -11, r)
    a = (np.linalg.qr(rng.standard_normal((m, r)))[0] * s) @ \
        np.linalg.qr(rng.standard_normal((n, r)))[0].T
    U, S, Vh = dask.compute(*rsvd.randomized_svd(da.from_array(a, chunks=(100, 40)), 10,
                                                 n_iter=2, random_state=0))
    assert np.max(np.abs(S - s[:10]) / s[:10]) < 1e-6
    assert np.abs(U.T @ U - np.eye(10)).max() < 1e-12


@pytest.mark.parametrize("shape", [(5000, 7), (4096, 3), (4099, 20), (3, 4), (0, 5), (1, 2)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_colsum_in_row_groups(rng, shape, order):
    """The row panels' column sums (row groups of about sqrt(rows), then the groups, then the
    leftover rows) are NumPy's, in the accumulation dtype asked for, any layout."""
    from gpulinalg.decomp.lowrank._rowpass_xp import colsum
    a = np.asarray(rng.standard_normal(shape).astype(np.float32) + 100, order=order)
    got = colsum(a, np.float64)
    assert got.dtype == np.float64 and got.shape == (shape[1],)
    np.testing.assert_allclose(got, a.astype(np.float64).sum(axis=0), rtol=1e-13, atol=1e-9)
    c = (a + 1j * a[::-1]).astype(np.complex64)
    np.testing.assert_allclose(colsum(c, np.complex128), c.astype(np.complex128).sum(axis=0),
                               rtol=1e-12, atol=1e-9)


def test_pca_moments_of_tall_panels(client, rng):
    """Panels tall enough for the grouped column sums (odd row counts, a large mean): the
    means, the total variance and the explained variances match NumPy's in float64."""
    a = rng.standard_normal((9001, 6)) * np.arange(1, 7) + 1e3
    out = rsvd.pca(da.from_array(a, chunks=(4500, 4)), 3, iterated_power=2, random_state=0)
    mean, ev, ratio = dask.compute(out["mean"], out["explained_variance"],
                                   out["explained_variance_ratio"])
    c = a - a.mean(axis=0)
    np.testing.assert_allclose(mean, a.mean(axis=0), rtol=1e-14)
    s = np.linalg.svd(c, compute_uv=False)
    np.testing.assert_allclose(ev, s[:3] ** 2 / 9000, rtol=1e-6)
    np.testing.assert_allclose(ratio, s[:3] ** 2 / (c ** 2).sum(), rtol=1e-6)


@pytest.mark.parametrize("iterated_power", [0, 1])
@pytest.mark.parametrize("keep", [False, True])
def test_pca_under_the_local_scheduler(rng, iterated_power, keep):
    """No distributed client (``scheduler="sync"``), persisted or not, with and without a power
    iteration (0: the moments come from the basis pass): the same as NumPy's."""
    a = rng.standard_normal((300, 12)) + 5
    with dask.config.set(scheduler="sync"):
        out = rsvd.pca(da.from_array(a, chunks=(70, 5)), 3, iterated_power=iterated_power,
                       n_oversamples=9, random_state=0, persist=keep)
        ev, mean, U, ratio = dask.compute(out["explained_variance"], out["mean"], out["U"],
                                          out["explained_variance_ratio"])
    s = np.linalg.svd(a - a.mean(axis=0), compute_uv=False)
    np.testing.assert_allclose(ev, s[:3] ** 2 / 299, rtol=1e-12)
    np.testing.assert_allclose(ratio, s[:3] ** 2 / (s ** 2).sum(), rtol=1e-12)
    np.testing.assert_allclose(mean, a.mean(axis=0), rtol=1e-13)
    assert np.abs(U.T @ U - np.eye(3)).max() < 1e-12


# -- how a task walks its row panel: the backend's steps and panel QR, passed in by the graph --

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("centre", [False, True])
def test_fused_panel_in_row_steps(rng, dtype, centre):
    """A fused row-panel task walked in row steps (an odd row count, two column chunks)
    gives the T_i and column sums of the panel taken in one step, up to rounding."""
    from gpulinalg.decomp.lowrank import _rowpass_xp as rp
    rows, n, l = 1001, 37, 6
    cplx = np.dtype(dtype).kind == "c"
    a = rng.standard_normal((rows, n)) + 3.0 + (1j * rng.standard_normal((rows, n)) if cplx else 0)
    a = a.astype(dtype)
    z = rng.standard_normal((n, l)).astype(dtype)
    mean = a.astype(np.complex128 if cplx else np.float64).mean(axis=0) if centre else None
    blocks = (np.ascontiguousarray(a[:, :20]), np.ascontiguousarray(a[:, 20:]))
    assert len(rp.row_steps(rows, 128)) == 8
    whole = rp.panel(z, mean, (20, 17), False, True, *blocks)
    steps = rp.panel(z, mean, (20, 17), False, True, *blocks, step=128)
    a64 = a.astype(np.complex128)
    y = (a64 - (0 if mean is None else mean)) @ z
    want = ((a64 - (0 if mean is None else mean)).conj().T @ y)
    tol = 2e-5 if np.dtype(dtype).itemsize * (2 if not cplx else 1) < 16 else 1e-12
    scale = np.abs(want).max()
    for got in (whole, steps):
        assert got["rows"] == rows and got["t"].shape == (n, l)
        np.testing.assert_allclose(got["t"], want, atol=tol * scale)
    assert steps["t"].dtype == (np.complex128 if cplx else np.float64)  # summed in double
    assert np.abs(steps["t"] - whole["t"]).max() <= tol * scale
    if centre:
        np.testing.assert_allclose(steps["c"], whole["c"], atol=tol * np.abs(y).sum(axis=0).max())
    else:
        assert steps["c"] is None and whole["c"] is None


def test_row_steps_and_the_backends_step_sizes():
    """Row steps of a given size (the last one shorter; one step without a size); the host
    engine's steps by bytes (STEP_BYTES of the panel, at least 4 l rows; QR_STEP_BYTES of q_i);
    the GPU engine takes whole panels."""
    from gpulinalg.decomp.lowrank import _rowpass_cuda, _rowpass_host as host
    from gpulinalg.decomp.lowrank import _rowpass_xp as rp
    assert rp.row_steps(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert rp.row_steps(10) == [(0, 10)] and rp.row_steps(0, 4) == [(0, 0)]
    size = host.fused_step(800 * 4, 30)
    assert size == host.STEP_BYTES // 3200
    steps = rp.row_steps(100_000, size)
    assert steps[0] == (0, size) and steps[-1][1] == 100_000
    assert all(b - a == size for a, b in steps[:-1])
    assert host.fused_step(10 ** 9, 30) == 120  # 4 l rows at least
    assert host.block_step(30, 8) == host.QR_STEP_BYTES // 240
    assert _rowpass_cuda.fused_step(3200, 30) is None and _rowpass_cuda.block_step(30, 8) is None


@pytest.mark.parametrize("rank", [10, 3])
def test_panel_qr_in_row_steps(rng, rank):
    """The basis pass's panel QR as a TSQR of row steps in place by LAPACK (``tall_qr``):
    orthonormal Q with Q R = Y_i in double precision, the range of Y_i (full rank: the same
    projector as one Householder QR), and orthonormal columns where Y_i is rank-deficient."""
    from gpulinalg.decomp._tiles._tiles_host import tall_qr
    from gpulinalg.decomp.lowrank import _rowpass_xp as rp
    rows, l = 1003, 10
    y = (rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, l))).astype(np.float32)
    one = rp.local_qr({"y": y}, None, None)
    got = rp.local_qr({"y": y}, None, None, lambda v, dt: tall_qr(v, dt, 100))
    q, r = got["q"], got["r"]
    assert q.shape == (rows, l) and r.shape == (l, l) and q.dtype == np.float64
    assert np.abs(q.T @ q - np.eye(l)).max() < 1e-13
    np.testing.assert_allclose(q @ r, y, atol=1e-12 * np.abs(y).max())
    if rank == l:
        np.testing.assert_allclose(q @ q.T, one["q"] @ one["q"].T, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_host_panel_qr_steps_tall_panels_only(rng, monkeypatch, dtype):
    """The host engine's panel QR goes through ``tall_qr`` in QR_STEP_BYTES steps when Y_i is
    taller than one step (here 4 steps), and is one LAPACK QR otherwise; both factor Y_i."""
    from gpulinalg.decomp.lowrank import _rowpass_host as host
    calls = []
    real_tall = host.tall_qr
    monkeypatch.setattr(host, "tall_qr", lambda y, dt, step: calls.append(step)
                        or real_tall(y, dt, step))
    hi = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    step = host.QR_STEP_BYTES // (10 * np.dtype(hi).itemsize)
    for rows, stepped in ((4 * step - 5, True), (step, False)):
        y = rng.standard_normal((rows, 10)).astype(dtype)
        q, r = host.panel_qr(y, hi)
        assert q.dtype == hi and q.shape == (rows, 10)
        np.testing.assert_allclose(q @ r, y, atol=1e-5 * np.abs(y).max())
        assert np.abs(q.conj().T @ q - np.eye(10)).max() < 1e-13
        assert calls == ([step] if stepped else [])
        calls.clear()


def test_basis_block_in_steps(rng):
    """A panel's rows of the basis, Q_i = q_i S_i, formed a step of q_i at a time (the host
    engine's step: 5 steps here) into the blocks' dtype: the product of the whole panel,
    rounded once."""
    from gpulinalg.decomp.lowrank import _rowpass_host as host
    from gpulinalg.decomp.lowrank import _rowpass_xp as rp
    q = rng.standard_normal((10_000, 30))
    s = rng.standard_normal((30, 30))
    step = host.block_step(30, 8)
    assert len(rp.row_steps(10_000, step)) >= 4
    whole = rp.basis_block({"q": q}, {"s": [None, s]}, 1, np.float32)
    got = rp.basis_block({"q": q}, {"s": [None, s]}, 1, np.float32, step)
    assert got.dtype == np.float32 and got.shape == (10_000, 30)
    np.testing.assert_array_equal(got, whole)
    np.testing.assert_allclose(got, (q @ s).astype(np.float32), rtol=1e-6, atol=1e-6)


def _spy_rowpass(monkeypatch, engine):
    """Record the ``step`` of each fused panel task and each panel QR ``engine`` is asked for,
    as the graph builder passes them (the spies replace the functions it reads)."""
    from gpulinalg.decomp.lowrank import _rowpass_xp as rp
    seen = {"step": [], "qr": 0}
    panel = rp.panel

    def spy_panel(*args, step=None):
        if args[4]:  # fused
            seen["step"].append(step)
        return panel(*args, step=step)

    qr = engine.panel_qr

    def spy_qr(y, dtype):
        seen["qr"] += 1
        return qr(y, dtype)
    monkeypatch.setattr(rp, "panel", spy_panel)
    monkeypatch.setattr(engine, "panel_qr", spy_qr)
    return seen


@pytest.mark.parametrize("centre", [False, True])
@pytest.mark.parametrize("keep", [False, True])
def test_numpy_graphs_walk_panels_in_the_host_engines_steps(rng, monkeypatch, centre, keep):
    """NumPy chunks: the graph hands the host engine's row steps to the fused tasks and its
    panel QR to the basis pass; with step sizes made small (many steps per panel, ``tall_qr``
    and stepped ``Q_i``), the SVD / PCA is NumPy's to rounding."""
    from gpulinalg.decomp.lowrank import _rowpass_host as host
    monkeypatch.setattr(host, "STEP_BYTES", 4096)
    monkeypatch.setattr(host, "QR_STEP_BYTES", 8192)
    seen = _spy_rowpass(monkeypatch, host)
    a, s = _low_rank(rng, 1200, 60, np.float64, r=12, decay=0.6)
    x = da.from_array(a + (5.0 if centre else 0.0), chunks=(500, 25))
    with dask.config.set(scheduler="sync"):
        if centre:
            out = rsvd.pca(x, 4, iterated_power=2, random_state=0, persist=keep)
            U, S, mean = dask.compute(out["U"], out["singular_values"], out["mean"])
            np.testing.assert_allclose(mean, a.mean(axis=0) + 5.0, rtol=1e-12, atol=1e-12)
            ref = np.linalg.svd(a - a.mean(axis=0), compute_uv=False)[:4]
        else:
            U, S, _ = dask.compute(*rsvd.randomized_svd(x, 4, n_iter=2, random_state=0,
                                                        persist=keep))
            ref = s[:4]
    np.testing.assert_allclose(S, ref, rtol=1e-10)
    assert np.abs(U.T @ U - np.eye(4)).max() < 1e-12
    want = host.fused_step(60 * 8, 14)
    assert want < 500 and seen["step"] and set(seen["step"]) == {want}
    assert seen["qr"] == 3  # one per row panel


def test_cupy_graphs_take_whole_panels_and_the_gpu_engines_qr(rng, monkeypatch):
    """CuPy chunks, emulated (the CPU stand-in for CuPy, its blocks taken for CuPy chunks by
    the graph builder; the Gaussian blocks are the host engine's, the same numbers): the graph
    hands the GPU engine's choices to the tasks (whole panels, its panel QR) and gives the
    NumPy graph's SVD to rounding."""
    from tests.support.lowrank_emulator import dev, emulated_cupy

    from gpulinalg.decomp.lowrank import _rowpass_cuda, _sketch_host
    a, s = _low_rank(rng, 700, 60, np.float64, r=12, decay=0.6)
    with dask.config.set(scheduler="sync"):
        ref = dask.compute(*rsvd.randomized_svd(da.from_array(a, chunks=(300, 25)), 4,
                                                n_iter=2, random_state=0))
        with emulated_cupy(monkeypatch):
            monkeypatch.setattr(rsvd, "on_gpu", lambda x: True)
            monkeypatch.setattr(rsvd, "_tile_gaussian", lambda x: _sketch_host.tile_gaussian)
            seen = _spy_rowpass(monkeypatch, _rowpass_cuda)
            x = da.from_array(dev(a), chunks=(300, 25), asarray=False)
            got = dask.compute(*rsvd.randomized_svd(x, 4, n_iter=2, random_state=0))
    assert seen["step"] == [None] * 6 and seen["qr"] == 3  # 2 fused passes x 3 panels
    for g, r in zip(got, ref):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], s[:4], rtol=1e-10)
