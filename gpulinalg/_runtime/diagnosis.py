"""Why the GPU is not used, in one diagnosis: the driver, CuPy, the devices, the CUDA libraries.

:func:`classify` turns the facts into a :class:`GPUStatus`; ``gpulinalg info``, the record of a
call (``last_run().reason``) and :class:`~gpulinalg.GPUUnavailableError` all say its line, so a
machine without a driver reads "no NVIDIA driver found" everywhere, with what to do about it.
"""

import ctypes
import ctypes.util
import dataclasses
import importlib.metadata as md
import sys

__all__ = ["GPUStatus", "classify", "driver_cuda_version", "cupy_cuda_major", "extra_for"]

#: Who needs each library on the GPU (without cuDSS, sparse uses cuSOLVER-Sp).
_NEEDED_BY = {"cublas": "needed by dense, decomp", "cublasLt": "needed by dense",
              "cusolver": "needed by decomp, gp, sparse", "cusparse": "needed by sparse",
              "cudss": "sparse uses cuSOLVER-Sp"}


def driver_cuda_version():
    """The CUDA version the NVIDIA driver supports, as ``(major, minor)``; ``None`` without a
    driver. Asks the driver library itself (``cuDriverGetVersion``), not CuPy."""
    names: list = {"win32": [lambda: "nvcuda.dll"], "darwin": []}.get(
        sys.platform, [lambda: "libcuda.so.1", lambda: ctypes.util.find_library("cuda")])
    for named in names:  # find_library runs ldconfig: only where the usual name is missing
        name: str | None = named()
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            version = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
                continue
        except (OSError, AttributeError):
            continue
        return divmod(version.value, 1000)[0], version.value % 1000 // 10
    return None


def cupy_cuda_major():
    """``(major, None)`` of the CUDA CuPy is built for, or ``(None, why)`` without CuPy."""
    for major, dist in ((13, "cupy-cuda13x"), (12, "cupy-cuda12x")):
        try:
            md.version(dist)
        except md.PackageNotFoundError:
            continue
        try:
            import cupy  # noqa: F401
        except Exception as exc:  # ImportError, or a broken install raising anything
            return None, f"CuPy does not import ({type(exc).__name__})"
        return major, None
    return None, "CuPy is not installed"


@dataclasses.dataclass(frozen=True)
class GPUStatus:
    """The diagnosis behind ``auto``'s choice.

    ``usable``: a GPU will be used; ``line``: one short line for people; ``hint``: what to do
    (``None`` when nothing needs doing); ``case``: a stable key (``ok``, ``no-driver``,
    ``driver-too-old``, ``no-cupy``, ``no-device``, ``disabled``, ``library-missing``);
    ``detail``: the runtime's own message.
    """

    usable: bool
    case: str
    line: str
    hint: object = None
    detail: object = None


def extra_for(driver):
    return "gpulinalg[cuda13]" if driver[0] >= 13 else "gpulinalg[cuda12]"


def classify(driver, cupy_major, cupy_problem, gpus, disabled, missing, detail=None,
             visible=None, system=None):
    """Turn the facts into a :class:`GPUStatus` (a pure function, so every case is testable).

    ``driver``: ``(major, minor)`` or ``None``; ``cupy_major``: CUDA major CuPy is built for
    (``None`` with ``cupy_problem`` saying why); ``gpus``: the GPUs found; ``disabled``: the
    reason the GPU was turned off, or ``None``; ``missing``: CUDA libraries not found;
    ``visible``: ``$CUDA_VISIBLE_DEVICES`` or ``None``; ``system``: ``platform.system()``.
    """
    if gpus and disabled is None:
        names = ", ".join(sorted({g.name for g in gpus}))
        if missing:
            lost = "; ".join(f"{m} ({_NEEDED_BY.get(m, 'a CUDA library')})" for m in missing)
            extra = extra_for(driver) if driver else "gpulinalg[cuda12] or [cuda13]"
            return GPUStatus(True, "library-missing", f"GPU: {names}; missing {lost}",
                             f"pip install '{extra}'", detail)
        return GPUStatus(True, "ok", f"GPU: {names}", None, detail)
    if disabled is not None:
        return GPUStatus(False, "disabled", f"no GPU: disabled after a CUDA error ({disabled})",
                         "restart the process; if it recurs, report it with `gpulinalg info`",
                         detail)
    if driver is None:
        where = "macOS has no CUDA" if system == "Darwin" else "no NVIDIA driver found"
        return GPUStatus(False, "no-driver", f"no GPU: {where}; running on the CPU (NumPy/SciPy)",
                         None if system == "Darwin" else
                         "for a GPU: install the NVIDIA driver, then "
                         "pip install 'gpulinalg[cuda12]' or 'gpulinalg[cuda13]'", detail)
    cuda = f"CUDA {driver[0]}.{driver[1]}"
    if cupy_major is None:
        return GPUStatus(False, "no-cupy", f"no GPU: driver found ({cuda}) but no GPU engine "
                         f"({cupy_problem})", f"pip install '{extra_for(driver)}'", detail)
    if cupy_major > driver[0]:
        return GPUStatus(False, "driver-too-old", f"no GPU: the driver supports {cuda}, CuPy is "
                         f"built for CUDA {cupy_major}",
                         f"pip install '{extra_for(driver)}' (or update the NVIDIA driver)", detail)
    if visible is not None and not visible.strip():
        return GPUStatus(False, "no-device", "no GPU: CUDA_VISIBLE_DEVICES is empty",
                         "unset CUDA_VISIBLE_DEVICES to use the GPU", detail)
    hint = "check `nvidia-smi`"
    if visible is not None:
        hint += f" and CUDA_VISIBLE_DEVICES={visible!r}"
    return GPUStatus(False, "no-device", f"no GPU: driver found ({cuda}) but no CUDA device "
                     "answers", hint, detail)
