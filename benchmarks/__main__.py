"""Runner: ``python -m benchmarks {dense,decomp,sparse,gp,dask,all} [--json PATH] [--quick]``.

Each suite is a module ``benchmarks/<suite>.py`` with ``run(quick: bool) -> list[dict]``.
"""

import argparse
import datetime
import importlib
import json
import platform
import sys

SUITES = ("dense", "decomp", "sparse", "gp", "dense_torch")
EXTRA = ("dask",)  # starts a Dask cluster: by name only, not in "all" (options: benchmarks.dask)


def environment():
    import gpulinalg
    from gpulinalg._info import collect
    report = collect()
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "gpulinalg": gpulinalg.__version__,
            "versions": report["versions"], "gpus": report["gpus"]}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("suite", choices=(*SUITES, *EXTRA, "all"))
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = parser.parse_args(argv)
    results = {"environment": environment(), "rows": []}
    from . import timing
    # each row goes to stderr as soon as it exists: a run stopped by a time limit keeps them
    timing.emit = lambda r: print("row:", json.dumps(r, default=str), file=sys.stderr, flush=True)
    for name in SUITES if args.suite == "all" else (args.suite,):
        module = importlib.import_module(f"benchmarks.{name}")
        rows = module.run(quick=args.quick)
        for r in rows:
            print(json.dumps(r, default=str), flush=True)
        results["rows"].extend(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
