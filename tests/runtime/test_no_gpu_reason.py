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
