"""The documentation builds without a warning (what ``make docs`` runs: ``-W --keep-going``),
API pages included: a broken cross-reference, a docstring docutils cannot read, or a class that
does not import fails the test suite, not only the docs job."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    pytest.importorskip("numpydoc")
    run = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "--keep-going", "-b", "html",
                          os.path.join(ROOT, "docs"), str(tmp_path / "html")],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
