"""``backend="auto"`` on host inputs measures both sides where its cost model is unsure, and
the repeats of a call run on the side that was faster (``gpulinalg._runtime.measured``)."""

import time

import numpy as np
import pytest

import gpulinalg
from gpulinalg._runtime import budget, host_check, measured
from gpulinalg._runtime import dispatch as _dispatch

KEY = measured.signature("test.op", 1000, 1e6)


def test_a_decisive_model_is_not_measured():
    assert measured.choose(KEY, 1e-3, 1.0) == ("cpu", False, None)
    assert measured.choose(KEY, 1.0, 1e-3) == ("gpu", False, None)


def test_close_sides_are_measured_in_turn_then_the_faster_serves():
    measured.mark_warm("test.op", "gpu")
    assert measured.choose(KEY, 1e-3, 2e-3)[:2] == ("cpu", True)
    measured.record(KEY, "cpu", 5e-3)
    side, measure, why = measured.choose(KEY, 1e-3, 2e-3)
    assert (side, measure) == ("gpu", True) and "measuring the gpu side" in why
    measured.record(KEY, "gpu", 1e-3)
    before = measured.probes()
    side, measure, why = measured.choose(KEY, 1e-3, 2e-3)
    assert (side, measure) == ("gpu", False) and why.startswith("measured here: cpu 5 ms")
    assert measured.probes() == before  # a settled signature sends nothing to be timed


def test_probes_count_the_calls_sent_to_the_other_side():
    measured.mark_warm("test.op", "gpu")
    before = measured.probes()
    measured.choose(KEY, 1e-3, 2e-3)  # the model's side, timed: not a probe
    assert measured.probes() == before
    measured.record(KEY, "cpu", 5e-3)
    measured.choose(KEY, 1e-3, 2e-3)  # the gpu side, to be timed
    assert measured.probes() == before + 1


def test_a_cold_gpu_is_not_tried_for_a_call_the_model_finds_much_cheaper_on_the_cpu():
    measured.record(KEY, "cpu", 1e-4)
    assert measured.choose(KEY, 1e-4, 1e-3) == ("cpu", False, None)  # 10x: not worth a start
    assert measured.choose(KEY, 1e-4, 3e-4)[:2] == ("gpu", True)  # within COLD_RATIO
    measured.mark_warm("test.op", "gpu")
    assert measured.choose(KEY, 1e-4, 1e-3)[:2] == ("gpu", True)


def test_a_side_modelled_slow_is_never_tried():
    measured.mark_warm("test.op", "gpu")
    slow = 2 * measured.PROBE_MAX_S
    measured.record(KEY, "cpu", 0.1)
    assert measured.choose(KEY, 0.1, slow) == ("cpu", False, None)
    other = measured.signature("test.op", 10 ** 6, 1e9)
    measured.record(other, "gpu", 0.1)
    assert measured.choose(other, slow, 0.1) == ("gpu", False, None)


def test_the_least_time_is_kept():
    for s in (3e-3, 1e-3, 2e-3):
        measured.record(KEY, "cpu", s)
    measured.record(KEY, "gpu", 1.5e-3)
    assert measured.choose(KEY, 1e-3, 1e-3)[0] == "cpu"


def test_signatures_bucket_by_half_octaves():
    assert measured.signature("a", 1024, 2 ** 20) == measured.signature("a", 1100, 1.2 * 2 ** 20)
    assert measured.signature("a", 1024, 2 ** 20) != measured.signature("a", 1500, 2 ** 20)
    assert measured.signature("a", 1024, 2 ** 20) != measured.signature("b", 1024, 2 ** 20)


def test_model_charges_transfers_to_the_gpu_and_passes_to_the_cpu():
    cpu_small, gpu_small = budget.model_seconds(1e3, 1e3)
    assert cpu_small < gpu_small  # a tiny call: the GPU's fixed cost dominates
    cpu_big, gpu_big = budget.model_seconds(1e12, 1e8)
    assert gpu_big < cpu_big


def _op(calls, cpu_s, gpu_s, flops):
    def gpu(x):
        calls.append("gpu")
        time.sleep(gpu_s)
        return 2 * x

    def cpu(x):
        calls.append("cpu")
        time.sleep(cpu_s)
        return 2 * x
    return lambda: _dispatch.dispatch(_dispatch.Op("test.sleepy", gpu, cpu, (np.ones(1000),),
                                                   nbytes=8000, flops=flops))


def test_auto_learns_the_faster_side_through_the_dispatcher(fake_gpu):
    calls = []
    call = _op(calls, cpu_s=0.02, gpu_s=0.002, flops=1e3)  # the model says cpu (about 10x)
    with gpulinalg.config(backend="gpu"):
        call()  # the operation's first GPU run: what makes the GPU side worth trying
    calls.clear()
    for _ in range(5):
        assert np.all(call() == 2)
    # first cpu run: untimed (cold); then timed; then the gpu side once; then the faster gpu
    assert calls == ["cpu", "cpu", "gpu", "gpu", "gpu"]
    rec = gpulinalg.last_run()
    assert rec.backend == "gpu" and rec.reason.startswith("measured here: cpu ")


def test_auto_keeps_the_cpu_when_it_measured_faster(fake_gpu):
    calls = []
    call = _op(calls, cpu_s=0.0, gpu_s=0.02, flops=1e3)
    with gpulinalg.config(backend="gpu"):
        call()
    calls.clear()
    for _ in range(6):
        call()
    assert calls == ["cpu", "cpu", "gpu", "cpu", "cpu", "cpu"]
    assert gpulinalg.last_run().reason.startswith("measured here")


@pytest.mark.parametrize("where", ["cpu", "gpu"], ids=["forced-cpu", "forced-device"])
def test_forced_backends_measure_nothing(fake_gpu, where):
    calls = []
    call = _op(calls, cpu_s=0.0, gpu_s=0.0, flops=1e3)
    with gpulinalg.config(backend=where):
        for _ in range(3):
            call()
    assert calls == [where] * 3 and not measured._seconds


def test_host_bytes_count_host_arrays_and_host_matrices():
    from gpulinalg.decomp.lowrank._ooc_source import HostMatrix
    a = np.ones((10, 10))
    got = host_check.arrays_bytes(
        (a, [a[:5]], {"m": HostMatrix(np.ones((4, 4)), np.float32)}, 3), None, host_only=True)
    assert got == 800 + 400 + 64
