"""Dispatcher policy: every branch, on a machine without a GPU (fake_gpu + injected faults)."""

import logging
import warnings

import sys

import numpy as np
import pytest

import gpulinalg
from gpulinalg._runtime import dispatch as _dispatch
from gpulinalg import testing
from tests.support import fake_gpu as fakes


def _fns(calls):
    def gpu(x):
        calls.append("gpu")
        return x * 2

    def cpu(x):
        calls.append("cpu")
        return x * 2
    return gpu, cpu


def run(calls, x, **kw):
    gpu, cpu = _fns(calls)
    return _dispatch.dispatch(_dispatch.Op("test.double", gpu, cpu, (x,), **kw))


def test_no_gpu_auto_runs_cpu_without_warning(monkeypatch):
    monkeypatch.setattr(gpulinalg._runtime.device, "gpu_available", lambda: False)
    calls = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = run(calls, np.ones(3))
    assert calls == ["cpu"] and np.all(out == 2)
    rec = gpulinalg.last_run()
    assert rec.backend == "cpu" and not rec.fell_back and rec.reason.startswith("no GPU")
    assert rec.op == "test.double" and rec.seconds >= 0


def test_backend_gpu_without_gpu_raises(monkeypatch):
    monkeypatch.setattr(gpulinalg._runtime.device, "gpu_available", lambda: False)
    with gpulinalg.config(backend="gpu"), pytest.raises(gpulinalg.GPUUnavailableError,
                                                        match="backend='gpu'"):
        run([], np.ones(3))


def test_backend_cpu_never_touches_gpu(fake_gpu):
    calls = []
    with gpulinalg.config(backend="cpu"):
        run(calls, np.ones(3))
    assert calls == ["cpu"] and gpulinalg.last_run().reason == "backend='cpu'"


def test_fits_runs_gpu(fake_gpu):
    calls = []
    out = run(calls, np.ones(3), nbytes=1 << 20)
    assert calls == ["gpu"] and np.all(out == 2)
    assert gpulinalg.last_run().backend == "gpu" and gpulinalg.last_run().device == 0


def test_estimate_too_big_goes_to_cpu_up_front(fake_gpu):
    calls = []
    with pytest.warns(gpulinalg.FallbackWarning, match="available on the GPU"):
        run(calls, np.ones(3), nbytes=1 << 40, host_nbytes=24)  # fits the host
    assert calls == ["cpu"] and gpulinalg.last_run().fell_back


def test_estimate_too_big_with_fallback_raise(fake_gpu):
    with gpulinalg.config(fallback="raise"), pytest.raises(MemoryError, match="fallback='raise'"):
        run([], np.ones(3), nbytes=1 << 40)


def test_headroom_counts(fake_gpu):
    # 16 GiB free of 32: a 10 GiB job fits with 5 % headroom, not with 30 %.
    calls = []
    run(calls, np.ones(3), nbytes=10 << 30, host_nbytes=24)
    with gpulinalg.config(vram_headroom=0.3), pytest.warns(gpulinalg.FallbackWarning):
        run(calls, np.ones(3), nbytes=10 << 30, host_nbytes=24)
    assert calls == ["gpu", "cpu"]


def test_oversize_route_instead_of_cpu(fake_gpu):
    calls = []
    gpu, cpu = _fns(calls)
    out = _dispatch.dispatch(_dispatch.Op("test.ooc", gpu, cpu, (np.ones(2),), nbytes=1 << 40,
                                          oversize_fn=lambda x: calls.append("ooc") or x * 3))
    assert calls == ["ooc"] and np.all(out == 3)
    assert gpulinalg.last_run().backend == "gpu-out-of-core"


def test_oom_falls_back_with_warning_and_same_answer(fake_gpu, caplog):
    calls = []
    x = np.arange(4.0)
    with testing.inject_fault("oom"), caplog.at_level(logging.WARNING, "gpulinalg"):
        with pytest.warns(gpulinalg.FallbackWarning, match="out of memory"):
            out = run(calls, x)
    assert calls == ["cpu"] and np.array_equal(out, x * 2) and np.array_equal(x, np.arange(4.0))
    rec = gpulinalg.last_run()
    assert rec.fell_back and "out of memory" in rec.reason
    assert any("ran on cpu" in r.getMessage() for r in caplog.records)


def test_oom_with_fallback_raise(fake_gpu):
    with testing.inject_fault("oom"), gpulinalg.config(fallback="raise"):
        with pytest.raises(MemoryError):
            run([], np.ones(3))


def test_fault_targets_one_op(fake_gpu):
    calls = []
    with testing.inject_fault("oom", op="other.op"):
        run(calls, np.ones(3))
    assert calls == ["gpu"]


def test_sticky_error_disables_gpu_once(fake_gpu, monkeypatch):
    # The fake GPU stays "available" by design; check the process-wide disable instead.
    calls = []
    with testing.inject_fault("sticky", times=2):
        with pytest.warns(gpulinalg.FallbackWarning) as first:
            run(calls, np.ones(3))
        assert gpulinalg._runtime.device.disabled_reason().startswith("sticky CUDA error")
        with pytest.warns(gpulinalg.FallbackWarning) as second:
            run(calls, np.ones(3))
    assert calls == ["cpu", "cpu"]
    # one warning for the first: the CPU run, saying the GPU is now disabled for the process
    assert len(first) == 1 and "GPU disabled for this process" in str(first[0].message)
    assert len(second) == 1 and "ran on the CPU" in str(second[0].message)
    testing.reset_gpu_state()


def test_sticky_disables_real_availability(monkeypatch):
    from gpulinalg._runtime import device
    monkeypatch.setitem(device._state, "probed", True)
    monkeypatch.setitem(device._state, "gpus", (device.GPUInfo(0, "x", (9, 0), 1),))
    monkeypatch.setitem(device._state, "disabled", None)
    assert device.gpu_available()
    device.disable_gpu("sticky CUDA error (test)")
    assert not device.gpu_available()
    assert "sticky" in device.unavailable_reason()


def test_sticky_with_fallback_raise(fake_gpu):
    with testing.inject_fault("sticky"), gpulinalg.config(fallback="raise"):
        with pytest.warns(gpulinalg.FallbackWarning, match="GPU disabled"):
            with pytest.raises(testing.InjectedCUDAError):
                run([], np.ones(3))
    testing.reset_gpu_state()


def test_other_errors_propagate(fake_gpu):
    def gpu(x):
        raise ValueError("bad value 3")
    with pytest.raises(ValueError, match="bad value 3"):
        _dispatch.dispatch(_dispatch.Op("test.err", gpu, lambda x: x, (np.ones(1),)))


@pytest.mark.parametrize("status, sticky", [(700, True), (719, True), (2, False), (None, False)])
def test_is_sticky_by_status_not_message(status, sticky):
    exc = RuntimeError("illegal address")  # the message alone never decides
    exc.status = status
    assert _dispatch.is_sticky(exc) is sticky


def test_is_sticky_follows_cause():
    inner = testing.InjectedCUDAError(719)
    try:
        try:
            raise inner
        except RuntimeError as e:
            raise KeyError("wrapped") from e
    except KeyError as outer:
        assert _dispatch.is_sticky(outer)


def test_host_inputs_small_problem_stays_on_cpu(fake_gpu):
    calls = []
    run(calls, np.ones(3), flops=100, nbytes=24)
    run(calls, np.ones(3), flops=1e12, nbytes=24)
    assert calls == ["cpu", "gpu"]
    with gpulinalg.config(backend="gpu"):
        run(calls, np.ones(3), flops=100, nbytes=24)
    assert calls[-1] == "gpu"


@pytest.mark.parametrize("same_package", [False, True])
@pytest.mark.parametrize("own_stream", [True, False])
def test_package_and_stream_options_keep_the_routing(fake_gpu, same_package, own_stream):
    """``same_package``/``own_stream`` change how a GPU call is made, not where it goes."""
    calls = []
    for flops in (100, 1e12):
        out = run(calls, np.ones(3), flops=flops, nbytes=24, same_package=same_package,
                  own_stream=own_stream)
        assert isinstance(out, np.ndarray) and np.all(out == 2)
    assert calls == ["cpu", "gpu"]
    assert gpulinalg.last_run().reason.startswith("estimate")


def test_note_adds_details(fake_gpu):
    def cpu(x):
        _dispatch.note(iterations=3)
        return x
    with gpulinalg.config(backend="cpu"):
        _dispatch.dispatch(_dispatch.Op("test.note", cpu, cpu, (np.ones(1),)))
    details = gpulinalg.last_run().details
    assert details.pop("host_bytes") == 0 and "host_allowed" in details  # the host check
    details.pop("host_allowed")
    assert details == {"iterations": 3}


def test_results_in_tuples_are_converted(fake_gpu):
    out = _dispatch.dispatch(_dispatch.Op("test.tuple", lambda x: (x, [x], {"a": x}), None,
                                          (np.ones(2),)))
    assert isinstance(out[0], np.ndarray) and isinstance(out[1][0], np.ndarray)


def test_sticky_error_in_the_memory_query_routes_to_cpu(fake_gpu, monkeypatch):
    from gpulinalg._runtime import budget

    def poisoned(nbytes, device=None):
        raise testing.InjectedCUDAError(700)
    monkeypatch.setattr(budget, "fits", poisoned)
    calls = []
    with pytest.warns(gpulinalg.FallbackWarning, match="GPU disabled"):
        out = run(calls, np.ones(2))
    assert calls == ["cpu"] and np.all(out == 2) and gpulinalg.last_run().fell_back
    testing.reset_gpu_state()
    with gpulinalg.config(fallback="raise"), pytest.warns(gpulinalg.FallbackWarning):
        with pytest.raises(testing.InjectedCUDAError):
            run(calls, np.ones(2))
    testing.reset_gpu_state()


def test_record_is_kept_when_the_call_raises():
    def boom(x):
        raise ValueError("bad input deep inside")

    with gpulinalg.config(backend="cpu"):
        _dispatch.dispatch(_dispatch.Op("test.ok", lambda x: x, lambda x: x, (np.ones(2),)))
        with pytest.raises(ValueError):
            _dispatch.dispatch(_dispatch.Op("test.boom", boom, boom, (np.ones(2),)))
    rec = gpulinalg.last_run()
    assert rec.op == "test.boom" and rec.backend == "cpu"
    assert rec.details["raised"] == "ValueError: bad input deep inside"


def test_fallback_warning_points_at_the_callers_line(fake_gpu):
    import inspect
    with testing.inject_fault("oom"), pytest.warns(gpulinalg.FallbackWarning) as caught:
        line = inspect.currentframe().f_lineno + 1
        _dispatch.dispatch(_dispatch.Op("test.op", lambda x: x, lambda x: x, (np.ones(2),)))
    assert caught[0].filename == __file__ and caught[0].lineno == line


def test_shortcut_is_recorded_and_honours_backend_gpu():
    with gpulinalg.config(backend="cpu"):
        assert _dispatch.shortcut("test.empty", 7) == 7
    rec = gpulinalg.last_run()
    assert (rec.op, rec.backend, rec.fell_back) == ("test.empty", "none", False)
    if not gpulinalg.gpu_available():
        with gpulinalg.config(backend="gpu"), pytest.raises(gpulinalg.GPUUnavailableError):
            _dispatch.shortcut("test.empty", 7)
        assert gpulinalg.last_run().details["raised"] == "GPUUnavailableError"


def test_dask_input_takes_the_dask_route_and_stays_lazy():
    da = pytest.importorskip("dask.array")
    x = da.ones((6, 4), chunks=(3, 4))
    calls = []

    def host(a):
        calls.append("host")
        return a

    out = _dispatch.dispatch(_dispatch.Op("test.dask", host, host, (x,), dask_fn=lambda a: a * 2))
    assert isinstance(out, da.Array) and calls == []
    rec = gpulinalg.last_run()
    assert (rec.op, rec.backend, rec.device) == ("test.dask", "dask", "dask")
    np.testing.assert_array_equal(out.compute(), np.full((6, 4), 2.0))


def test_dask_input_without_a_dask_route_is_refused_not_computed():
    da = pytest.importorskip("dask.array")
    x = da.ones((4, 4), chunks=2)
    with pytest.raises(TypeError, match="does not take Dask arrays"):
        _dispatch.dispatch(_dispatch.Op("test.nodask", lambda a: a, lambda a: a, (x,)))


def test_not_positive_definite_error_survives_pickling():
    import pickle
    err = gpulinalg.NotPositiveDefiniteError(5, (1, 2))
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), back.minor, back.batch_index, str(back)) == (
        type(err), 5, (1, 2), str(err))


def _validated_on_gpu(calls):
    """A public function whose validation runs out of GPU memory unless it runs on the CPU."""
    @_dispatch.front_door("test.front")
    def public(x):
        calls.append(gpulinalg.get_config().backend.value)
        if gpulinalg.get_config().backend.value != "cpu":
            raise MemoryError("validation ran out of GPU memory")
        return _dispatch.dispatch(_dispatch.Op("test.front", lambda a: a + 1, lambda a: a + 1,
                                               (x,)))
    return public


def test_front_door_oom_with_host_inputs_raises_recorded():
    """Host inputs and a plain MemoryError: the host ran out during validation, recorded as
    such (no GPU took part: not a GPU out-of-memory, not a fallback)."""
    calls = []
    with pytest.raises(MemoryError):
        _validated_on_gpu(calls)(np.ones(2))
    rec = gpulinalg.last_run()
    assert rec.op == "test.front" and "MemoryError" in rec.details["raised"]
    assert rec.backend == "none" and "host out of memory" in rec.reason and not rec.fell_back


def test_front_door_oom_on_gpu_inputs_reruns_on_the_cpu(monkeypatch):
    monkeypatch.setattr(_dispatch._arrays, "any_on_gpu", lambda values: True)
    calls = []
    with pytest.warns(gpulinalg.FallbackWarning, match="before the dispatch"):
        out = _validated_on_gpu(calls)(np.ones(2))
    assert calls == ["auto", "cpu"] and np.array_equal(out, [2.0, 2.0])
    rec = gpulinalg.last_run()
    assert (rec.backend, rec.fell_back) == ("cpu", True) and "GPU out of memory" in rec.reason
    with gpulinalg.config(fallback="raise"), pytest.raises(MemoryError):
        _validated_on_gpu(calls)(np.ones(2))
    assert "MemoryError" in gpulinalg.last_run().details["raised"]


class _DeviceSparse:
    """Stands for a CuPy sparse matrix: device memory that ``get()`` copies to the host."""

    def __init__(self, host):
        self.host = host

    def get(self):
        return self.host


def test_front_door_reruns_with_a_device_sparse_matrix_as_its_only_input(monkeypatch):
    # A CuPy sparse matrix is no array of kind_of(): the front door must still see that the
    # call's memory was on the GPU and rerun it on a SciPy copy (factorize(A) has no other input).
    import types
    import scipy.sparse as sp
    monkeypatch.setitem(sys.modules, "cupyx.scipy.sparse", types.SimpleNamespace(
        issparse=lambda x: isinstance(x, _DeviceSparse)))
    seen = []

    @_dispatch.front_door("test.front_sparse")
    def public(a):
        seen.append(type(a).__name__)
        if isinstance(a, _DeviceSparse):
            raise MemoryError("validation ran out of GPU memory")
        return a.sum()

    host = sp.csr_matrix(np.eye(3))
    with pytest.warns(gpulinalg.FallbackWarning, match="before the dispatch"):
        assert public(_DeviceSparse(host)) == 3.0
    assert seen == ["_DeviceSparse", "csr_matrix"]
    assert gpulinalg.last_run().fell_back
    with gpulinalg.config(fallback="raise"), pytest.raises(MemoryError):
        public(_DeviceSparse(host))


def test_front_door_leaves_the_dispatchers_memory_errors_alone(fake_gpu):
    calls = []

    @_dispatch.front_door("test.front")
    def public(x):
        calls.append(1)
        return _dispatch.dispatch(_dispatch.Op("test.front", lambda a: a, lambda a: a, (x,)))

    with testing.inject_fault("oom"), gpulinalg.config(fallback="raise"):
        with pytest.raises(MemoryError):
            public(np.ones(2))
    assert calls == [1]  # not run a second time


def test_headroom_is_what_a_gpu_run_may_spend_beyond_its_estimate():
    """A GPU function sizes an optional buffer from the dispatcher's measurement (no second
    budget question, no allocation tried and caught); outside a GPU run there is none."""
    seen = []

    def gpu(x):
        seen.append(_dispatch.headroom_bytes())
        return x

    with fakes.fake_gpu(free=8 << 30):
        _dispatch.dispatch(_dispatch.Op("test.headroom", gpu, lambda x: x, (np.ones(2),),
                                        nbytes=1 << 20))
        assert seen and 0 < seen[0] <= (8 << 30) - (1 << 20)
        assert _dispatch.headroom_bytes() is None  # reset when the run ends
        with gpulinalg.config(backend="cpu"):
            _dispatch.dispatch(_dispatch.Op("test.headroom", gpu, lambda x: x, (np.ones(2),),
                                            nbytes=1 << 20))
    assert len(seen) == 1
