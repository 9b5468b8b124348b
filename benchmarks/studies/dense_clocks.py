"""The GPU's clock while the large dense products run: what bounds the seed workload.

``python -m benchmarks.studies.dense_clocks [--json PATH]`` runs 8192³ and
(65536×16384)@(16384×8192) fp16 (ours with bias + ReLU + aux, ours without an epilog, torch
``_addmm_activation``) while ``nvidia-smi`` samples the SM clock, the power draw and the active
clock-event reasons every 50 ms. Each row has TFLOP/s (median of CUDA-event timings), the median SM
clock during the timed calls, the reasons seen (``0x4`` is the software power cap) and the fp16
dense peak at that clock (989 TFLOP/s at the 1980 MHz boost clock, scaled linearly).

Then every algorithm cuBLASLt's heuristic offers for the seed workload's ``RELU_AUX_BIAS``
product (and the first three with CTA swizzling flipped) is timed under sustained load: a dozen
calls first, so that the clock has settled where the power cap puts it, then ten timed ones.
Autotuning's short bursts at the boost clock cannot see which algorithm does best there.
"""

import argparse
import datetime
import json
import statistics
import subprocess
import tempfile
import time

from benchmarks._harness import environment, write_rows

PEAK_TFLOPS, BOOST_MHZ = 989.0, 1980.0
SHAPES = ((8192, 8192, 8192, 200), (65536, 16384, 8192, 30))
QUERY = "timestamp,clocks.sm,power.draw,clocks_event_reasons.active"


def _sampler(path):
    """``nvidia-smi`` writing one CSV line per 50 ms to ``path``."""
    return subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                             "-lms", "50"], stdout=open(path, "w"), stderr=subprocess.DEVNULL)


def _samples(path):
    out = []
    for line in open(path):
        parts = [p.strip() for p in line.split(",")]
        try:
            when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((when, float(parts[1]), float(parts[2]), parts[3]))
        except (ValueError, IndexError):
            continue
    return out


def _timed(fn, reps):
    """``(median ms, wall start, wall end)`` of ``reps`` event-timed calls after two warm-ups."""
    import cupy
    fn()
    fn()
    cupy.cuda.Device().synchronize()
    start = time.time()
    times = []
    for _ in range(reps):
        s, e = cupy.cuda.Event(), cupy.cuda.Event()
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(cupy.cuda.get_elapsed_time(s, e))
    return statistics.median(times), start, time.time()


def _impls(a, b, bias):
    from gpulinalg.dense import matmul
    impls = {"ours bias+relu+aux": lambda: matmul(a, b, bias=bias, activation="relu",
                                                  return_aux=True),
             "ours, no epilog": lambda: matmul(a, b)}
    try:
        import torch
        if torch.cuda.is_available():
            ta, tb, tbias = (torch.as_tensor(x, device="cuda") for x in (a, b, bias))
            impls["torch _addmm_activation"] = lambda: torch._addmm_activation(tbias, ta, tb)
    except ImportError:
        pass
    return impls


def run():
    import cupy
    rows, spans = [], []
    log = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    sampler = _sampler(log)
    time.sleep(0.5)
    try:
        rng = cupy.random.default_rng(0)
        for m, k, n, reps in SHAPES:
            a, b = (rng.standard_normal(s, dtype=cupy.float32).astype(cupy.float16)
                    for s in ((m, k), (k, n)))
            bias = rng.standard_normal(n, dtype=cupy.float32).astype(cupy.float16)
            for name, fn in _impls(a, b, bias).items():
                time.sleep(1.0)  # each row starts from an idle card
                ms, t0, t1 = _timed(fn, reps)
                rows.append({"case": f"fp16 ({m}x{k})@({k}x{n})", "impl": name,
                             "median_ms": round(ms, 3),
                             "tflops": round(2.0 * m * n * k / ms / 1e9, 1)})
                spans.append((t0, t1))
            del a, b, bias
            cupy.get_default_memory_pool().free_all_blocks()
        time.sleep(0.2)
    finally:
        sampler.terminate()
        sampler.wait()
    samples = _samples(log)
    for r, (t0, t1) in zip(rows, spans):
        inside = [s for s in samples if t0 <= s[0] <= t1]
        if not inside:
            continue
        clock = statistics.median(s[1] for s in inside)
        r.update(samples=len(inside), sm_clock_mhz=clock,
                 power_w=statistics.median(s[2] for s in inside),
                 clock_event_reasons=sorted({s[3] for s in inside}),
                 peak_at_clock_tflops=round(PEAK_TFLOPS * clock / BOOST_MHZ, 1),
                 pct_of_peak_at_clock=round(100 * r["tflops"] / (PEAK_TFLOPS * clock / BOOST_MHZ),
                                            1))
    return rows


def _sustained(mm, warm=12, reps=10):
    """TFLOP/s of ``mm.execute()`` after ``warm`` untimed calls (the clock settles first)."""
    import cupy
    for _ in range(warm):
        mm.execute()
    cupy.cuda.Device().synchronize()
    s, e = cupy.cuda.Event(), cupy.cuda.Event()
    s.record()
    for _ in range(reps):
        mm.execute()
    e.record()
    e.synchronize()
    m, k, n, _ = SHAPES[-1]
    return round(2.0 * m * n * k / (cupy.cuda.get_elapsed_time(s, e) / reps) / 1e9, 1)


def _config(algo):
    return {"algorithm_id": algo.algorithm_id, "tile": str(algo.tile), "stages": str(algo.stages),
            "split_k": algo.split_k, "cta_swizzling": bool(algo.cta_swizzling),
            "cluster_shape": str(algo.cluster_shape), "custom_option": algo.custom_option}


def candidates():
    """One row per heuristic candidate of the seed ``RELU_AUX_BIAS`` product, sustained TFLOP/s.

    The product is planned as ``gpulinalg`` plans it: ``b.T @ a.T`` (bias along ``N``).
    """
    import cupy
    from nvmath.linalg.advanced import Matmul, MatmulEpilog
    m, k, n, _ = SHAPES[-1]
    rng = cupy.random.default_rng(0)
    a, b = (rng.standard_normal(s, dtype=cupy.float32).astype(cupy.float16)
            for s in ((m, k), (k, n)))
    bias = rng.standard_normal(n, dtype=cupy.float32).astype(cupy.float16)
    epilog, inputs = MatmulEpilog.RELU_AUX_BIAS, {"bias": bias}
    case = f"fp16 ({m}x{k})@({k}x{n}) RELU_AUX_BIAS, sustained"
    heuristic = Matmul(b.T, a.T)
    heuristic.plan(preferences={"limit": 64}, epilog=epilog, epilog_inputs=inputs)
    rows = [{"case": case, "impl": "heuristic choice", "tflops": _sustained(heuristic)}]
    algos = list(heuristic.algorithms)
    trials = [(f"candidate {i}", algo, None) for i, algo in enumerate(algos)]
    trials += [(f"candidate {i}, CTA swizzling flipped", algo, "flip") for i, algo in
               enumerate(algos[:3])]
    for name, algo, change in trials:
        if change == "flip":
            algo.cta_swizzling = not algo.cta_swizzling
        mm = Matmul(b.T, a.T)
        try:
            mm.plan(algorithms=[algo], epilog=epilog, epilog_inputs=inputs)
            rows.append({"case": case, "impl": name, "tflops": _sustained(mm), **_config(algo)})
        except Exception as exc:  # a configuration cuBLASLt refuses is reported, not fatal
            rows.append({"case": case, "impl": name, "absent": f"{type(exc).__name__}: {exc}"})
        finally:
            mm.free()
    rows.append({"case": case, "impl": "heuristic choice, again", "tflops":
                 _sustained(heuristic)})
    heuristic.free()
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.dense_clocks")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    rows = run() + candidates()
    for r in rows:
        print(json.dumps(r))
    if args.json:
        write_rows(args.json, rows, environment=environment())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
