"""Every notebook under notebooks/ runs top to bottom at its small sizes (on the CPU here, on the
GPU where present), in a Jupyter kernel, so the notebooks cannot rot; and each is shaped as the
README promises: it opens by saying what it shows, ends with a plot, sets its size in a
``parameters`` cell, imports only public names, and is stored with its outputs."""

import os
import pathlib
import re

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat")

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = {"fused_linear.ipynb", "pca_lowrank.ipynb", "gaussian_process.ipynb",
            "sparse_direct.ipynb"}
#: What the tests run the notebooks at: small sizes, whatever the machine.
SIZE = os.environ.get("GPULINALG_NOTEBOOK_SIZE", "small")


def _read(path):
    return nbformat.read(path, as_version=4)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_the_four_notebooks_exist_and_the_readme_names_them():
    names = {p.name for p in NOTEBOOKS}
    assert names == EXPECTED
    readme = (ROOT / "README.md").read_text()
    for name in EXPECTED:
        assert f"notebooks/{name}" in readme, name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_shape(path):
    nb = _read(path)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "What this shows" in first.source
    code = _code_cells(nb)
    assert "parameters" in code[0].metadata.get("tags", []), "first code cell sets SIZE"
    assert re.search(r'^SIZE = "auto"', code[0].source, re.M)
    # stored executed, every code cell with its outputs, the last one a plot
    assert all(c.get("execution_count") for c in code), "stored without outputs"
    assert any("image/png" in o.get("data", {}) for o in code[-1].outputs), "no closing plot"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)
    # public names only: the package's file layout may change under a notebook
    for c in code:
        assert not re.search(r"gpulinalg(\.\w+)*\._\w+", c.source), c.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    """Re-execute the notebook in a fresh kernel with ``SIZE`` overridden (small by default)."""
    nbclient = pytest.importorskip("nbclient", reason="the notebook tests need nbclient")
    pytest.importorskip("ipykernel", reason="the notebook tests need ipykernel")
    pytest.importorskip("matplotlib", reason="the notebooks plot with matplotlib")
    pytest.importorskip("sklearn", reason="the notebooks compare with scikit-learn")
    nb = _read(path)
    params = _code_cells(nb)[0]
    params.source = f"SIZE = {SIZE!r}"
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on failure
    plots = [o for o in _code_cells(nb)[-1].outputs if o.get("output_type") == "display_data"]
    assert plots, "the last cell drew nothing"
