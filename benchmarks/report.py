"""Turn result JSON into Markdown tables and PNG plots under docs/.

``python -m benchmarks.report benchmarks/results/*.json --out docs/benchmarks``
"""

import argparse
import collections
import importlib
import json
import os

SKIP = {"suite", "case", "impl", "runs", "min_s"}


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v).replace("|", "\\|")  # a "|" inside a cell (e.g. "log|K|") would split it


def table(rows):
    """A Markdown table of ``rows`` (dicts), columns in first-seen order, time in ms."""
    cols = ["case", "impl"]
    for r in rows:
        cols += [k for k in r if k not in SKIP and k not in cols]
    lines = ["| " + " | ".join("median ms" if c == "median_s" else c for c in cols) + " |",
             "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            cells.append(f"{v * 1e3:.3g}" if c == "median_s" and v != "" else _fmt(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    timed = [r for r in rows if "median_s" in r]
    if not timed:
        return False
    cases = list(dict.fromkeys(r["case"] for r in timed))
    impls = list(dict.fromkeys(r["impl"] for r in timed))
    width = 0.8 / max(len(impls), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cases)), 4))
    for i, impl in enumerate(impls):
        xs, ys = [], []
        for j, case in enumerate(cases):
            for r in timed:
                if r["case"] == case and r["impl"] == impl:
                    xs.append(j + i * width)
                    ys.append(r["median_s"] * 1e3)
        ax.bar(xs, ys, width, label=impl)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))], cases, rotation=30,
                  ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("median time (ms, log)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def summary(suite, rows):
    """The suite's own summary of ``rows`` (Markdown), when its module in
    ``benchmarks/suites/`` has a ``page_summary(rows)``; else ``None``."""
    try:
        module = importlib.import_module(f"benchmarks.suites.{suite}")
    except ImportError:  # an older file's suite that no longer exists
        return None
    fn = getattr(module, "page_summary", None)
    return fn(rows) if fn is not None else None


def write(results_paths, out):
    os.makedirs(out, exist_ok=True)
    by_suite = collections.defaultdict(list)
    envs = []
    for p in results_paths:
        with open(p) as f:
            data = json.load(f)
        envs.append((os.path.basename(p), data.get("environment", {})))
        for r in data["rows"]:
            by_suite[r["suite"]].append(r)
    for suite, rows in by_suite.items():
        md = [f"# Benchmark: {suite}", ""]
        for name, env in envs:
            gpus = ", ".join(g["name"] if isinstance(g, dict) else str(g)  # older files: strings
                     for g in env.get("gpus", [])) or "no GPU"
            md.append(f"- `{name}`: {env.get('date', '?')}, {gpus}, "
                      f"versions {json.dumps(env.get('versions', {}))}")
        head = summary(suite, rows)
        md += ["", *([head, ""] if head else []), table(rows), ""]
        if plot(rows, os.path.join(out, f"{suite}.png"), suite):
            md.append(f"![{suite}]({suite}.png)")
        with open(os.path.join(out, f"{suite}.md"), "w") as f:
            f.write("\n".join(md) + "\n")
    return sorted(by_suite)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report")
    parser.add_argument("results", nargs="+")
    parser.add_argument("--out", default="docs/benchmarks")
    args = parser.parse_args(argv)
    print("wrote", ", ".join(write(args.results, args.out)))


if __name__ == "__main__":
    main()
