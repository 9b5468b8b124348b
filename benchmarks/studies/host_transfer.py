"""How fast a NumPy array reaches the GPU: gpulinalg's staged copy (``to_device``, through
pinned buffers) against the pageable copies users make (``cupy.asarray``,
``torch.from_numpy(x).cuda()``) and the bound (a copy from memory that is already pinned).

Usage (on the GPU machine)::

    python -m benchmarks host_transfer [--sizes-mb 16,64,256,1024] [--repeat 5] [--json out.json]

Rows: ``case`` = the array's size, ``impl`` = the copy; cold first call and warm median/min,
``gbps`` the warm median's rate.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks import _harness

SUITE = "host_transfer"


def copies(host):
    """name -> a function copying ``host`` to the GPU the way that name does."""
    import cupy
    import cupyx

    from gpulinalg._runtime import arrays
    fns = {"gpulinalg to_device (staged)": lambda: arrays.to_device(host),
           "cupy.asarray (pageable)": lambda: cupy.asarray(host)}
    if _harness.cuda_torch():
        import torch
        t = torch.from_numpy(host)
        fns["torch .cuda() (pageable)"] = lambda: t.cuda()
    pinned = cupyx.empty_pinned(host.shape, host.dtype)
    pinned[...] = host
    fns["from pinned memory (bound)"] = lambda: cupy.asarray(pinned)
    return fns


def run(sizes_mb, repeat):
    rows = []
    for mb in sizes_mb:
        host = np.random.default_rng(0).standard_normal((mb << 18,), dtype=np.float32)
        host = host.reshape(-1, 256)
        timings, failed = _harness.interleaved_sync(copies(host), repeat)
        case = f"{mb} MiB float32"
        for impl, t in timings.items():
            rows.append(_harness.row(SUITE, case, impl, t, nbytes=host.nbytes,
                                     gbps=host.nbytes / t["median_s"] / 1e9))
        rows += [_harness.absent(SUITE, case, impl, _harness.why_failed(e))
                 for impl, e in failed.items()]
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks host_transfer",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mb", default="16,64,256,1024,4096",
                   help="comma-separated array sizes in MiB")
    p.add_argument("--repeat", type=int, default=5, help="warm rounds")
    p.add_argument("--json", help="write the rows and the environment here")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes_mb.split(",")]
    _harness.run_keeping_rows(lambda: run(sizes, args.repeat), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
