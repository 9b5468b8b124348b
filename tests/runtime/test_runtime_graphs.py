"""Chains of launches replayed as graphs (``_runtime.graphs``): captured once per thread and
key, the work run exactly once per call, chains that cannot be captured run directly, and a
batched factorization replayed through its own buffers gives every call its own result.

A fake stream stands in for CUDA's capture: launches made while it captures are recorded
into the graph instead of run."""

import sys
import threading
import types

import numpy as np
import pytest

from gpulinalg import NotPositiveDefiniteError
from gpulinalg._runtime import graphs


class Stream:
    ptr = 7

    def __init__(self):
        self.recording = None

    def is_capturing(self):
        return self.recording is not None

    def begin_capture(self):
        self.recording = []

    def end_capture(self):
        ops, self.recording = self.recording, None
        if ops is None or "invalid" in ops:
            raise RuntimeError("capture invalidated")
        return types.SimpleNamespace(launch=lambda stream: [op() for op in ops])


@pytest.fixture
def stream(monkeypatch):
    s = Stream()
    cuda = types.SimpleNamespace(get_current_stream=lambda: s)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    graphs.clear()
    yield s
    graphs.clear()


def launcher(stream, log):
    """A library routine: appends its argument to ``log`` when it runs; recorded instead
    while the stream captures."""
    def launch(value):
        op = lambda: log.append(value)  # noqa: E731
        if stream.recording is not None:
            stream.recording.append(op)
        else:
            op()
    return launch


def test_chain_is_captured_once_and_runs_once_per_call(stream):
    log, records = [], []
    launch = launcher(stream, log)

    def record(buffers):
        records.append(1)
        launch(buffers["v"])

    for i in range(4):
        chain = graphs.entry(("k", 0), lambda: {"v": 5})
        chain.launch(record)
        assert log == [5] * (i + 1)  # the first call's work ran once, after its capture
    assert len(records) == 1
    assert graphs.entry(("k", 0), lambda: {"v": 6}).buffers == {"v": 5}  # kept per key
    assert graphs.entry(("k", 1), lambda: {"v": 6}).buffers == {"v": 6}


def test_warm_chain_runs_directly_first_then_is_captured(stream):
    log, captured = [], []
    launch = launcher(stream, log)

    def record(buffers):
        captured.append(stream.recording is not None)
        launch(buffers)

    for i in range(4):
        graphs.entry(("warm",), lambda: 3).launch(record, warm=2)
        assert log == [3] * (i + 1)
    # two direct runs, then one capture (its graph replayed on the third and fourth call)
    assert captured == [False, False, True]
    assert graphs.entry(("warm",), lambda: 3).graph is not None


def test_uncapturable_chain_runs_directly_and_is_not_tried_again(stream):
    log, records = [], []

    def record(buffers):
        records.append(1)
        if stream.recording is not None:
            stream.recording.append("invalid")  # e.g. a synchronizing call: invalidated
        else:
            log.append(buffers)

    for _ in range(3):
        graphs.entry(("bad",), lambda: "b").launch(record)
    assert log == ["b", "b", "b"] and len(records) == 4  # one failed capture, three runs
    assert graphs.entry(("bad",), lambda: "b").graph is False


def test_chain_raising_under_capture_ends_the_capture(stream):
    calls = []

    def record(buffers):
        calls.append(stream.recording is not None)
        if stream.recording is not None:
            raise RuntimeError("operation not permitted when stream is capturing")

    graphs.entry(("raise",), lambda: None).launch(record)
    assert calls == [True, False] and stream.recording is None


def test_disabled_or_nested_capture_runs_directly(stream, monkeypatch):
    log = []
    monkeypatch.setattr(graphs, "ENABLED", False)
    graphs.entry(("off",), lambda: 1).launch(lambda b: log.append(b))
    monkeypatch.setattr(graphs, "ENABLED", True)
    stream.recording = []  # the caller's own capture is under way: join it, no graph
    graphs.entry(("nested",), lambda: 2).launch(lambda b: log.append(b))
    assert log == [1, 2] and graphs.entry(("nested",), lambda: 2).graph is False


def test_entries_are_per_thread_and_bounded(stream, monkeypatch):
    monkeypatch.setattr(graphs, "MAX_ENTRIES", 3)
    mine = graphs.entry(("t",), lambda: "main")
    seen = []
    thread = threading.Thread(target=lambda: seen.append(graphs.entry(("t",), lambda: "other")))
    thread.start()
    thread.join()
    assert mine.buffers == "main" and seen[0].buffers == "other"
    for i in range(3):
        graphs.entry(("fill", i), lambda: i)
    assert graphs.entry(("t",), lambda: "again").buffers == "again"  # emptied when full


def test_entries_per_address_keep_their_buffers(stream, monkeypatch):
    """``x = f(a)`` in a loop alternates between two places: each keeps its own entry (so
    its pointers stay filled); a third place takes over the least recently used one."""
    monkeypatch.setattr(graphs, "SLOTS", 2)
    made = []

    def get(address):
        return graphs.entry(("k",), lambda: made.append(address) or {"at": address},
                            address=address)
    a, b = get(100), get(200)
    assert a is not b and len(made) == 2
    assert get(100) is a and get(200) is b and get(100) is a and len(made) == 2
    assert get(300) is b  # 200 was used less recently than 100
    assert get(100) is a and get(200) is b and len(made) == 2  # 300's slot, used least
    assert graphs.entry(("k",), lambda: "plain").buffers == "plain"  # no address: its own


def test_replayed_batched_cholesky_factors_every_new_stack(monkeypatch, rng):
    """Replays reuse the first call's closure: the pointer array must follow each new stack."""
    from tests.support.cusolver_emulator import CALLS, dev, emulated_gpu, plain

    from gpulinalg.decomp._gpu import _batched_plan
    from gpulinalg.decomp.cholesky import _cholesky_cuda
    with emulated_gpu(monkeypatch):
        monkeypatch.setitem(_batched_plan.TABLE, "potrf", ((np.inf, 2, "batched"),))
        first = {}

        def capture(cupy, record, buffers):  # a graph: the first closure, replayed
            first.setdefault("record", record)
            return types.SimpleNamespace(launch=lambda stream: first["record"](buffers))
        monkeypatch.setattr(graphs, "_capture", capture)
        graphs.clear()
        CALLS.clear()
        results = []  # kept: every factor lands at a new address
        for _ in range(3):
            x = rng.standard_normal((4, 9, 9))
            a = x @ x.swapaxes(-1, -2) / 9 + np.eye(9)
            results.append(_cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8")))
            assert np.allclose(plain(results[-1]), np.linalg.cholesky(a))
        assert CALLS["fill_pointers"] == 3 and len(first) == 1
        a[2] = -np.eye(9)  # a failing matrix is still named through the copied codes
        with pytest.raises(NotPositiveDefiniteError) as err:
            _cholesky_cuda.cholesky(dev(a), True, False, True, np.dtype("f8"))
        assert "2" in str(err.value)
        assert CALLS["potrf_batched"] == 4
    graphs.clear()
