"""What a ``config`` changes, for whom and for how long: the process default, this thread's or
this task's block, nothing published to other threads before ``__enter__``, and nothing at all
by a block that is never entered."""

import asyncio
import gc
import threading
import time
import warnings

import numpy as np
import pytest

import gpulinalg
from gpulinalg import decomp


def _backend():
    return gpulinalg.get_config().backend.value


def test_block_in_one_thread_never_reaches_another():
    # The reproducer: one thread enters and leaves gpulinalg.config(backend="gpu") in a loop
    # while another computes with the default (auto). On a machine without a GPU, any leak shows
    # as a GPUUnavailableError; on one with a GPU, as a record saying backend='gpu' was asked.
    stop = threading.Event()
    wrong, calls = [], [0]

    def flip():
        while not stop.is_set():
            with gpulinalg.config(backend="gpu"):
                pass

    def compute():
        a = np.eye(3)
        while not stop.is_set():
            if _backend() != "auto":
                wrong.append("saw " + _backend())
            try:
                decomp.cholesky(a)
            except gpulinalg.GPUUnavailableError as exc:
                wrong.append(str(exc))
            calls[0] += 1

    threads = [threading.Thread(target=flip), threading.Thread(target=compute)]
    for t in threads:
        t.start()
    time.sleep(3.0)
    stop.set()
    for t in threads:
        t.join()
    assert calls[0] > 100
    assert wrong == []


def test_kept_object_entered_leaves_the_process_as_it_was():
    before = gpulinalg.get_config()
    c = gpulinalg.config(backend="cpu")
    assert gpulinalg.get_config() == before  # nothing published before __enter__
    with c:
        assert _backend() == "cpu"
    assert gpulinalg.get_config() == before
    del c
    assert gpulinalg.get_config() == before


def test_set_config_sets_the_process_default_for_every_thread():
    before = gpulinalg.get_config()
    try:
        gpulinalg.set_config(backend="cpu")
        seen = []
        t = threading.Thread(target=lambda: seen.append(_backend()))
        t.start()
        t.join()
        assert seen == ["cpu"] and _backend() == "cpu"
    finally:
        gpulinalg.set_config(backend=before.backend)
    assert gpulinalg.get_config() == before


@pytest.mark.parametrize("make", [gpulinalg.config, gpulinalg.config_context])
def test_a_block_never_entered_changes_nothing_and_warns(make):
    """``c = gpulinalg.config(...); del c`` (or the call as a statement) leaves every setting
    as it was, and warns that set_config is what changes the process default."""
    before = gpulinalg.get_config()
    with pytest.warns(RuntimeWarning, match=r"never entered; use set_config"):
        c = make(vram_headroom=0.3)
        del c
        gc.collect()
    assert gpulinalg.get_config() == before
    with pytest.warns(RuntimeWarning, match="never entered"):
        make(backend="cpu")
        gc.collect()
    assert gpulinalg.get_config() == before


def test_entered_blocks_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = gpulinalg.config(backend="cpu")
        with c:
            pass
        del c
        with gpulinalg.config_context(backend="cpu"):
            pass
        gc.collect()


def test_set_config_inside_a_block_shows_after_it():
    before = gpulinalg.get_config()
    try:
        with gpulinalg.config_context(backend="cpu"):
            gpulinalg.set_config(fallback="raise")
            assert gpulinalg.get_config().fallback.value == "cpu"  # the block's snapshot
        assert gpulinalg.get_config().fallback.value == "raise"
    finally:
        gpulinalg.set_config(fallback=before.fallback)


def test_asyncio_tasks_keep_their_own_blocks():
    async def task(backend, seen):
        with gpulinalg.config_context(backend=backend):
            await asyncio.sleep(0.01)
            seen.append((backend, _backend()))

    async def main():
        seen = []
        await asyncio.gather(task("cpu", seen), task("gpu", seen), task("auto", seen))
        return seen

    seen = asyncio.run(main())
    assert sorted(seen) == [("auto", "auto"), ("cpu", "cpu"), ("gpu", "gpu")]
    assert _backend() == "auto"


def test_reentering_one_object_nests():
    c = gpulinalg.config_context(backend="cpu")
    with c:
        with gpulinalg.config(fallback="raise"):
            with c:
                s = gpulinalg.get_config()
                assert (s.backend.value, s.fallback.value) == ("cpu", "raise")
            assert gpulinalg.get_config().fallback.value == "raise"
    assert _backend() == "auto"
