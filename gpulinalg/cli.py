"""Command line: ``gpulinalg info [--json]`` and ``gpulinalg demo``."""

import argparse
import json
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gpulinalg", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="versions, GPUs, CUDA libraries, backend choice")
    info.add_argument("--json", action="store_true", help="print JSON")
    demo = sub.add_parser("demo", help="a short tour, timed against NumPy/SciPy")
    demo.add_argument("--small", action="store_true", help="smaller problem sizes")
    args = parser.parse_args(argv)
    if args.command == "info":
        from ._info import collect, format_text
        report = collect()
        print(json.dumps(report, indent=2) if args.json else format_text(report))
        return 0
    from ._demo import run_demo
    return run_demo(small=args.small, out=sys.stdout)
