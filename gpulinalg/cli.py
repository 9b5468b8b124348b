"""Command line: ``gpulinalg info [--json]`` and ``gpulinalg demo [--small | --full]``."""

import argparse
import json
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gpulinalg", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="versions, BLAS, GPUs, CUDA libraries, the backend "
                          "'auto' picks and why")
    info.add_argument("--json", action="store_true", help="print JSON")
    demo = sub.add_parser("demo", help="a short tour, timed against NumPy/SciPy/scikit-learn "
                          "(full sizes with a GPU, small ones without: under a minute on 2 cores)")
    sizes = demo.add_mutually_exclusive_group()
    sizes.add_argument("--small", dest="size", action="store_const", const="small",
                       help="small problem sizes, also on a GPU")
    sizes.add_argument("--full", dest="size", action="store_const", const="full",
                       help="the big tour, also without a GPU (minutes on a laptop)")
    demo.set_defaults(size="auto")
    args = parser.parse_args(argv)
    if args.command == "info":
        from ._info import collect, format_text
        report = collect()
        print(json.dumps(report, indent=2) if args.json else format_text(report))
        return 0
    from ._demo import run_demo
    from ._info import gpu_status
    return run_demo(size=args.size, out=sys.stdout, status=gpu_status())
