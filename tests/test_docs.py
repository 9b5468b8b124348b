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
    """The object at ``dotted`` through public attributes only (``pkg.mod.name``), as
    ``from pkg.mod import name`` finds it: an attribute wins over a submodule of the same name
    (``gpulinalg.decomp.qr`` is the function; the family folder of that name is private)."""
    parts = dotted.split(".")
    assert not any(p.startswith("_") for p in parts), dotted
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        if i == len(parts) and i > 1:
            parent = importlib.import_module(".".join(parts[:-1]))
            obj = getattr(parent, parts[-1], obj)
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


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
        if target.endswith(("FusedLinear", "FusedMLP")):
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
        assert _resolve(name) is not None, name  # a module, a class or a function


def test_coming_from_index_lists_the_page():
    assert "coming_from" in (DOCS / "index.md").read_text()


SHARED_WITH_SCIPY = ("qr", "svd", "cholesky", "cho_factor", "cho_solve", "solve_triangular",
                     "eigh", "eigvalsh", "lstsq", "pinv", "solve", "lu_factor", "lu_solve", "lu",
                     "det", "inv")


def test_coming_from_lists_the_names_shared_with_scipy():
    text = COMING_FROM.read_text()
    for name in SHARED_WITH_SCIPY:
        assert f"`gpulinalg.decomp.{name}`" in text


def _default(p):
    """A parameter's default; "not given" sentinels read as None (SciPy 1.18 deprecated qr's
    lwork and warns when it is passed at all, so neither SciPy nor we can default it to None)."""
    return None if repr(p.default) in ("<not given>", "<no value>") else p.default


@pytest.mark.parametrize("name", SHARED_WITH_SCIPY)
def test_scipy_names_take_scipy_parameters_and_defaults(name):
    """docs/coming_from.md: SciPy's parameters, order and defaults; additions keyword-only."""
    import scipy.linalg
    ours = list(inspect.signature(_resolve(f"gpulinalg.decomp.{name}")).parameters.values())
    theirs = list(inspect.signature(getattr(scipy.linalg, name)).parameters.values())
    assert [(p.name, _default(p)) for p in ours[:len(theirs)]] == \
        [(p.name, _default(p)) for p in theirs]
    assert all(p.kind is p.KEYWORD_ONLY for p in ours[len(theirs):])


@pytest.mark.parametrize("ours, theirs", [
    ("gpulinalg.decomp.PCA", "sklearn.decomposition.PCA"),
    ("gpulinalg.gp.GaussianProcessRegressor", "sklearn.gaussian_process.GaussianProcessRegressor")])
def test_estimators_take_every_scikit_learn_parameter(ours, theirs):
    pytest.importorskip("sklearn", reason="the comparison is with scikit-learn")
    mine = inspect.signature(_resolve(ours)).parameters
    for name, p in inspect.signature(_resolve(theirs)).parameters.items():
        assert name in mine, (ours, name)
        assert mine[name].default == p.default or mine[name].default is p.default, (ours, name)


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
