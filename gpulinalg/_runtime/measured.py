"""What ``backend="auto"`` measured: for each call signature on host inputs, the warm seconds
the CPU and the GPU took, so that the repeats of a call run on the side that was faster on
this machine instead of the side a cost model guessed.

A signature is the operation's name with its work and memory estimates rounded to half
octaves (the shapes and dtypes that cost about the same). Where the cost model
(:func:`.budget.model_seconds`) is decisive (one side over :data:`EXPLORE_RATIO` times the
other), its choice stands. Otherwise the first calls run on each side and are timed, and from
then on the faster side serves the signature. A run is timed only once the operation has run
on that side before in this process (a first run pays imports, plans, handles and compiled
kernels); the GPU side is tried only where the operation is already warm there or the model
finds the two sides within :data:`COLD_RATIO` (no small call pays the GPU's start-up for a
side the model thinks several times slower), and no side the model expects to take over
:data:`PROBE_MAX_S`.
"""

import math
import threading

__all__ = ["signature", "choose", "record", "mark_warm", "is_warm", "forget", "probes",
           "EXPLORE_RATIO", "COLD_RATIO", "PROBE_MAX_S"]

#: The cost model's choice stands without measuring when it makes the other side this many
#: times slower.
EXPLORE_RATIO = 20.0
#: The GPU side is tried before the operation ran there only when the model finds the two
#: sides within this factor.
COLD_RATIO = 4.0
#: No side is tried that the model expects to take longer than this (a slow guess is paid once
#: per signature, but it is paid).
PROBE_MAX_S = 0.25

_lock = threading.Lock()
_seconds: dict = {}  # signature -> {"cpu": s, "gpu": s} (the least warm time seen)
_warm: set = set()  # (operation name, side) that ran there in this process
_probes = [0]  # calls sent to the side the model did not choose, to be timed


def signature(name, job_bytes, flops):
    """The key of a call: ``name`` with ``job_bytes`` and ``flops`` in half octaves."""
    return (name, _bucket(job_bytes), _bucket(flops))


def _bucket(x):
    return -1 if not x else int(2 * math.log2(x))


def choose(key, cpu_s, gpu_s):
    """``(side, measure, reason)`` for the call ``key`` whose modelled seconds are ``cpu_s``
    and ``gpu_s``: the side to run, whether to time this run (:func:`record`), and what the
    record says (``None``: the caller's own reason for the model's choice)."""
    model = "cpu" if cpu_s <= gpu_s else "gpu"
    ratio = max(cpu_s, gpu_s) / max(min(cpu_s, gpu_s), 1e-9)
    if ratio > EXPLORE_RATIO:
        return model, False, None
    seen = _seconds.get(key, {})
    if "cpu" in seen and "gpu" in seen:
        side = "cpu" if seen["cpu"] <= seen["gpu"] else "gpu"
        return side, False, (f"measured here: cpu {seen['cpu'] * 1e3:.3g} ms, "
                             f"gpu {seen['gpu'] * 1e3:.3g} ms")
    if model not in seen:
        return model, True, None
    other = "gpu" if model == "cpu" else "cpu"
    if (cpu_s if other == "cpu" else gpu_s) > PROBE_MAX_S or \
            (other == "gpu" and (key[0], "gpu") not in _warm and ratio > COLD_RATIO):
        return model, False, None
    with _lock:
        _probes[0] += 1
    return other, True, (f"measuring the {other} side (the model's {model} side took "
                         f"{seen[model] * 1e3:.3g} ms)")


def record(key, side, seconds):
    """Keep ``seconds``, a warm run of ``key`` on ``side`` (the least one seen)."""
    with _lock:
        seen = _seconds.setdefault(key, {})
        seen[side] = min(seconds, seen.get(side, math.inf))


def mark_warm(name, side):
    """Note that ``name`` ran on ``side`` (any backend): its later runs there are warm."""
    if (name, side) not in _warm:
        with _lock:
            _warm.add((name, side))


def is_warm(name, side):
    """Whether ``name`` ran on ``side`` before in this process (its runs there are timed)."""
    return (name, side) in _warm


def probes():
    """How many calls :func:`choose` has sent to the side the cost model did not choose, to
    time it (a timing loop leaves those runs out of a steady-state figure)."""
    return _probes[0]


def forget():
    """Drop every measurement (tests; a changed machine state)."""
    with _lock:
        _seconds.clear()
        _warm.clear()
