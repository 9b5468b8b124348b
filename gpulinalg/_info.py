"""What ``gpulinalg info`` reports: package versions, GPUs, CUDA libraries, the ``auto`` choice."""

import importlib
import importlib.metadata as md

from ._runtime import device as _device

PACKAGES = ("numpy", "scipy", "cupy", "nvmath", "torch")
_DISTS = {"cupy": ("cupy-cuda12x", "cupy-cuda13x", "cupy"), "nvmath": ("nvmath-python",)}
CUDA_LIBRARIES = ("cublas", "cublasLt", "cusolver", "cusparse", "cudss")


def _version(name):
    for dist in _DISTS.get(name, (name,)):
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            continue
    return "absent"


def _cudss_version():
    try:
        from nvmath.bindings import cudss
        parts = [cudss.get_property(i) for i in range(3)]
        return ".".join(str(p) for p in parts)
    except Exception:  # no nvmath, no libcudss, or a cuDSS that cannot load
        return "absent"


def _libraries():
    found = {}
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except Exception:
        return {name: "absent (cuda-pathfinder not installed)" for name in CUDA_LIBRARIES}
    for name in CUDA_LIBRARIES:
        try:
            found[name] = load_nvidia_dynamic_lib(name).abs_path or "loaded"
        except Exception as exc:  # DynamicLibNotFoundError and friends
            found[name] = f"absent ({type(exc).__name__})"
    return found


def collect():
    """Return the ``info`` report as a JSON-ready dict."""
    versions = {name: _version(name) for name in PACKAGES}
    versions["cudss"] = _cudss_version() if versions["nvmath"] != "absent" else "absent"
    gpus = []
    for g in _device.gpus():
        entry = {"index": g.index, "name": g.name,
                 "compute_capability": ".".join(map(str, g.compute_capability)),
                 "total_bytes": g.total_memory}
        try:
            entry["free_bytes"] = _device.memory_info(g.index)[0]
        except Exception as exc:  # a device that stopped answering
            entry["free_bytes"] = None
            entry["error"] = str(exc)
        gpus.append(entry)
    auto = "gpu" if _device.gpu_available() else "cpu"
    return {"versions": versions, "gpus": gpus, "libraries": _libraries(),
            "auto_backend": auto, "why_not_gpu": _device.unavailable_reason()}


def format_text(report):
    lines = ["gpulinalg " + importlib.import_module("gpulinalg").__version__, "", "packages:"]
    lines += [f"  {k:<8} {v}" for k, v in report["versions"].items()]
    lines.append("GPUs:" if report["gpus"] else "GPUs: none")
    for g in report["gpus"]:
        free = "?" if g["free_bytes"] is None else f"{g['free_bytes'] / 2**30:.1f}"
        lines.append(f"  [{g['index']}] {g['name']} (sm {g['compute_capability']}), "
                     f"{free} / {g['total_bytes'] / 2**30:.1f} GiB free")
    lines.append("CUDA libraries:")
    lines += [f"  {k:<9} {v}" for k, v in report["libraries"].items()]
    why = f" ({report['why_not_gpu']})" if report["why_not_gpu"] else ""
    lines.append(f"backend 'auto' would choose: {report['auto_backend']}{why}")
    return "\n".join(lines)
