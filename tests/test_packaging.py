"""The core install: the wheel requires NumPy and SciPy only (GPU engines are extras), installs
into a clean virtual environment, and works there on the CPU.

Offline by design: the wheel is built without build isolation, and the clean environment sees
NumPy and SciPy from this one (a ``.pth`` file pointing at a folder holding just those two);
``.ci/run`` repeats the install from the package index.
"""

import email.parser
import os
import pathlib
import re
import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE = {"numpy", "scipy"}
#: Distributions a core install must never pull: CUDA wheels and the GPU engines.
CUDA_NAMES = re.compile(r"^(cupy|nvmath|nvidia-|cuda-|torch|dask)", re.I)

SMOKE = r"""
import sys, importlib.metadata as md
import numpy as np, scipy.sparse as sp
import gpulinalg
from gpulinalg import decomp, dense, sparse
assert "site-packages" in gpulinalg.__file__, gpulinalg.__file__
rng = np.random.default_rng(0)
a = rng.standard_normal((40, 30))
u, s, vh = decomp.svd(a, full_matrices=False)
assert np.allclose(u * s @ vh, a) and gpulinalg.last_run().backend == "cpu"
qr = decomp.qr(a)
assert np.allclose(qr[0] @ qr[1], a)
spd = a.T @ a + 30 * np.eye(30)
low = decomp.cholesky(spd, lower=True)
assert np.allclose(low @ low.T, spd)
y = dense.matmul(a, a.T, activation="relu")
assert np.allclose(y, np.maximum(a @ a.T, 0))
lap = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr")
assert np.allclose(lap @ sparse.solve(lap, np.ones(50)), 1)
loaded = sorted(m for m in ("cupy", "nvmath", "torch", "sklearn") if m in sys.modules)
assert not loaded, loaded
print(" ".join(sorted(d.metadata["Name"].lower() for d in md.distributions())))
"""


def _requires(wheel):
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(name).decode())
    return meta.get_all("Requires-Dist") or [], meta.get_all("Provides-Extra") or []


def _name(req):
    return re.match(r"[A-Za-z0-9_.\-]+", req).group(0).lower().replace("_", "-")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("setuptools", reason="building the wheel offline needs setuptools")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "gpulinalg", src / "gpulinalg",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = src / "dist"
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "--no-build-isolation", str(src), "-w", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    (found,) = out.glob("gpulinalg-*.whl")
    return found


def test_wheel_requires_numpy_and_scipy_only(wheel):
    requires, extras = _requires(wheel)
    core = {_name(r) for r in requires if "extra ==" not in r}
    assert core == CORE
    assert {"cuda12", "cuda13", "torch", "sklearn", "dask", "test", "docs"} <= set(extras)
    cuda = {e: {_name(r) for r in requires if f"extra == \"{e}\"" in r}
            for e in ("cuda12", "cuda13")}
    assert "cupy-cuda12x" in cuda["cuda12"] and "cupy-cuda13x" in cuda["cuda13"]


def test_wheel_installs_and_runs_in_a_clean_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = subprocess.run([str(py), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # NumPy and SciPy from this environment, and nothing else from it
    core = tmp_path / "core"
    core.mkdir()
    import numpy
    import scipy
    for module in (numpy, scipy):  # the package, its .libs and its .dist-info, where they are
        home = pathlib.Path(module.__file__).resolve().parent.parent
        for entry in home.iterdir():
            if re.match(rf"^{module.__name__}([-.]|$)", entry.name, re.I) and \
                    not (core / entry.name).exists():
                os.symlink(entry, core / entry.name)
    pathlib.Path(site, "core.pth").write_text(str(core) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # this checkout stays out
    run = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q",
                          "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    smoke = subprocess.run([str(py), "-c", SMOKE], capture_output=True, text=True,
                           cwd=tmp_path, env={**env, "CUDA_VISIBLE_DEVICES": ""}, timeout=300)
    assert smoke.returncode == 0, smoke.stderr
    installed = set(smoke.stdout.split())
    assert installed == {"gpulinalg", "numpy", "scipy"}
    assert not any(CUDA_NAMES.match(n) for n in installed)
    info = subprocess.run([str(py), "-m", "gpulinalg", "info"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert info.returncode == 0, info.stderr
    assert "cupy           absent" in info.stdout and "backend 'auto' chooses: cpu" in info.stdout


def test_wheel_ships_every_cuda_source(wheel):
    """The kernels' ``.cu`` sources are package data: the wheel holds each one the checkout
    has, where :func:`gpulinalg._runtime.kernels.kernel_source` reads it."""
    ours = {p.relative_to(ROOT).as_posix() for p in (ROOT / "gpulinalg").rglob("*.cu")}
    assert ours  # the kernels' sources live in .cu files
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if n.endswith(".cu")}
    assert shipped == ours
