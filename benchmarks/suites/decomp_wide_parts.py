"""Where the time of the wide triangular solve's kernel goes (``decomp._kernels._wide_trsm_cuda``):
the kernel alone and with one part of it taken out, per order and dtype.

``python -m benchmarks.suites.decomp_wide_parts [--sizes 64,1024] [--json out.json]`` (GPU only):
each variant is the kernel's source with one part removed (:data:`PARTS`), compiled, and
launched through :class:`gpulinalg._runtime.kernels.Launcher` (one right-hand side, SciPy's
checks on), 300 launches between two CUDA events, best of five. The variants but ``no sleep``
compute wrong solutions; only their time means something. ``no sleep``: a block waiting for a
panel's tagged words reads them again at once, not after 64 ns (the pause spares the lines
that many blocks read; whether it costs the chain time is what this row says). ``paired
words`` (also right): a value of two or four words is written and read two words at a time
(16-byte ``v2.u64`` accesses, each word still whole), so a warp's poll of a double is one
load instead of two. At order 64 (one panel, one block) the kernel is
its fixed cost: the diagonal block's inversion, the coupling block, the summary's tail; at
1024 the chain of 16 panels comes on top (the inversion of the first panel is on it, the
others run beside it). ``no tail`` leaves the launch's tag where it was, so at orders above
64 its launches after the first find every panel's words already tagged and do not wait: read
it at order 64 only.
"""

import time

from benchmarks._harness import absent, row, write_rows

SUITE = "decomp_wide_parts"

#: variant -> (text of the kernel source, its replacement), or a list of them; ``mapped`` is
#: the whole kernel writing its summary into mapped host memory instead of the device summary.
PARTS = {
    "whole": None,
    "mapped": None,
    "no inversion": ("    if (warp < 2) {  // invert", "    if (false && warp < 2) {  // invert"),
    "no diagonal load": ("            v = rows[r * sr + (long long)(i0 + q) * sj];",
                         "            v = (r == q) ? T(2) : T(0);"),
    "no sleep": ("        __nanosleep(64);", "        ;"),
    "paired words": [(
        """    for (int i = 0; i < WPE; ++i)
        *(volatile unsigned long long*)(w + i) = ((unsigned long long)tag << 32) | b[i];
}""", """    for (int i = 0; i < WPE; i += 2) {
        const unsigned long long v0 = ((unsigned long long)tag << 32) | b[i];
        if (WPE == 1) { *(volatile unsigned long long*)w = v0; continue; }
        const unsigned long long v1 = ((unsigned long long)tag << 32) | b[(i + 1) % WPE];
        asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" :: "l"(w + i), "l"(v0),
                     "l"(v1) : "memory");
    }
}"""), (
        """        for (int i = 0; i < WPE; ++i) {
            const unsigned long long v = *(volatile const unsigned long long*)(w + i);
            b[i] = (unsigned int)v;
            ok = ok && (unsigned int)(v >> 32) == tag;
        }""", """        for (int i = 0; i < WPE; i += 2) {
            unsigned long long v0, v1;
            if (WPE == 1) {
                v0 = *(volatile const unsigned long long*)w;
                v1 = v0;
            } else {
                asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(v0), "=l"(v1)
                             : "l"(w + i) : "memory");
            }
            b[i] = (unsigned int)v0;
            if (WPE > 1) b[(i + 1) % WPE] = (unsigned int)v1;
            ok = ok && (unsigned int)(v0 >> 32) == tag && (unsigned int)(v1 >> 32) == tag;
        }""")],
    "no tail": ("    if (!s_last) return;",
                "    if (!s_last) return;\n    if (t == 0) { ws[0] = 0; ws[1] = 0; }\n    return;"),
}


def source(part):
    """The kernel's source with ``part`` (a key of :data:`PARTS`) taken out or changed."""
    from gpulinalg.decomp._kernels import _wide_trsm_cuda
    text, change = _wide_trsm_cuda._SOURCE, PARTS[part]
    for old, new in [] if change is None else change if isinstance(change, list) else [change]:
        if old not in text:
            raise ValueError(f"the kernel no longer holds the text that {part!r} changes")
        text = text.replace(old, new)
    return text


def _time(cp, fn, runs=300, rounds=5):
    """Seconds per launch of ``fn``: the best of ``rounds`` event timings of ``runs``."""
    from benchmarks._harness import event_timing as _event_timing
    for _ in range(20):
        fn()
    return min(_event_timing(cp, fn, runs)["median_s"] for _ in range(rounds))


def run(sizes=(64, 1024), dtypes=("float32", "float64")):
    """Rows of :data:`SUITE`: seconds per launch of each variant per order and dtype."""
    try:
        import cupy as cp
        import numpy as np
        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no GPU")
    except Exception as exc:  # noqa: BLE001 (reported as the row's reason)
        return [absent(SUITE, "wide kernel parts", "all", f"no GPU: {exc}"[:200])]
    from gpulinalg._runtime.kernels import INT32, INT64, POINTER, Launcher, raw_kernel
    from gpulinalg.decomp._kernels import _fused_cuda, _wide_trsm_cuda as wide
    from gpulinalg.decomp._kernels._scalars_cuda import KERNEL_TYPES, mapped_read_back
    rows = []
    for dtype in map(np.dtype, dtypes):
        t, r = KERNEL_TYPES[dtype]
        for n in sizes:
            a = cp.tril(cp.random.standard_normal((n, n)).astype(dtype)) / np.sqrt(n)
            a += 2 * cp.eye(n, dtype=dtype)
            b = cp.random.standard_normal((1, n, 1)).astype(dtype)
            x = cp.empty_like(b)
            stream = cp.cuda.get_current_stream().ptr
            summ, _ = _fused_cuda.summary(cp, "trsm", a.data.device_id, stream)
            grid = (wide.blocks(n, 1, 0),)
            ws = wide.workspace(cp, a.data.device_id, wide.words(n, 1, 0, dtype), stream)
            mapped = mapped_read_back(cp, "wide parts", a.data.device_id, stream)
            strides = tuple(s for v in (a[None], b, x) for s in _fused_cuda.strides_of(v))
            args = (POINTER, POINTER, POINTER, POINTER, np.int32(n), np.int32(1), *strides,
                    *(np.int32(0),) * 5, np.int32(3), POINTER, INT64, INT32)
            for part in PARTS:
                kern = raw_kernel("gl_wide_trsm", source(part), {"T": t, "R": r},
                                  options=("--std=c++17", f"-DNT={wide.THREADS}",
                                           f"-DMAXK={wide.MAX_RHS}"),
                                  shared_bytes=wide._shared_bytes(dtype))
                launch = Launcher(kern, grid, (wide.THREADS,), args, wide._shared_bytes(dtype))
                host = mapped.device if part == "mapped" else 0
                sec = _time(cp, lambda: launch.launch(stream, a[None], b, x, summ, ws, host,
                                                      mapped.arm()))
                rows.append(row(SUITE, f"wide kernel 1x{n}^2 {dtype.name}", part,
                                {"cold_s": sec, "median_s": sec, "min_s": sec, "runs": 300},
                                n=n, dtype=dtype.name))
                print(f"wide kernel 1x{n}^2 {dtype.name:8s} {part:18s} {sec * 1e6:8.2f} us",
                      flush=True)
                ws[...] = cp.asarray(wide.identities(ws.size))  # at rest for the next one
    return rows


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suites.decomp_wide_parts")
    parser.add_argument("--sizes", default="64,1024", help="orders, comma-separated")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    rows = run(tuple(int(s) for s in args.sizes.split(",")))
    if args.json:
        write_rows(args.json, rows, suite=SUITE,
                   time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
