"""``gpulinalg info`` and ``gpulinalg demo``: what they report, how they time, how they fail."""

import io
import json
import os
import platform
import re
import subprocess
import sys
import time

import pytest

import gpulinalg
from gpulinalg import _demo, _info
from gpulinalg._runtime import GPUInfo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H200 = GPUInfo(0, "NVIDIA H200", (9, 0), 141 << 30)


def _gpulinalg(*args, **env):
    return subprocess.run([sys.executable, "-m", "gpulinalg", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT, **env})


# --- the no-GPU diagnosis: one short line per case, and the extra that fits the driver -----

@pytest.mark.parametrize("driver, extra", [((12, 4), "cuda12"), ((13, 0), "cuda13")])
def test_driver_without_engine_names_the_extra_of_its_cuda_major(driver, extra):
    s = _info.classify(driver, None, "CuPy is not installed", (), None, [])
    assert (s.usable, s.case) == (False, "no-cupy")
    assert f"CUDA {driver[0]}.{driver[1]}" in s.line and "no GPU engine" in s.line
    assert s.hint == f"pip install 'gpulinalg[{extra}]'"


def test_no_driver_says_so_not_insufficient_driver():
    s = _info.classify(None, 12, None, (), None, [], detail="cudaErrorInsufficientDriver: ...",
                       system="Linux")
    assert s.case == "no-driver" and "no NVIDIA driver found" in s.line
    assert "Insufficient" not in s.line and "install the NVIDIA driver" in s.hint
    mac = _info.classify(None, None, None, (), None, [], system="Darwin")
    assert "macOS has no CUDA" in mac.line and mac.hint is None


def test_driver_older_than_cupy():
    s = _info.classify((12, 2), 13, None, (), None, [])
    assert s.case == "driver-too-old"
    assert "supports CUDA 12.2" in s.line and "CUDA 13" in s.line
    assert "gpulinalg[cuda12]" in s.hint and "update the NVIDIA driver" in s.hint


def test_no_device_and_hidden_devices():
    hidden = _info.classify((13, 0), 13, None, (), None, [], visible="")
    assert hidden.case == "no-device" and "CUDA_VISIBLE_DEVICES is empty" in hidden.line
    none = _info.classify((13, 0), 13, None, (), None, [], visible="3")
    assert none.case == "no-device" and "'3'" in none.hint


def test_disabled_gpu_and_missing_library():
    off = _info.classify((13, 0), 13, None, (H200,), "illegal address", [])
    assert (off.usable, off.case) == (False, "disabled") and "illegal address" in off.line
    lib = _info.classify((13, 0), 13, None, (H200,), None, ["cudss"])
    assert (lib.usable, lib.case) == (True, "library-missing")
    assert "cudss" in lib.line and lib.hint == "pip install 'gpulinalg[cuda13]'"
    ok = _info.classify((13, 0), 13, None, (H200,), None, [])
    assert (ok.usable, ok.case, ok.hint) == (True, "ok", None) and "NVIDIA H200" in ok.line


@pytest.mark.parametrize("args", [
    (None, None, None, (), None, []), ((12, 0), None, "CuPy is not installed", (), None, []),
    ((12, 0), 13, None, (), None, []), ((13, 0), 13, None, (), None, [], None, "")])
def test_every_no_gpu_line_is_short(args):
    assert len(_info.classify(*args).line) <= 100


# --- gpulinalg info ------------------------------------------------------------------------

def test_info_json_reports_versions_blas_and_the_auto_choice():
    out = _gpulinalg("info", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["gpulinalg"] == gpulinalg.__version__ == report["versions"]["gpulinalg"]
    assert report["python"] == platform.python_version()
    assert set(report["versions"]) >= {"numpy", "scipy", "cupy", "nvmath", "cuda-bindings",
                                       "torch", "cudss", "python"}
    import numpy as np
    assert report["versions"]["numpy"] == np.__version__
    assert report["blas"]["name"] and report["blas"]["source"] in ("threadpoolctl",
                                                                   "numpy.show_config")
    if report["blas"]["source"] == "threadpoolctl":
        assert report["blas"]["threads"] >= 1
    assert (report["auto_backend"] == "gpu") == bool(report["gpus"])
    assert report["auto_backend"] == ("gpu" if gpulinalg.gpu_available() else "cpu")
    if report["auto_backend"] == "cpu":
        assert report["gpu_status"].startswith("no GPU:") and report["why_not_gpu"]


def test_info_text_names_the_reason_and_the_hint():
    report = _info.collect()
    text = _info.format_text(report)
    assert text.startswith(f"gpulinalg {gpulinalg.__version__}  (Python ")
    assert "BLAS (NumPy):" in text and "backend 'auto' chooses:" in text
    assert report["gpu_status"] in text
    assert (f"hint: {report['hint']}" in text) == bool(report["hint"])


def test_blas_info_without_threadpoolctl(monkeypatch):
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # import raises ImportError
    info = _info.blas_info()
    assert info["source"] == "numpy.show_config" and info["threads"] is None and info["name"]


# --- gpulinalg demo ------------------------------------------------------------------------

@pytest.mark.parametrize("ours, ref, text", [
    (1.0, 3.2, "3.2× faster than X"), (2.0, 1.0, "2.0× slower than X"),
    (1.0, 1.0, "1.0× faster than X"), (1.0, None, "")])
def test_ratio_is_labelled_and_the_right_way_round(ours, ref, text):
    assert _demo.ratio(ours, ref, "X") == text


def test_ratio_within_the_spread_of_the_runs_is_not_printed():
    assert _demo.ratio(1.0, 1.2, "X", noise=0.3) == "as fast as X (within the runs' spread, 30%)"
    assert _demo.ratio(1.0, 1.5, "X", noise=0.3) == "1.5× faster than X"
    assert _demo.ratio(1.5, 1.0, "X", noise=0.6) == "as fast as X (within the runs' spread, 60%)"


def test_compare_times_warm_runs_after_a_cold_one(monkeypatch):
    monkeypatch.setattr(_demo._tour, "size", "small")
    calls = {"ours": 0, "ref": 0}

    def ours():
        calls["ours"] += 1
        return calls["ours"]

    def ref():
        calls["ref"] += 1
        return 0
    row = _demo.compare("step", ours, ref, "X", lambda a, b: a > 1, place=lambda: "cpu")
    most = _demo._RUNS["small"][0]
    assert row["runs"] == most  # instant calls: the most runs the size allows
    assert calls == {"ours": 1 + most, "ref": 1 + most}  # a cold (ours) / warm-up (ref) call each
    assert row["check"] and row["cold_seconds"] > 0 and row["reference_seconds"] > 0
    assert row["same_engine"]  # on the CPU the engine is the reference's library
    assert "the same engine as X on the CPU" in _demo.format_row(row)
    own = _demo.compare("step", ours, ref, "X", lambda a, b: True, place=lambda: "cpu",
                        own_cpu_engine=True)
    assert not own["same_engine"]
    gpu = _demo.compare("step", ours, ref, "X", lambda a, b: True, place=lambda: "gpu")
    assert not gpu["same_engine"] and "same engine" not in _demo.format_row(gpu)


def test_warm_runs_leave_out_the_ones_auto_spent_measuring_the_other_side(monkeypatch):
    """A run in which backend="auto" timed the side its model did not choose (a slow call
    once per signature) would make the warm spread hide any ratio: it is not counted."""
    from gpulinalg._runtime import measured
    monkeypatch.setattr(_demo._tour, "size", "small")
    n = {"calls": 0}

    def ours():
        n["calls"] += 1
        if n["calls"] in (2, 3):  # these two went to the other side, ten times slower
            measured._probes[0] += 1
            time.sleep(0.02)
        else:
            time.sleep(0.002)
        return n["calls"]
    _, median, runs, spread = _demo._median_runs(ours)
    most = _demo._RUNS["small"][0]
    assert runs == most and n["calls"] == most + 2
    assert median < 0.01 and spread < 2


def test_format_row_keeps_the_no_gpu_reason_off_the_rows():
    row = dict(step="s", where="cpu (no GPU: no NVIDIA driver found)", seconds=0.5,
               cold_seconds=1.0, reference="scipy", reference_seconds=1.0, check=True)
    line = _demo.format_row(row)
    assert "no GPU" not in line and "2.0× faster than scipy" in line and "1.00 s" in line
    row.update(where="cpu (host inputs; too small for the GPU to pay)", check=False)
    line = _demo.format_row(row)
    assert line.lstrip().startswith("FAILED") and "(host inputs; too small" in line


def _tour(monkeypatch, steps):
    monkeypatch.setattr(_demo, "_steps", lambda: iter(steps))
    out = io.StringIO()
    return _demo.run_demo(size="small", out=out), out.getvalue()


def _row(check):
    return dict(step="x", where="cpu", seconds=1e-3, check=check)


def test_a_failing_check_or_a_broken_step_fails_the_tour(monkeypatch):
    status, text = _tour(monkeypatch, [("a", lambda small: [_row(True)]),
                                       ("b", lambda small: [_row(False)])])
    assert status == 1 and "SOME CHECKS FAILED" in text

    def broken(small):
        raise ModuleNotFoundError("No module named 'gpulinalg.decomp._pca'",
                                  name="gpulinalg.decomp._pca")
    status, text = _tour(monkeypatch, [("a", broken), ("b", lambda small: [_row(True)])])
    assert status == 1 and "FAILED with an error" in text and "[b]" in text


def test_a_step_missing_an_optional_package_is_skipped(monkeypatch):
    def needs_sklearn(small):
        raise ModuleNotFoundError("No module named 'sklearn'", name="sklearn")
    status, text = _tour(monkeypatch, [("gp", needs_sklearn), ("b", lambda small: [_row(True)])])
    assert status == 0 and "skipped: needs sklearn (pip install 'gpulinalg[sklearn]')" in text


def test_demo_without_a_gpu_picks_small_sizes_and_passes():
    """``gpulinalg demo`` as ``make demo`` runs it, with no GPU visible: small sizes by itself,
    every module's rows, every check passing, the no-GPU reason once at the top, every
    comparison labelled."""
    out = _gpulinalg("demo", CUDA_VISIBLE_DEVICES="")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    head = text.splitlines()[0]
    assert head.startswith("gpulinalg demo, small sizes — no GPU:")
    assert text.count("no GPU") == 1
    for section in ("[runtime]", "[dense]", "[decomp]", "[sparse]", "[gp]"):
        assert section in text
    assert "FAILED" not in text and "all checks passed" in text
    assert re.search(r"\d+\.\d× (faster|slower) than \w", text)
    assert not re.search(r"\dx vs ", text)  # the old unlabelled ratio


def test_rows_of_marks_a_row_needing_a_missing_package_skipped():
    def pca_step(small):
        raise ModuleNotFoundError("No module named 'sklearn.decomposition'",
                                  name="sklearn.decomposition")

    def qr_step(small):
        return _row(True)

    def broken_step(small):
        raise ModuleNotFoundError("No module named 'gpulinalg.nope'", name="gpulinalg.nope")
    rows = _demo.rows_of([qr_step, pca_step], True)
    assert [r["step"] for r in rows] == ["x", "pca"] and all(r["check"] for r in rows)
    line = _demo.format_row(rows[1])
    assert "skipped" in line and "pip install 'gpulinalg[sklearn]'" in line
    with pytest.raises(ModuleNotFoundError):
        _demo.rows_of([broken_step], True)


def test_compare_times_a_reference_slower_than_the_budget_once(monkeypatch):
    monkeypatch.setattr(_demo._tour, "size", "small")
    monkeypatch.setitem(_demo._RUNS, "small", (5, 0.0))  # every call outlasts the budget
    calls = {"ours": 0, "ref": 0}

    def count(name):
        def fn():
            calls[name] += 1
            return 1
        return fn
    row = _demo.compare("step", count("ours"), count("ref"), "X", lambda a, b: a == b,
                        place=lambda: "cpu")
    assert calls == {"ours": 2, "ref": 1} and row["runs"] == 1 and row["check"]


@pytest.mark.parametrize("shape", [(37, 19, 50), (50, 19, 37), (8, 3, 8), (1, 5, 130)])
def test_demo_unpacks_the_relu_mask_of_every_aux_layout(shape):
    """The dense step's backward reference takes its mask from the forward's aux."""
    import numpy as np

    from gpulinalg.dense import matmul
    from gpulinalg.dense._demo import relu_mask
    m, k, n = shape
    rng = np.random.default_rng(m * n)
    x, w, b = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal(n)
    y, aux = matmul(x, w, bias=b, activation="relu", return_aux=True)
    mask = relu_mask(aux)
    assert mask.shape == (m, n) and mask.dtype == bool
    np.testing.assert_array_equal(mask, y > 0)


def test_demo_unpacks_an_untransposed_aux():
    import numpy as np

    from gpulinalg.dense import MatmulAux
    from gpulinalg.dense._demo import relu_mask
    mask = np.random.default_rng(0).random((21, 6)) > 0.5
    packed = np.packbits(mask, axis=0, bitorder="little")  # (3, 6): bit r % 8 of byte r // 8
    data = np.zeros((16, 6), np.uint8)
    data[:3] = packed
    aux = MatmulAux("relu", np.asfortranarray(data), False, 21, 6)
    np.testing.assert_array_equal(relu_mask(aux), mask)
