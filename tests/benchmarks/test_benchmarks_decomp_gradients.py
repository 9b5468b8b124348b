"""``benchmarks decomp_gradients``: without a GPU every case is an absent row; on a GPU the
quick run measures both sides of every case and gpulinalg's gradient matches torch.linalg's."""

import pytest

from benchmarks.suites import decomp_gradients


def test_absent_rows_without_a_gpu(monkeypatch):
    monkeypatch.setattr(decomp_gradients, "gpu_libraries", lambda: (None, None, "no GPU"))
    rows = decomp_gradients.run(quick=True)
    assert [r["case"] for r in rows] == list(decomp_gradients.CASES)
    assert all(r["absent"] == "no GPU" for r in rows)


@pytest.mark.gpu
def test_quick_rows_on_the_gpu():
    pytest.importorskip("torch")
    rows = decomp_gradients.run(quick=True)
    assert not [r for r in rows if "absent" in r]
    ours = [r for r in rows if r["impl"].startswith("gpulinalg")]
    theirs = [r for r in rows if r["impl"] == "torch.linalg"]
    assert len(ours) == len(theirs) == 6
    for r, t in zip(ours, theirs):
        assert r["where"] == "gpu" and r["case"] == t["case"]
        # float32: no worse than torch's float32 gradient (both against float64)
        bound = 10 * t["grad_rel_err"] + 1e-4 if "float32" in r["case"] else 1e-8
        assert r["grad_rel_err"] < bound, (r, t)
