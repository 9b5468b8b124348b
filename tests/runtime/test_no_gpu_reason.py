"""Why the GPU is not used is one diagnosis: ``last_run().reason``, ``GPUUnavailableError`` and
``gpulinalg info`` say the same thing and name what to do (a machine with CuPy but no driver
reads "no NVIDIA driver found", not the CUDA runtime's "driver version is insufficient")."""

from gpulinalg._runtime import device, diagnosis


def test_no_driver_is_named_with_its_fix(monkeypatch):
    monkeypatch.setattr(diagnosis, "driver_cuda_version", lambda: None)
    why = device._why_not("CUDARuntimeError: cudaErrorInsufficientDriver")
    assert why.startswith("no NVIDIA driver found")
    assert "pip install 'gpulinalg[cuda12]' or 'gpulinalg[cuda13]'" in why
    assert "cudaErrorInsufficientDriver" in why  # the runtime's own words kept, last


def test_driver_older_than_cupy_is_named(monkeypatch):
    monkeypatch.setattr(diagnosis, "driver_cuda_version", lambda: (12, 4))
    monkeypatch.setattr(diagnosis, "cupy_cuda_major", lambda: (13, None))
    why = device._why_not("CUDARuntimeError")
    assert "the driver supports CUDA 12.4, CuPy is built for CUDA 13" in why
    assert "gpulinalg[cuda12]" in why


def test_info_and_the_runtime_agree(monkeypatch):
    from gpulinalg import _info
    monkeypatch.setattr(diagnosis, "driver_cuda_version", lambda: None)
    monkeypatch.setattr(_info, "driver_cuda_version", lambda: None)
    line = _info.gpu_status().line.removeprefix("no GPU: ")
    assert device._why_not("x").startswith(line.split(";")[0])


def test_without_a_driver_the_probe_loads_no_cuda_package(monkeypatch):
    """A machine without the NVIDIA driver is told so before CuPy or the CUDA runtime is
    imported: auto runs on the CPU without touching CUDA (checked in a fresh process)."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from gpulinalg._runtime import device, diagnosis\n"
            "diagnosis.driver_cuda_version = lambda: None\n"
            "import numpy as np, gpulinalg\n"
            "from gpulinalg import decomp\n"
            "decomp.qr(np.eye(3))\n"
            "assert not gpulinalg.gpu_available()\n"
            "print(gpulinalg.last_run().backend, sorted(m for m in sys.modules\n"
            "      if m.split('.')[0] in ('cupy', 'cupyx', 'nvmath', 'cuda')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cpu", "[]"], out.stdout
    monkeypatch.setattr(diagnosis, "driver_cuda_version", lambda: None)
    gpus, why = device._probe()
    assert gpus == () and why.startswith("no NVIDIA driver found")
