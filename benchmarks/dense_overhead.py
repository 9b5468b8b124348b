"""CPU-side cost of one ``gpulinalg.dense.matmul`` call: validation + dispatcher + plan lookup.

Runs anywhere: the dispatcher's ``fake_gpu`` hook takes the GPU route with NumPy arrays, and the
GPU function is replaced by the plan-cache lookup alone (key built exactly as on the GPU, from
shape, strides, dtype and pointer alignment), so what is timed is everything but the cuBLASLt
launch and the result allocation.
"""

import collections
import time

import numpy as np

import gpulinalg
from gpulinalg._runtime import testing
from gpulinalg.dense import _matmul_api


class _FakeData:
    __slots__ = ("ptr", "device_id")

    def __init__(self, ptr):
        self.ptr, self.device_id = ptr, 0


_plans = collections.OrderedDict()


def _lookup_only(a, b, bias, c, spec):
    """Stand-in GPU function: the transposed-product views and the cache lookup of the hot path."""
    A, B = b.swapaxes(-1, -2), a.swapaxes(-1, -2)
    da, db = _FakeData(A.ctypes.data), _FakeData(B.ctypes.data)
    key = (da.device_id, A.dtype, "RELU_BIAS", spec.compute_type, spec.autotune, A.shape,
           A.strides, B.shape, B.strides, da.ptr & 255, db.ptr & 255, None,
           None if bias is None else (("bias", (bias.shape, bias.strides, 0)),))
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = object()
    else:
        _plans.move_to_end(key)
    return A.swapaxes(-1, -2)


def measure(n=128, calls=2000, runs=9):
    """Microseconds of CPU time per ``matmul(a, b, bias=bias, activation="relu")`` call.

    The best of ``runs`` runs of ``calls`` calls, in process CPU time, so that other processes
    competing for the cores do not inflate the figure.
    """
    a = np.ones((n, n), np.float16)
    b = np.ones((n, n), np.float16)
    bias = np.ones(n, np.float16)
    real = _matmul_api._matmul_cuda.matmul
    _matmul_api._matmul_cuda.matmul = _lookup_only
    try:
        with testing.fake_gpu(), gpulinalg.config(backend="gpu"):
            best = float("inf")
            for _ in range(runs):
                t0 = time.process_time()
                for _ in range(calls):
                    _matmul_api.matmul(a, b, bias=bias, activation="relu")
                best = min(best, (time.process_time() - t0) / calls * 1e6)
    finally:
        _matmul_api._matmul_cuda.matmul = real
    return best


if __name__ == "__main__":
    print(f"CPU-side overhead per matmul call (fake GPU, no launch): {measure():.1f} us")
