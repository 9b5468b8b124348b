"""What ``gpulinalg info`` reports: versions, the BLAS, GPUs, CUDA libraries, the ``auto`` choice,
and, when no GPU is usable, why (one short line) and what to do about it.

:func:`gpu_status` is the one diagnosis; ``gpulinalg demo`` prints its line once at the top.
"""

import importlib.metadata as md
import os
import platform
import sys

from ._runtime import device as _device
from ._runtime.diagnosis import (GPUStatus, classify, cupy_cuda_major,  # noqa: F401
                                  driver_cuda_version)

#: ``report["versions"]`` keys and the distributions that provide them (first one installed).
DISTRIBUTIONS = {
    "gpulinalg": ("gpulinalg",), "numpy": ("numpy",), "scipy": ("scipy",),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"), "nvmath": ("nvmath-python",),
    "cuda-bindings": ("cuda-bindings",), "torch": ("torch",), "scikit-learn": ("scikit-learn",),
    "dask": ("dask",), "threadpoolctl": ("threadpoolctl",),
}
CUDA_LIBRARIES = ("cublas", "cublasLt", "cusolver", "cusparse", "cudss")
def _version(name):
    if name == "gpulinalg":  # also when run from a source tree, not installed
        from . import __version__
        return __version__
    for dist in DISTRIBUTIONS.get(name, (name,)):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "absent"


def _cudss_version():
    try:
        from nvmath.bindings import cudss
        return ".".join(str(cudss.get_property(i)) for i in range(3))
    except Exception:  # no nvmath, no libcudss, or a cuDSS that cannot load
        return "absent"


def _missing_libraries(libraries):
    return [k for k, v in libraries.items() if v.startswith("absent")]


def gpu_status(libraries=None):
    """Diagnose this machine: a :class:`GPUStatus` (probes the driver, CuPy and the devices
    once; the CUDA libraries only when a GPU is found and ``libraries`` is not given)."""
    gpus = _device.gpus()
    driver = driver_cuda_version()
    cupy_major, cupy_problem = cupy_cuda_major() if driver is not None else (None, None)
    if gpus and libraries is None:
        libraries = find_libraries()
    missing = _missing_libraries(libraries) if gpus else []
    return classify(driver, cupy_major, cupy_problem, gpus, _device.disabled_reason(), missing,
                    detail=_device.unavailable_reason(),
                    visible=os.environ.get("CUDA_VISIBLE_DEVICES"), system=platform.system())


def find_libraries():
    """``{library: path or 'absent (why)'}`` for the CUDA libraries the GPU engines load."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except Exception:
        return {name: "absent (cuda-pathfinder not installed)" for name in CUDA_LIBRARIES}
    found = {}
    for name in CUDA_LIBRARIES:
        try:
            found[name] = load_nvidia_dynamic_lib(name).abs_path or "loaded"
        except Exception as exc:  # DynamicLibNotFoundError and friends
            found[name] = f"absent ({type(exc).__name__})"
    return found


def blas_info():
    """The BLAS NumPy uses and its thread count: threadpoolctl when installed (it sees the
    library actually loaded), else NumPy's build configuration (threads unknown)."""
    import numpy as np
    try:
        from threadpoolctl import threadpool_info
        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    except Exception:  # not installed, or a platform it cannot inspect
        pools = []
    if pools:
        p = pools[0]
        return {"name": p.get("internal_api"), "version": p.get("version"),
                "threads": p.get("num_threads"), "source": "threadpoolctl",
                "path": p.get("filepath")}
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return {"name": blas.get("name"), "version": blas.get("version"), "threads": None,
                "source": "numpy.show_config", "path": None}
    except Exception:  # NumPy < 1.25 has no mode="dicts"
        return {"name": "unknown", "version": None, "threads": None, "source": None, "path": None}


def _gpus():
    out = []
    for g in _device.gpus():
        entry = {"index": g.index, "name": g.name,
                 "compute_capability": ".".join(map(str, g.compute_capability)),
                 "total_bytes": g.total_memory}
        try:
            entry["free_bytes"] = _device.memory_info(g.index)[0]
        except Exception as exc:  # a device that stopped answering
            entry["free_bytes"] = None
            entry["error"] = str(exc)
        out.append(entry)
    return out


def collect():
    """Return the ``info`` report as a JSON-ready dict."""
    versions = {name: _version(name) for name in DISTRIBUTIONS}
    versions["python"] = platform.python_version()
    versions["cudss"] = _cudss_version() if versions["nvmath"] != "absent" else "absent"
    libraries = find_libraries()
    status = gpu_status(libraries)
    driver = driver_cuda_version()
    return {"gpulinalg": versions["gpulinalg"], "python": versions["python"],
            "platform": f"{platform.system()} {platform.machine()}", "versions": versions,
            "blas": blas_info(), "driver_cuda": None if driver is None else "{}.{}".format(*driver),
            "gpus": _gpus(), "libraries": libraries,
            "auto_backend": "gpu" if status.usable else "cpu",
            "gpu_status": status.line, "gpu_case": status.case, "hint": status.hint,
            "why_not_gpu": None if status.usable else status.detail,
            "dask_cluster": dask_cluster()}


def dask_cluster():
    """:func:`gpulinalg.distributed.cluster_info` of the default Dask client, or ``None``: only
    when ``distributed`` is already imported (nothing of Dask is imported or started here)."""
    if "distributed" not in sys.modules:
        return None
    from .distributed import cluster_info
    try:
        return cluster_info()
    except Exception as exc:  # a client whose scheduler stopped answering
        return {"error": f"{type(exc).__name__}: {exc}"}


def format_text(report):
    """The report for people: versions first, then what ``auto`` does and why, then the hint."""
    v = report["versions"]
    lines = [f"gpulinalg {report['gpulinalg']}  (Python {report['python']}, "
             f"{report['platform']})", "", "packages:"]
    lines += [f"  {k:<14} {val}" for k, val in v.items() if k not in ("gpulinalg", "python")]
    b = report["blas"]
    threads = "threads unknown" if b["threads"] is None else f"{b['threads']} threads"
    lines.append(f"BLAS (NumPy): {b['name']} {b['version'] or ''} ({threads})".replace("  ", " "))
    driver = report["driver_cuda"]
    lines.append(f"NVIDIA driver: {'CUDA ' + driver if driver else 'none found'}")
    lines.append("GPUs:" if report["gpus"] else "GPUs: none")
    for g in report["gpus"]:
        free = "?" if g["free_bytes"] is None else f"{g['free_bytes'] / 2**30:.1f}"
        lines.append(f"  [{g['index']}] {g['name']} (sm {g['compute_capability']}), "
                     f"{free} / {g['total_bytes'] / 2**30:.1f} GiB free")
    lines.append("CUDA libraries:")
    lines += [f"  {k:<9} {val}" for k, val in report["libraries"].items()]
    cluster = report.get("dask_cluster")
    if cluster is not None:
        lines.append(f"Dask cluster: {cluster['error']}" if "error" in cluster else
                     f"Dask cluster: {cluster['scheduler']}, {cluster['workers']} workers, "
                     f"{cluster['threads']} threads, {cluster['gpus']} with a GPU")
    lines.append(f"backend 'auto' chooses: {report['auto_backend']} — {report['gpu_status']}")
    if report["hint"]:
        lines.append(f"hint: {report['hint']}")
    return "\n".join(lines)
