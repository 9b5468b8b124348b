"""gpulinalg.config: validation, global setter, per-thread nestable context manager."""

import threading

import pytest

import gpulinalg

from tests.support.threads import run_in_threads



def test_defaults():
    s = gpulinalg.get_config()
    assert (s.backend.value, s.fallback.value, s.autotune) == ("auto", "cpu", False)


@pytest.mark.parametrize("bad, match", [
    (dict(backend="tpu"), "backend must be one of"),
    (dict(fallback="ignore"), "fallback must be one of"),
    (dict(vram_headroom=1.5), "vram_headroom"),
    (dict(plan_cache_size=0), "plan_cache_size"),
])
def test_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        gpulinalg.config(**bad)
    assert gpulinalg.get_config().backend.value == "auto"


def test_unknown_setting():
    with pytest.raises(TypeError, match="unknown settings"):
        gpulinalg.config(backnd="cpu")


def test_global_setter_and_restore():
    before = gpulinalg.get_config()
    gpulinalg.set_config(backend="cpu", vram_headroom=0.2)
    try:
        seen = []
        t = threading.Thread(target=lambda: seen.append(gpulinalg.get_config().backend.value))
        t.start()
        t.join()
        assert seen == ["cpu"] and gpulinalg.get_config().vram_headroom == 0.2
    finally:
        gpulinalg.set_config(backend=before.backend, vram_headroom=before.vram_headroom)
    assert gpulinalg.get_config() == before


def test_context_manager_nests_and_restores():
    with gpulinalg.config(backend="cpu"):
        with gpulinalg.config(fallback="raise"):
            s = gpulinalg.get_config()
            assert (s.backend.value, s.fallback.value) == ("cpu", "raise")
        assert gpulinalg.get_config().fallback.value == "cpu"
    assert gpulinalg.get_config().backend.value == "auto"


def test_context_manager_restores_on_error():
    with pytest.raises(KeyError):
        with gpulinalg.config(backend="gpu"):
            raise KeyError
    assert gpulinalg.get_config().backend.value == "auto"


def test_context_is_per_thread_across_16_threads():
    barrier = threading.Barrier(16)
    errors = []

    def worker(i):
        mine = ("cpu", "gpu", "auto")[i % 3]
        headroom = i / 100
        with gpulinalg.config(backend=mine, vram_headroom=headroom):
            barrier.wait()
            for _ in range(200):
                s = gpulinalg.get_config()
                if s.backend.value != mine or s.vram_headroom != headroom:
                    errors.append((i, s))
            barrier.wait()
        if gpulinalg.get_config().backend.value != "auto":
            errors.append((i, "not restored"))

    run_in_threads(worker, 16)
    assert errors == []
    assert gpulinalg.get_config().backend.value == "auto"


def test_interleaved_context_managers_leave_global_untouched():
    # two threads' `with config(...)`: both objects exist before either is entered
    a = gpulinalg.config(backend="cpu")
    b = gpulinalg.config(backend="gpu", vram_headroom=0.3)
    assert gpulinalg.get_config().backend.value == "auto"  # nothing published before __enter__
    with a:
        with b:
            assert gpulinalg.get_config().vram_headroom == 0.3
        assert gpulinalg.get_config().backend.value == "cpu"
    s = gpulinalg.get_config()
    assert (s.backend.value, s.vram_headroom) == ("auto", 0.05)


def test_global_setters_commit_in_order():
    before = gpulinalg.get_config()
    try:
        gpulinalg.set_config(backend="cpu")
        gpulinalg.set_config(backend="gpu", autotune=True)
        s = gpulinalg.get_config()
        assert (s.backend.value, s.autotune) == ("gpu", True)
    finally:
        gpulinalg.set_config(backend=before.backend, autotune=before.autotune)
    assert gpulinalg.get_config() == before


def test_many_threads_entering_at_once_restore_global():
    barrier = threading.Barrier(16)

    def worker(i):
        for _ in range(50):
            cm = gpulinalg.config(backend=("cpu", "gpu")[i % 2], vram_headroom=i / 100)
            barrier.wait()  # every thread holds a pending object before any enters
            with cm:
                assert gpulinalg.get_config().vram_headroom == i / 100
    run_in_threads(worker, 16)
    s = gpulinalg.get_config()
    assert (s.backend.value, s.vram_headroom) == ("auto", 0.05)
