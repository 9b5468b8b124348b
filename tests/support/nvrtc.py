"""Compile a raw kernel's code as CuPy would (its headers, the same options) with NVRTC, to PTX
for ``compute_90`` (the H200's architecture), on a machine without a GPU.

The CPU emulations build every raw kernel they run through :func:`gpulinalg._runtime.kernels.
raw_kernel` and hand its code here (:func:`check`): a kernel whose source does not compile
fails the CPU test that builds it, before it ever reaches a GPU. NVRTC comes with the
``nvidia-cuda-nvrtc-cu12`` wheel of the ``test`` extra on Linux; without it (or where its
library cannot load) :func:`available` is false and :func:`check` does nothing. Each code and
options pair is compiled once per process.
"""

import functools
import importlib.util
import os

__all__ = ["available", "check"]

_done: set = set()


@functools.lru_cache(maxsize=1)
def _nvrtc():
    """CuPy's NVRTC binding, or ``None`` where the library is missing."""
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception:  # noqa: BLE001 (no CuPy, no library: no check)
        return None
    return nvrtc


def available():
    """Whether kernels are compiled here."""
    return _nvrtc() is not None


def _includes():
    """CuPy's header folders (its own and the CCCL copy it ships), as it passes them; found
    beside ``cupy_backends`` (an emulation stands in for ``cupy`` itself)."""
    try:
        spec = importlib.util.find_spec("cupy_backends")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return ()
    root = os.path.join(os.path.dirname(os.path.dirname(spec.origin)), "cupy", "_core",
                        "include")
    dirs = [os.path.join(root, "cupy", "_cccl", d) for d in ("cub", "thrust", "libcudacxx")]
    return tuple(f"-I{d}" for d in (*dirs, root) if os.path.isdir(d))


#: CuPy's header folders.
_INCLUDES = _includes()


def check(name, code, options=()):
    """Compile ``code`` (the kernel ``name``'s whole source) with ``options``; an
    ``AssertionError`` with NVRTC's log when it does not compile."""
    nvrtc = _nvrtc()
    key = (code, tuple(options))
    if nvrtc is None or key in _done:
        return
    prog = nvrtc.createProgram(code, f"{name}.cu", [], [])
    try:
        nvrtc.compileProgram(prog, [*options, *_INCLUDES, "-arch=compute_90"])
    except Exception as exc:  # noqa: BLE001 (the log says why)
        raise AssertionError(f"kernel {name} does not compile:\n"
                             f"{nvrtc.getProgramLog(prog)}") from exc
    finally:
        nvrtc.destroyProgram(prog)
    _done.add(key)
