"""The row-panel randomized SVD / PCA on a persisted input whose row panels are split across
the workers of a 2-worker CPU ``LocalCluster`` (``gpulinalg/decomp/_panels_dask.py``): tasks per
(panel, worker), equal results, no input block moved; and the one-task-per-panel graph
unchanged where every panel is on one worker."""

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")

from gpulinalg.decomp.lowrank import _panels_dask, _randomized_dask as rsvd  # noqa: E402


def _ident(b):
    return b


def _placed(client, a, chunks, where):
    """A persisted Dask array of ``a`` whose block ``(i, j)`` is held by worker
    ``where(i, j)`` (an index into the sorted worker addresses)."""
    from dask.highlevelgraph import HighLevelGraph
    workers = sorted(client.scheduler_info()["workers"])
    rows = da.core.normalize_chunks(chunks, a.shape)
    name = ("placed-"
            f"{dask.base.tokenize(a, rows, [where(i, j) for i in range(9) for j in range(9)])}")
    r0 = np.concatenate([[0], np.cumsum(rows[0])])
    c0 = np.concatenate([[0], np.cumsum(rows[1])])
    dsk = {(name, i, j): client.submit(_ident, a[r0[i]:r0[i + 1], c0[j]:c0[j + 1]],
                                       key=(name, i, j), pure=False,
                                       workers=[workers[where(i, j) % len(workers)]])
           for i in range(len(rows[0])) for j in range(len(rows[1]))}
    x = da.Array(HighLevelGraph.from_collections(name, dsk, []), name, chunks=rows,
                 dtype=a.dtype, meta=np.empty((0, 0), a.dtype))
    distributed.wait(distributed.futures_of(x))
    return x


def _alternate(i, j):
    return i + j


def _data(rng, dtype, m=200, n=90):
    a = rng.standard_normal((m, n)) * 0.8 ** np.arange(n) + 3.0
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((m, n)) * 0.7 ** np.arange(n)
    return a.astype(dtype)


def _keys(*arrays):
    return set(dict(dask.base.collections_to_expr(list(arrays)).__dask_graph__()))


def _incoming(client, clear=False):
    def fetch(dask_worker, clear=clear):
        log = [k for e in dask_worker.transfer_incoming_log for k in e["keys"]]
        if clear:
            dask_worker.transfer_incoming_log.clear()
        return log
    return [k for keys in client.run(fetch).values() for k in keys]


def test_placement_groups_each_panels_blocks_by_worker(client, rng):
    x = _placed(client, _data(rng, np.float64), (40, 23), _alternate)
    place = _panels_dask.placement(x)
    assert place.groups == (((0, 2), (1, 3)),) * 5
    assert all(len(set(ws)) == 2 for ws in place.workers)
    assert place.token == place.groups
    # no client: nothing known; a NumPy-backed (unpersisted) input: nothing known
    assert _panels_dask.placement(da.from_array(np.ones((4, 4)), chunks=2)) is None


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
@pytest.mark.parametrize("n_iter", [0, 2])
@pytest.mark.parametrize("keep", [False, True])
def test_split_panels_give_the_same_svd(client, rng, dtype, n_iter, keep):
    """Panels split across both workers (alternating blocks, odd chunks): the same U, S, Vh as
    the one-task-per-panel graph (same algorithm) up to rounding, and as NumPy's SVD."""
    a = _data(rng, dtype)
    x = _placed(client, a, (40, 23), _alternate)
    res = rsvd.randomized_svd(x, 5, n_iter=n_iter, random_state=0, persist=keep)
    if not keep:  # the split tasks (persisted layers hold futures instead)
        assert any(k[0].endswith("-y") for k in _keys(*res) if isinstance(k, tuple))
    got = client.compute(list(res), sync=True)
    ref = dask.compute(*rsvd.randomized_svd(da.from_array(a, chunks=(40, 23)), 5, n_iter=n_iter,
                                            random_state=0), scheduler="sync")
    tol = 1e-4 if np.dtype(dtype).itemsize * (2 if np.dtype(dtype).kind == "f" else 1) < 16 \
        else 1e-11
    for p, q in zip(got, ref):
        np.testing.assert_allclose(p, q, atol=tol * max(1.0, float(np.abs(q).max())))
    if n_iter:
        s = np.linalg.svd(a.astype(np.complex128), compute_uv=False)
        np.testing.assert_allclose(got[1], s[:5], rtol=10 * tol)


@pytest.mark.parametrize("iterated_power", [0, 1, 3])
def test_split_panels_pca_matches_scikit_learn(client, rng, iterated_power):
    skl = pytest.importorskip("sklearn.decomposition")
    a = _data(rng, np.float64, 300, 40) + 1e-9 * rng.standard_normal((300, 40))
    x = _placed(client, a, (70, 9), _alternate)
    out = rsvd.pca(x, 4, iterated_power=iterated_power, random_state=0)
    names = ("components", "explained_variance", "explained_variance_ratio", "mean",
             "noise_variance", "singular_values")
    got = dict(zip(names, client.compute([out[k] for k in names], sync=True)))
    ref_out = rsvd.pca(da.from_array(a, chunks=(70, 9)), 4, iterated_power=iterated_power,
                       random_state=0)
    ref = dict(zip(names, dask.compute(*[ref_out[k] for k in names], scheduler="sync")))
    for k in names:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["mean"], a.mean(axis=0), rtol=1e-13)
    if iterated_power == 3:
        sk = skl.PCA(4, svd_solver="full").fit(a)
        np.testing.assert_allclose(got["components"], sk.components_, atol=1e-7)
        np.testing.assert_allclose(got["explained_variance"], sk.explained_variance_, rtol=1e-8)


def _run(client, x, case):
    if case == "svd":
        out = list(rsvd.randomized_svd(x, 5, n_iter=2, random_state=0))
    else:
        d = rsvd.pca(x, 5, iterated_power=2, random_state=0)
        out = [d["components"], d["U"], d["mean"]]
    kept = client.persist(out)
    distributed.wait(kept)


@pytest.mark.parametrize("case", ["svd", "pca"])
@pytest.mark.parametrize("n_iter", [0, 2])
def test_no_task_needs_blocks_of_two_workers(client, rng, case, n_iter):
    """Blocks alternating between the two workers in every panel: every task of the graph
    reads input blocks of one worker only (so none has to be moved for it; the old graph's
    panel tasks read blocks of both), and a run moves thin matrices (the workers' incoming
    transfer logs). The scheduler may still move a block to balance load on small blocks
    (docs/dask.md); that is its choice, not the graph's need."""
    from dask.core import get_dependencies
    a = _data(rng, np.float32, 400, 120)
    x = _placed(client, a, (50, 30), _alternate)
    who = {k: tuple(v) for k, v in client.who_has(distributed.futures_of(x)).items()}
    if case == "svd":
        out = list(rsvd.randomized_svd(x, 5, n_iter=n_iter, random_state=0))
    else:
        d = rsvd.pca(x, 5, iterated_power=n_iter, random_state=0)
        out = [d["components"], d["U"], d["mean"]]
    graph = {}
    for o in out:
        graph.update(dict(o.__dask_graph__()))
    readers = 0
    for key in graph:
        held = {who[d] for d in get_dependencies(graph, key) if d in who}
        readers += bool(held)
        assert len(held) <= 1, key
    assert readers >= 8 * 2 * 2  # 8 panels, each split in two, in 2 or more passes
    _incoming(client, clear=True)
    _run(client, x, case)
    assert _incoming(client)  # thin matrices do cross


def test_graph_unchanged_when_every_panel_is_on_one_worker(client, rng):
    """Row-panel chunks on both workers, 2-D chunks with each panel on one worker, or all on
    one worker: the same tasks (keys) as the graph built with no placement known."""
    a = _data(rng, np.float64)
    for chunks, where in (((40, 90), _alternate), ((40, 23), lambda i, j: i),
                          ((40, 23), lambda i, j: 0)):
        x = _placed(client, a, chunks, where)
        place = _panels_dask.placement(x)
        assert place is None or place.token is None
        plain = da.Array(dict(x.__dask_graph__()), x.name, x.chunks, meta=x._meta)
        got = _keys(*rsvd.randomized_svd(x, 5, n_iter=2, random_state=0))
        with dask.config.set(scheduler="sync"):  # the same keys, no futures to look at
            want = _keys(*rsvd.randomized_svd(plain, 5, n_iter=2, random_state=0))
        assert got == want
    assert _panels_dask.placement(x) is None  # the last: all on one worker


def test_replicas_go_to_the_panels_majority_worker(client, rng):
    """A block held by both workers joins the worker that holds most of its panel."""
    a = _data(rng, np.float64, 80, 60)
    x = _placed(client, a, (40, 20), lambda i, j: 0 if j < 2 else 1)
    client.replicate([f for f in distributed.futures_of(x) if f.key[2] == 1], n=2)
    place = _panels_dask.placement(x)
    assert place.groups == (((0, 1), (2,)),) * 2


def _incoming_bytes(client):
    """Bytes of gpulinalg's task results the workers fetched from each other since the last
    call (the logs are cleared)."""
    def fetch(dask_worker):
        got = sum(nbytes for e in dask_worker.transfer_incoming_log
                  for k, nbytes in e["keys"].items() if "gpulinalg" in str(k))
        dask_worker.transfer_incoming_log.clear()
        return got
    return sum(client.run(fetch).values())


@pytest.mark.parametrize("case", ["svd", "qr"])
def test_reductions_fetch_thin_results_only(client, rng, case):
    """Row panels alternating between the workers: the reductions (the basis pass's root, the
    Rayleigh-Ritz merges, each level of a TSQR tree) read the panels' thin results only, so
    each panel-sized ``Q_i`` stays on its panel's worker: a warm run moves less than one
    ``Q_i`` in all (the graph whose reductions read the whole panel results moved half of
    them)."""
    rows, n = 6_000, 40
    a = _data(rng, np.float64, 4 * rows, n)
    x = _placed(client, a, (rows, n), lambda i, j: i)
    if case == "svd":
        def run():
            return list(rsvd.randomized_svd(x, 10, n_iter=1, random_state=0))
        panel_q = rows * 20 * 8  # Q_i: rows x (k + 10) in double precision
    else:
        from gpulinalg.decomp.qr import _tsqr_dask

        def run():
            return list(_tsqr_dask.tsqr(x, split_every=2))
        panel_q = rows * n * 8
    distributed.wait(client.persist(run()))  # the first run: durations unknown to the scheduler
    _incoming_bytes(client)
    kept = client.persist(run())
    distributed.wait(kept)
    assert _incoming_bytes(client) < panel_q
    if case == "svd":
        s = np.linalg.svd(a, compute_uv=False)
        np.testing.assert_allclose(kept[1].compute(), s[:10], rtol=1e-6)
    else:
        q, r = (v.compute() for v in kept)
        np.testing.assert_allclose(q @ r, a, atol=1e-10)
