"""The layers and the file-role scheme are a checked contract (see docs/architecture.md).

* ``_runtime`` imports no submodule; ``dense``, ``decomp`` and ``sparse`` never import each other;
  ``gp`` reaches ``decomp`` only through its internal engine modules (import-linter, pyproject).
* No import circle inside the package (function-level imports included).
* A file's role suffix says where its code runs, and its imports agree: ``_cuda`` (GPU engine),
  ``_host`` (SciPy/NumPy engine), ``_xp`` (any array module), ``_api`` (front door: validate,
  one dispatch), ``_torch`` (a torch layer), ``_dask`` (lazy Dask graphs whose tasks call the
  engines); files without a role hold no GPU code.
* No module past 800 lines (one meaning a file); no test machinery or engine-picking
  environment variable in the submodules; ``backend="cpu"`` never imports CuPy.
"""

import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

grimp = pytest.importorskip("grimp")

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "gpulinalg"
SUBMODULES = ("dense", "decomp", "sparse", "gp")
ROLES = ("api", "xp", "cuda", "host", "torch", "dask")
GPU_PACKAGES = ("cupy", "cupyx", "nvmath", "cupy_backends")
ROLE_NAME = re.compile(r"_[a-z0-9]+(?:_[a-z0-9]+)*\.py")


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("gpulinalg", include_external_packages=True)


def _is_ancestor(pkg, module):
    return module.startswith(pkg + ".")


def _edges(graph):
    """Direct imports between gpulinalg modules, without the edges ``from . import x`` adds from a
    module to the packages above it (an import of ``x``, not of the package's ``__init__``)."""
    for importer in graph.modules:
        if not importer.startswith("gpulinalg"):
            continue
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported.startswith("gpulinalg") and not _is_ancestor(imported, importer):
                yield importer, imported


def _cycles(edges):
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    succ = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
        succ.setdefault(b, [])
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in succ:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(succ[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_import_linter_contracts():
    exe = pathlib.Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        pytest.skip("import-linter is not installed")
    proc = subprocess.run([str(exe), "--no-cache"], cwd=PACKAGE.parent, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_import_circles(graph):
    assert _cycles(_edges(graph)) == []


def test_gp_reaches_decomp_only_through_its_engine_facade(graph):
    for module in graph.find_descendants("gpulinalg.gp"):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith("gpulinalg.decomp") and not _is_ancestor(imported, module):
                assert imported == "gpulinalg.decomp._engines", f"{module} imports {imported}"


def _role(module):
    stem = module.rsplit(".", 1)[-1]
    suffix = stem.rsplit("_", 1)[-1]
    return suffix if suffix in ROLES and stem.count("_") >= 2 else None


def _submodule_files():
    for sub in SUBMODULES:
        for path in sorted((PACKAGE / sub).rglob("*.py")):
            yield sub, path


@pytest.mark.parametrize("sub", SUBMODULES)
def test_file_names_follow_the_scheme(sub):
    bad = [p.name for s, p in _submodule_files() if s == sub
           and p.name != "__init__.py" and not ROLE_NAME.fullmatch(p.name)]
    assert bad == []


def test_imports_agree_with_roles(graph):
    wrong = []
    for sub in SUBMODULES:
        for module in graph.find_descendants(f"gpulinalg.{sub}"):
            role = _role(module)
            imported = graph.find_modules_directly_imported_by(module)
            gpu = sorted(m for m in imported if m.split(".")[0] in GPU_PACKAGES)
            scipy_engine = sorted(m for m in imported if m.startswith("scipy")
                                  and ("linalg" in m or m == "scipy"))
            if role != "cuda" and gpu:
                wrong.append(f"{module} ({role or 'no role'}) imports {gpu}")
            if role == "cuda" and scipy_engine:
                wrong.append(f"{module} (cuda) imports {scipy_engine}")
            if role in ("xp", "api") and scipy_engine:
                wrong.append(f"{module} ({role}) imports {scipy_engine}")
            engines = [m for m in imported if m.startswith(f"gpulinalg.{sub}.")
                       and _role(m) in ("cuda", "host")]
            if role in ("cuda", "host", "xp") and any(_role(m) != role and _role(m) != "xp"
                                                      for m in engines):
                wrong.append(f"{module} ({role}) imports the other engine: {engines}")
    assert wrong == []


def test_no_module_outgrows_one_meaning():
    """A file holds one meaning; past 800 lines it holds more than one (docs/architecture.md)."""
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 800}
    assert long == {}


FORBIDDEN = [
    (re.compile(r"\b_fake\b"), "the old private fake-device flag"),
    (re.compile(r"_runtime import testing|_runtime\.testing|maybe_fail|from \.+testing import|"
                r"from \.+ import testing|gpulinalg\.testing|\bsimulated\b|FakeGPU|fake_gpu"),
     "test machinery, or a branch on a pretend device"),
    (re.compile(r"environ[^\n]*GPULINALG_|GPULINALG_[A-Z_]+[^\n]*environ"),
     "an environment variable picking an engine"),
    (re.compile(r"\bxp is (not )?(np|numpy|cupy)\b|\b(np|numpy|cupy) is (not )?xp\b"),
     "an algorithm chosen by array package inside generic code"),
    (re.compile(r"\bconfig\(backend="), "a nested backend switch"),
]


@pytest.mark.parametrize("pattern, what", FORBIDDEN, ids=[w for _, w in FORBIDDEN])
def test_submodules_hold_no(pattern, what):
    hits = [f"{p.relative_to(PACKAGE)}:{i}" for _, p in _submodule_files()
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == [], what


CPU_ONLY = textwrap.dedent("""
    import sys
    import numpy as np
    import gpulinalg
    gpulinalg.set_config(backend="cpu")
    from gpulinalg import decomp, dense, sparse, gp
    a = np.array([[4.0, 1.0], [1.0, 3.0]])
    decomp.qr(np.ones((3, 2))); decomp.svd(a); decomp.cholesky(a)
    c = decomp.cho_factor(a); decomp.cho_solve(c, np.ones(2)); decomp.logdet_cholesky(c)
    decomp.solve_triangular(np.triu(a), np.ones(2))
    decomp.truncated_svd(np.ones((6, 4)), 2)
    dense.matmul(a, a, bias=np.ones(2), activation="relu")
    import scipy.sparse as sp
    sparse.solve(sp.csr_matrix(a), np.ones(2))
    gp.exact_gp_solve(a, np.ones(2))
    loaded = sorted(m for m in ("cupy", "nvmath", "torch", "dask") if m in sys.modules)
    print(loaded)
""")


def test_backend_cpu_imports_no_gpu_package():
    proc = subprocess.run([sys.executable, "-c", CPU_ONLY], capture_output=True, text=True,
                          cwd=PACKAGE.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_import_is_light():
    code = ("import sys, gpulinalg; print(sorted(m for m in ('cupy', 'nvmath', 'torch', 'dask',"
            " 'sklearn', 'scipy.linalg') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _public_callables():
    import importlib
    import inspect
    for name in ("gpulinalg", *(f"gpulinalg.{s}" for s in SUBMODULES)):
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            try:
                obj = getattr(module, attr)
            except (AttributeError, ImportError):  # FusedLinear needs torch
                continue
            if inspect.isfunction(obj):
                yield f"{name}.{attr}", obj
            elif inspect.isclass(obj) and obj.__module__.startswith("gpulinalg"):
                if issubclass(obj, (tuple, BaseException)) or not obj.__dict__.get("__init__"):
                    members = {}
                else:
                    members = {"__init__": obj.__init__}
                members.update({k: v for k, v in vars(obj).items()
                                if inspect.isfunction(v) and not k.startswith("_")})
                for meth_name, meth in members.items():
                    yield f"{name}.{attr}.{meth_name}", meth


def test_public_functions_carry_type_hints():
    import inspect
    missing = []
    for qualname, fn in _public_callables():
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
        if any(p.annotation is inspect.Parameter.empty for p in params):
            missing.append(qualname)
        elif sig.return_annotation is inspect.Signature.empty and fn.__name__ != "__init__":
            missing.append(qualname + " (return)")
    assert missing == []


def test_type_checker_passes():
    """mypy over the package (settings in pyproject.toml): the hints are checked, not decoration."""
    pytest.importorskip("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental"],
                          cwd=PACKAGE.parent, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_family_folders_do_not_shadow_the_public_functions():
    """``decomp/qr/``, ``decomp/svd/`` and ``decomp/cholesky/`` share a name with a function:
    loading every module of the families leaves ``decomp.qr`` etc. the functions."""
    import importlib

    from gpulinalg import decomp
    for path in sorted((PACKAGE / "decomp").rglob("*.py")):
        if "_dask" in path.name or "_torch" in path.name:
            continue
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        importlib.import_module(".".join(p for p in rel.parts if p != "__init__"))
    for name in ("qr", "svd", "cholesky"):
        assert callable(getattr(decomp, name)) and not hasattr(getattr(decomp, name), "__path__")
