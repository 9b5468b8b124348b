"""The layout of ``benchmarks/`` (DESIGN §2): published suites in ``suites/``, one-off studies in
``studies/``, what they share in ``_harness.py``; no import circle, and a suite never imports a
study (a published figure never hangs on an investigation's code)."""

import os
import subprocess
import sys

import pytest

grimp = pytest.importorskip("grimp")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def graph():
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return grimp.build_graph("benchmarks")


def _cycle(graph):
    """One import circle among the package's modules (a list of names), or ``None``."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph.find_modules_directly_imported_by(m)):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph.modules):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_circle(graph):
    assert _cycle(graph) is None


def test_suites_never_import_studies(graph):
    suites = {m for m in graph.modules if m.startswith("benchmarks.suites.")}
    studies = {m for m in graph.modules if m.startswith("benchmarks.studies.")}
    assert suites and studies
    bad = [(s, t) for s in sorted(suites) for t in sorted(studies)
           if graph.chain_exists(importer=s, imported=t)]
    assert not bad


def test_harness_imports_no_suite_or_study(graph):
    assert not {m for m in graph.find_modules_directly_imported_by("benchmarks._harness")
                if m.startswith(("benchmarks.suites", "benchmarks.studies"))}


def test_every_command_names_a_module_in_its_folder():
    from benchmarks import __main__ as runner
    for name, module in runner.NAMES.items():
        folder = "suites" if name in runner.SUITES else "studies"
        assert module == f"benchmarks.{folder}.{name}"
        assert os.path.isfile(os.path.join(ROOT, "benchmarks", folder, name + ".py"))
    assert set(runner.ALL) <= set(runner.SUITES) and not set(runner.SUITES) & set(runner.STUDIES)
    on_disk = {f[:-3] for folder in ("suites", "studies")
               for f in os.listdir(os.path.join(ROOT, "benchmarks", folder))
               if f.endswith(".py") and f != "__init__.py"}
    assert on_disk - set(runner.NAMES) == {"decomp_kernels"}  # a section of decomp_batched


@pytest.mark.parametrize("argv", [["-m", "benchmarks", "faults_report", "--help"],
                                  ["-m", "benchmarks.studies.faults_report", "--help"],
                                  ["-m", "benchmarks.report", "--help"],
                                  ["-m", "benchmarks", "--help"]])
def test_commands_run(argv):
    """``python -m benchmarks NAME``, a module's own path, and the report."""
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: python -m benchmarks" in done.stdout
