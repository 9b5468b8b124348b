"""Runner: ``python -m benchmarks NAME [ARGS ...]``.

* ``python -m benchmarks all [--json PATH] [--quick]`` runs the suites of :data:`ALL`;
  ``python -m benchmarks {dense,decomp,sparse,gp,dense_torch,dask} [--json PATH] [--quick]``
  runs one of them the same way (``run(quick: bool) -> list[dict]``, rows printed as JSON lines,
  written with the environment to ``--json``).
* Every other suite and study (:data:`NAMES`) takes its own arguments:
  ``python -m benchmarks decomp_batched --sections grid --json out.json`` calls that module's
  ``main(["--sections", "grid", "--json", "out.json"])``.

``python -m benchmarks.<name> ...`` still works for the modules that moved into ``suites/`` and
``studies/`` (see :mod:`benchmarks`); ``python -m benchmarks.suites.<name>`` is the same module.
"""

import argparse
import importlib
import json
import sys

from benchmarks import _harness

#: Published suites (``benchmarks/suites/``): their rows are the pages under docs/benchmarks/
#: (``docs/conf.py``), with the modules they take rows or measurements from.
SUITES = ("dense", "dense_overhead", "dense_torch", "dense_torch_host", "dense_torch_steps",
          "decomp", "decomp_dense", "decomp_lowrank", "decomp_batched", "decomp_overhead",
          "decomp_tall_qr", "decomp_wide_parts", "decomp_eigh_lstsq", "decomp_solve",
          "decomp_gradients", "sparse", "gp", "gp_phases", "gp_large", "gp_scale", "dask",
          "cpu_parity", "pca_sklearn", "auto_regret")
#: One-off investigations (``benchmarks/studies/``): printed figures or files of their own.
STUDIES = ("dense_clocks", "dask_placement", "dask_cholesky_sim", "decomp_solves", "faults_report",
           "host_transfer", "mixed_spd_parts", "pca_parts", "gp_cg_fused")
#: name -> module of every command (``suites/decomp_kernels.py`` is no command: it is the
#: ``kernels`` section of ``decomp_batched``).
NAMES = {**{n: f"benchmarks.suites.{n}" for n in SUITES},
         **{n: f"benchmarks.studies.{n}" for n in STUDIES}}
#: What ``all`` runs, in order.
ALL = ("dense", "decomp", "sparse", "gp", "dense_torch")
#: Run like ``all``'s suites when named (``dask`` starts a Dask cluster: by name only; its own
#: options through ``python -m benchmarks.suites.dask``).
RUNNER = (*ALL, "dask")


def module(name):
    """The module of the command ``name``."""
    return importlib.import_module(NAMES[name])


def run_suites(names, quick=False, json_path=None):
    """Run ``names`` (``run(quick)`` each), print every row, write them to ``json_path``."""
    results = {"environment": _harness.environment(), "rows": []}
    # each row goes to stderr as soon as it exists: a run stopped by a time limit keeps them
    _harness.emit = lambda r: print("row:", json.dumps(r, default=str), file=sys.stderr,
                                    flush=True)
    for name in names:
        rows = module(name).run(quick=quick)
        for r in rows:
            print(json.dumps(r, default=str), flush=True)
        results["rows"].extend(rows)
    if json_path:
        _harness.write_rows(json_path, results["rows"], environment=results["environment"])
        print(f"wrote {json_path}", file=sys.stderr)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    name = argv[0] if argv else None
    if name in NAMES and name not in RUNNER and hasattr(module(name), "main"):
        return module(name).main(argv[1:]) or 0
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        epilog="other names take their own arguments: python -m benchmarks NAME --help")
    parser.add_argument("suite", choices=(*NAMES, "all"))
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    args = parser.parse_args(argv)
    return run_suites(ALL if args.suite == "all" else (args.suite,), args.quick, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
