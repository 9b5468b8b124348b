"""The docs say what the code does: API pages and notebooks name public objects only, every
object the docs render exists under its public name, and the tables of docs/coming_from.md
match the live signatures of gpulinalg and of the library it is compared with."""

import importlib
import inspect
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: Pages for users (API and guides); architecture.md and runtime.md also speak to contributors.
USER_PAGES = [DOCS / f"{name}.md" for name in
              ("index", "installation", "coming_from", "dense", "decomp", "sparse", "gp")]
PRIVATE = re.compile(r"gpulinalg(\.[A-Za-z]\w*)*\._\w+")
COMING_FROM = DOCS / "coming_from.md"


def _resolve(dotted):
    """The object at ``dotted`` through public attributes only (``pkg.mod.name``)."""
    parts = dotted.split(".")
    assert not any(p.startswith("_") for p in parts), dotted
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _table(text, heading_cells):
    """Rows (lists of cells, backticks stripped) of the markdown table whose header starts
    with ``heading_cells``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:len(heading_cells)] == heading_cells:
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip().strip("`") for c in row.strip().strip("|").split("|")])
            return rows
    raise AssertionError(f"no table headed {heading_cells}")


@pytest.mark.parametrize("page", [p for p in USER_PAGES if p.exists()] + [ROOT / "README.md"],
                         ids=lambda p: p.name)
def test_user_pages_name_no_private_module(page):
    assert not PRIVATE.search(page.read_text()), PRIVATE.search(page.read_text()).group(0)


def test_every_rendered_object_exists_under_its_public_name():
    targets = []
    for page in DOCS.glob("*.md"):
        targets += re.findall(r"^\.\. auto(?:function|class|method|data|module):: (\S+)",
                              page.read_text(), re.M)
    assert targets
    for target in targets:
        if target.endswith("FusedLinear"):
            pytest.importorskip("torch", reason="FusedLinear needs torch")
        assert _resolve(target) is not None, target


def test_coming_from_names_exist():
    text = COMING_FROM.read_text()
    names = set(re.findall(r"`(gpulinalg(?:\.\w+)+)", text))
    assert len(names) >= 20
    for name in sorted(names):
        if name.endswith("FusedLinear"):
            pytest.importorskip("torch", reason="FusedLinear needs torch")
        if name.startswith("gpulinalg.gp"):
            pytest.importorskip("sklearn", reason="gpulinalg.gp needs scikit-learn")
        assert callable(_resolve(name)), name


def test_coming_from_index_lists_the_page():
    assert "coming_from" in (DOCS / "index.md").read_text()


def _default(fn, parameter):
    return inspect.signature(fn).parameters[parameter].default


def test_coming_from_defaults_table_matches_the_code():
    rows = _table(COMING_FROM.read_text(), ["gpulinalg", "parameter", "gpulinalg default"])
    assert rows
    for ours, parameter, our_default, theirs, their_default in rows:
        assert repr(_default(_resolve(ours), parameter)) == our_default, (ours, parameter)
        assert repr(_default(_resolve(theirs), parameter)) == their_default, (theirs, parameter)


def test_coming_from_constructor_table_matches_the_code():
    pytest.importorskip("sklearn", reason="the comparison is with scikit-learn")
    rows = _table(COMING_FROM.read_text(), ["gpulinalg", "scikit-learn", "not taken"])
    assert len(rows) == 2
    for ours, theirs, missing in rows:
        documented = {m.strip().strip("`") for m in missing.split(",")}
        actual = (set(inspect.signature(_resolve(theirs)).parameters)
                  - set(inspect.signature(_resolve(ours)).parameters))
        assert documented == actual, (ours, actual)


def test_coming_from_estimator_claims():
    sklearn_base = pytest.importorskip("sklearn.base", reason="the claims are about scikit-learn")
    from gpulinalg.decomp import PCA
    from gpulinalg.gp import GaussianProcessRegressor
    assert sklearn_base.clone(PCA(3)).get_params()["n_components"] == 3
    assert issubclass(GaussianProcessRegressor, (sklearn_base.BaseEstimator,))
    assert issubclass(GaussianProcessRegressor, sklearn_base.RegressorMixin)


def test_readme_states_the_demo_times_and_the_notebooks():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"make demo.*(under|about|≤) ?\d+ ?s", readme, re.S | re.I)
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"notebooks/{nb.name}" in readme
        cells = json.loads(nb.read_text())["cells"]
        for cell in cells:
            assert not PRIVATE.search("".join(cell["source"])), nb.name


def test_installation_page_quotes_the_no_gpu_lines_as_the_code_writes_them():
    from gpulinalg import _info
    from gpulinalg._runtime import GPUInfo
    h200 = (GPUInfo(0, "NVIDIA H200", (9, 0), 141 << 30),)
    lines = [_info.classify(*args).line for args in (
        (None, None, None, (), None, [], None, None, "Linux"),
        (None, None, None, (), None, [], None, None, "Darwin"),
        ((13, 0), None, "CuPy is not installed", (), None, []),
        ((12, 2), 13, None, (), None, []),
        ((13, 0), 13, None, (), None, [], None, ""),
        ((13, 0), 13, None, h200, "...", []),
        ((13, 0), 13, None, h200, None, ["cudss"]))]
    quoted = re.findall(r"`((?:no GPU|GPU): [^`]+)`", (DOCS / "installation.md").read_text())
    assert len(quoted) >= 7
    for q in quoted:
        assert any(line.startswith(q.split("(...)")[0]) for line in lines), q
