"""``_runtime.kernels.Launcher``: a raw kernel's constant arguments packed once, the per-call
pointers and ``int32`` values written into the calling thread's parameter block, and one
``cuLaunchKernel`` with the kernel's handle, dimensions, shared memory and the caller's
stream; a kernel without a driver handle (a stand-in) is called as a CuPy kernel. The driver
call is replaced by a recorder that reads the parameter block as the driver would."""

import ctypes
import threading
import types

import numpy as np
import pytest

from gpulinalg._runtime import kernels
from gpulinalg._runtime.kernels import INT32, INT64, POINTER, Launcher

driver = pytest.importorskip("cupy_backends.cuda.api.driver")


def _array(ptr):
    return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr))


@pytest.fixture
def launches(monkeypatch):
    seen = []

    def launch_kernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = (ctypes.c_void_p * 6).from_address(params)
        words = [ctypes.c_uint64.from_address(p).value for p in slots]
        low = ctypes.c_int32.from_address(slots[4]).value  # an int32 reads 4 bytes
        seen.append(((f, gx, gy, gz, bx, by, bz, shared, stream, extra), words, low))
    monkeypatch.setattr(driver, "launchKernel", launch_kernel)
    return seen


def _kernel():
    return types.SimpleNamespace(kernel=types.SimpleNamespace(ptr=0xABC))


def test_launch_packs_constants_once_and_fills_the_slots(launches):
    template = (POINTER, np.int64(-5), np.int32(7), POINTER, INT32, np.float64(0.5))
    launch = Launcher(_kernel(), (40,), (256,), template, shared=4160)
    launch.launch(99, _array(0x1000), _array(0x2000), np.int32(-3))
    launch.launch(0, _array(0x3000), _array(0x4000), 2)
    (dims, words, low), (dims2, words2, low2) = launches
    assert dims == (0xABC, 40, 1, 1, 256, 1, 1, 4160, 99, 0) and dims2[8] == 0
    assert words[0] == 0x1000 and words[3] == 0x2000 and low == -3
    assert np.array(words[1], np.uint64).view(np.int64) == -5 and words[2] == 7
    assert np.array(words[5], np.uint64).view(np.float64) == 0.5
    assert words2[0] == 0x3000 and words2[3] == 0x4000 and low2 == 2 and words2[1:3] == words[1:3]


def test_threads_have_their_own_parameter_blocks(launches):
    launch = Launcher(_kernel(), (1,), (32,), (POINTER, INT32, np.int32(1), POINTER, INT32, INT32))
    blocks, both = [], threading.Barrier(2)

    def work(i):
        launch.launch(0, _array(i), 0, _array(i + 1), 0, 0)
        blocks.append(launch._params()[2])
        both.wait()  # both threads alive: their blocks cannot share an address
    threads = [threading.Thread(target=work, args=(i,)) for i in (16, 32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(blocks)) == 2 and sorted(w[0] for _, w, _ in launches) == [16, 32]


def test_a_kernel_without_a_driver_handle_is_called_as_cupys(launches):
    calls = []
    def stand_in(grid, block, args, shared_mem=0):
        calls.append((grid, block, args, shared_mem))
    a = _array(5)
    Launcher(stand_in, (3,), (64,), (POINTER, np.int32(4), INT32), shared=8).launch(0, a, 1)
    assert calls == [((3,), (64,), (a, np.int32(4), 1), 8)] and not launches
    assert kernels.Launcher.pack((INT32,), (-1,))[0] == 0xFFFFFFFF
    assert list(kernels.Launcher.pack((INT64, INT32), (-2, 5))) == [(1 << 64) - 2, 5]
