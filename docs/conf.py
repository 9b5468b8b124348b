"""Sphinx configuration: pages in MyST Markdown, API from the numpydoc docstrings.

At build start the benchmark pages under ``docs/benchmarks/`` are generated from one result
file per suite (``BENCHMARK_RESULTS``); they are build output, not committed (.gitignore).
"""

import importlib.util
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

project = "gpulinalg"
author = "the gpulinalg developers"
extensions = ["myst_parser", "sphinx.ext.autodoc", "numpydoc"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
numpydoc_show_class_members = False
# The GPU engines are mocked (a docs machine has no CUDA); torch is mocked only where it is not
# installed: FusedLinear and FusedMLP subclass torch's classes, which a mock cannot stand for.
autodoc_mock_imports = ["cupy", "nvmath"] + ([] if importlib.util.find_spec("torch") else ["torch"])
html_theme = "alabaster"

#: The result file each generated page ``docs/benchmarks/<suite>.md`` is made from (paths
#: relative to benchmarks/results/). One current file per suite: update the entry when a newer
#: run of the suite is committed; older files stay in benchmarks/results/ and are cited by name
#: in docs/performance-log.md. ``None``: the suite has no committed run yet (its page says so).
BENCHMARK_RESULTS = {
    "dense": "h200-dense-2026-12-01.json",
    "dense_torch": "h200-dense-torch-2026-12-02.json",  # all sections; -12-03 re-ran two
    "dense_torch_steps": "h200-dense-torch-steps-2026-12-03.json",
    "decomp": "h200-decomp-2026-12-01.json",
    "decomp_batched": "h200-decomp-batched-2026-12-02j.json",
    "decomp_overhead": "h200-decomp-overhead-2026-12-02d.json",
    "decomp_tall_qr": "h200-decomp-tall-qr-2026-12-02.json",
    "decomp_wide_parts": "h200-decomp-wide-parts-2026-12-02b.json",
    "decomp_gradients": "h100-decomp-gradients-2026-12-06.json",
    "decomp_eigh_lstsq": "h100-decomp-eigh-lstsq-2026-12-06.json",
    "sparse": "h200-sparse-2026-12-01.json",
    "gp": "h200-gp-2026-12-01.json",
    "gp_large": "h200-gp-large-2026-12-02c.json",
    "gp_scale": "h100-gp-scale-2026-12-06.json",
    "dask": "h200-dask-2026-12-02.json",
}


def _say(msg):
    print(f"gpulinalg docs: {msg}", file=sys.stderr)


def _cell(v):
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v).replace("|", "\\|")


def _tables_only(suite, path, out):
    """The page without a figure (matplotlib missing): the result rows as one table."""
    with open(path) as f:
        data = json.load(f)
    rows = [r for r in data.get("rows", []) if r.get("suite") == suite]
    cols = ["case", "impl"]
    for r in rows:
        cols += [k for k in r if k not in ("suite", "case", "impl", "runs", "min_s")
                 and k not in cols]
    lines = [f"# Benchmark: {suite}", "",
             f"- `{os.path.basename(path)}`: {data.get('environment', {}).get('date', '?')}",
             "", "(Figure not built: matplotlib is not installed.)", "",
             "| " + " | ".join("median ms" if c == "median_s" else c for c in cols) + " |",
             "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(
            f"{r[c] * 1e3:.3g}" if c == "median_s" and isinstance(r.get(c), (int, float))
            else _cell(r.get(c, "")) for c in cols) + " |")
    with open(os.path.join(out, f"{suite}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def _stub(suite, out, why):
    with open(os.path.join(out, f"{suite}.md"), "w") as f:
        f.write(f"# Benchmark: {suite}\n\nThis page was not generated in this build: {why}\n")


def _not_measured(suite, out):
    with open(os.path.join(out, f"{suite}.md"), "w") as f:
        f.write(f"# Benchmark: {suite}\n\nNot measured yet: no result file of this suite is "
                "committed (`BENCHMARK_RESULTS` in `docs/conf.py` names none).\n")


def build_benchmark_pages(out=None):
    """Write docs/benchmarks/<suite>.md (and .png) for every suite; never raises."""
    out = os.path.join(HERE, "benchmarks") if out is None else out
    os.makedirs(out, exist_ok=True)
    have_mpl = importlib.util.find_spec("matplotlib") is not None
    if not have_mpl:
        _say("matplotlib is not installed: benchmark pages get tables, no figures")
    for suite, name in BENCHMARK_RESULTS.items():
        if name is None:
            _not_measured(suite, out)
            continue
        path = os.path.join(ROOT, "benchmarks", "results", name)
        try:
            if not os.path.exists(path):
                _say(f"{suite}: {path} is missing; page skipped")
                _stub(suite, out, f"the result file `{name}` is missing.")
            elif have_mpl:
                subprocess.run([sys.executable, "-m", "benchmarks.report", path, "--out", out],
                               cwd=ROOT, check=True, capture_output=True, text=True)
            else:
                _tables_only(suite, path, out)
        except Exception as exc:  # a broken report must not break the docs
            detail = getattr(exc, "stderr", "") or exc
            _say(f"{suite}: page not generated ({detail})")
            _stub(suite, out, f"`python -m benchmarks.report` failed on `{name}`.")


build_benchmark_pages()
