"""``benchmarks.decomp_overhead``: the single-matrix solve's road with stand-in CUDA calls runs
on a machine without a GPU, times every step, takes the wide kernel's route and the
dispatcher's short road on every repeat, and leaves the runtime as it found it."""

import numpy as np
import pytest

pytest.importorskip("cupy")

from benchmarks.suites import decomp_overhead  # noqa: E402
from gpulinalg._runtime import device  # noqa: E402
from gpulinalg.decomp._kernels import _fused_cuda
from gpulinalg.decomp.triangular import _triangular_cuda  # noqa: E402


def test_breakdown_with_stand_ins():
    import cupy
    state, allocator = dict(device._state), cupy.cuda.get_allocator()
    info = {}
    steps = decomp_overhead.breakdown(64, calls=3, rounds=1, info=info)
    assert {"whole call", "key", "engine", "engine: launch", "engine: read-back",
            "op_stream enter + exit", "repeat (without the engine)"} <= set(steps)
    assert all(np.isfinite(v) for v in steps.values())
    # the steps are timed separately, so on a loaded host a part may time longer than its
    # whole (and a difference of two steps be negative): which is larger is the benchmark's
    # to measure, not this test's
    assert steps["whole call"] > 0 and steps["engine"] > 0
    assert info["route"] == "wide" and info["full_dispatches"] == 0 and info["decision_held"]
    assert device._state == state and cupy.cuda.get_allocator() is allocator
    assert not _triangular_cuda._PLANS and _fused_cuda.summary.__module__ == _fused_cuda.__name__


def test_checks_are_the_kernels_bits():
    assert [int(_fused_cuda.checks(s, f)) for s in (False, True) for f in (False, True)] == \
        [0, 2, 1, 3]
    assert isinstance(_fused_cuda.checks(True, True), np.int32)
