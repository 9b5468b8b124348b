"""The harness's step guard: a step that cannot run is one absent row saying why (out of
memory, a failure, the time budget spent), so one step never hides the others."""

from benchmarks import _harness


def test_out_of_memory_failure_and_budget_are_absent_rows(monkeypatch):
    monkeypatch.setattr(_harness, "emit", None)

    def oom():
        raise MemoryError("needed 80 GB")

    def boom():
        raise ValueError("no such solver")
    (r,) = _harness.guarded("s", "c", "i", _harness.Budget(60), oom)
    assert r["absent"].startswith("out of memory") and "80 GB" in r["absent"]
    (r,) = _harness.guarded("s", "c", "i", _harness.Budget(60), boom)
    assert r["absent"].startswith("failed: ValueError") and "no such solver" in r["absent"]
    (r,) = _harness.guarded("s", "c", "i", _harness.Budget(-1), oom)
    assert "budget" in r["absent"]
    assert _harness.guarded("s", "c", "i", _harness.Budget(60), lambda: [{"ok": 1}]) == \
        [{"ok": 1}]
