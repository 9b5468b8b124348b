"""The hostile-input matrix (``hostile_cases``): every case gives a correct result, a
conditioning warning or a clear error, never a crash, a hang, an internal exception, a silent
wrong answer or a write into a read-only input; each call runs in an isolated worker process.
The CPU engines here; the GPU engines with ``-m gpu`` on the device."""

import json
import os

import pytest

from tests.reliability import hostile_cases
from tests.reliability.isolation import Isolated

CASES = hostile_cases.cases()
_COUNTS: dict = {}


@pytest.fixture(scope="module")
def worker():
    runner = Isolated()
    yield runner
    runner.close()
    out = os.environ.get("GPULINALG_HOSTILE_COUNTS")
    if out:  # the counts docs/reliability.md quotes; one file per pytest-xdist worker
        worker_id = os.environ.get("PYTEST_XDIST_WORKER")
        with open(f"{out}.{worker_id}" if worker_id else out, "w") as f:
            json.dump(_COUNTS, f, indent=1, sort_keys=True)


def _case(worker, backend, function, cls, target, package="numpy"):
    record = {"ours": worker.run(function, cls, target, backend, "ours", package),
              "scipy": worker.run(function, cls, target, backend, "scipy")}
    record["operands"] = hostile_cases.plain_operands(function, cls, target)
    result, why = hostile_cases.verdict(function, record)
    key = backend if package == "numpy" else f"{backend}-{package}"
    _COUNTS.setdefault(key, {}).setdefault(result, 0)
    _COUNTS[key][result] += 1
    assert result != "FAIL", f"{function} / {cls} in {target}: {why}; ours: " \
        f"{ {k: v for k, v in record['ours'].items() if k != 'value'} }"


@pytest.mark.parametrize("function, cls, target", CASES)
def test_hostile_input_cpu(worker, function, cls, target):
    _case(worker, "cpu", function, cls, target)


@pytest.mark.parametrize("function, cls, target", CASES)
def test_hostile_input_cpu_torch(worker, function, cls, target):
    pytest.importorskip("torch")
    _case(worker, "cpu", function, cls, target, "torch")


@pytest.mark.gpu
@pytest.mark.parametrize("package", ["numpy", "cupy", "torch-cuda"])
@pytest.mark.parametrize("function, cls, target", CASES)
def test_hostile_input_gpu(worker, function, cls, target, package):
    _case(worker, "gpu", function, cls, target, package)


def test_a_crash_is_a_failed_case_and_the_worker_comes_back(worker):
    record = worker.run("crash", "nan", "a", "cpu", "ours")
    assert record["kind"] == "crash" and record["exitcode"] != 0
    again = worker.run("solve", "nan", "a", "cpu", "ours")
    assert again["kind"] == "error" and again["type"] == "ValueError"


def test_the_verdict_fails_what_it_must():
    ok = {"kind": "result", "value": 1.0, "warnings": [], "mutated": False}
    wrong = dict(ok, value=2.0)
    record = {"ours": wrong, "scipy": ok, "operands": (None, None)}
    assert hostile_cases.verdict("det", record)[0] == "FAIL"  # silent, unlike SciPy
    record["ours"] = dict(ok, mutated=True)
    assert hostile_cases.verdict("det", record)[0] == "FAIL"  # wrote a read-only input
    record["ours"] = {"kind": "error", "type": "KeyError", "message": "'x'", "warnings": []}
    assert hostile_cases.verdict("det", record)[0] == "FAIL"  # an internal slip
    record["ours"] = {"kind": "crash", "warnings": []}
    assert hostile_cases.verdict("det", record)[0] == "FAIL"
    record["ours"] = dict(wrong, warnings=["IllConditionedWarning"])
    assert hostile_cases.verdict("det", record)[0] == "warning"


def test_docs_table_has_the_counts():
    """docs/reliability.md quotes this suite's counts (run last: the module's cases first);
    each engine's row is checked where all its cases ran in this process."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "reliability.md")
    rows = {"cpu": "| CPU (", "cpu-torch": "| CPU, torch", "gpu": "| GPU, NumPy",
            "gpu-cupy": "| GPU, CuPy", "gpu-torch-cuda": "| GPU, torch"}
    checked = 0
    for key, start in rows.items():
        counts = _COUNTS.get(key, {})
        if sum(counts.values()) != len(CASES):
            continue
        checked += 1
        row = next(line for line in open(path) if line.startswith(start))
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert cells[1:] == [str(len(CASES)), str(counts.get("correct", 0)),
                             str(counts.get("warning", 0)), str(counts.get("clear error", 0)),
                             "0"], key
    if not checked:
        pytest.skip("no engine ran all its cases in this process")
