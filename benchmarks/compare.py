"""Compare two benchmark runs row by row: ``python -m benchmarks.compare OLD.json NEW.json``.

Rows are matched by ``(case, impl)``; for each match the new median over the old one is
printed (``< 1``: faster now), with rows that only one run has listed at the end. A ratio
outside ``1 ± --noise`` is marked, so a slowdown beyond run-to-run noise stands out.
"""

import argparse
import json


def _rows(path):
    with open(path) as f:
        data = json.load(f)
    rows = data["rows"] if isinstance(data, dict) else data
    return {(r.get("case"), r.get("impl")): r for r in rows if r.get("median_s")}


def compare(old, new, noise=0.1):
    """``(lines, worse)``: one text line per matched row, and the keys slower beyond ``noise``."""
    lines, worse = [], []
    for key in [k for k in new if k in old]:
        ratio = new[key]["median_s"] / old[key]["median_s"]
        mark = " SLOWER" if ratio > 1 + noise else (" faster" if ratio < 1 - noise else "")
        if mark == " SLOWER":
            worse.append(key)
        lines.append(f"{ratio:6.2f}x  {old[key]['median_s']:.4g} s -> "
                     f"{new[key]['median_s']:.4g} s  {key[0]} | {key[1]}{mark}")
    only = sorted(set(new) ^ set(old), key=str)
    lines += [f"   only in {'new' if k in new else 'old'}: {k[0]} | {k[1]}" for k in only]
    return lines, worse


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare")
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--noise", type=float, default=0.1, help="relative noise band")
    args = parser.parse_args(argv)
    lines, worse = compare(_rows(args.old), _rows(args.new), args.noise)
    print("\n".join(lines))
    print(f"{len(worse)} row(s) slower than {1 + args.noise:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
