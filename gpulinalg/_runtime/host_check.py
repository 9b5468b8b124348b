"""The host-memory check before a CPU run: the bytes an :class:`~.dispatch.Op`'s CPU run needs,
the choice among the Op and its lighter variants of one that fits the host budget
(:mod:`.budget_host`), and the refusal that names what was needed, what exists and the
options when none does (nothing of the run is allocated).

A lighter variant is an automatic choice: one that fits but whose modelled CPU time is over
:data:`LIGHTER_CPU_SECONDS` is not started either (a GP's matrix-free solver on a machine
without a GPU: hours where the user asked for seconds); asked for by name, it runs.
"""

import logging

from . import arrays as _arrays
from . import budget as _budget
from . import budget_host as _budget_host
from .errors import OutOfMemoryError
from .records import local as _local
from .records import mark_recorded

__all__ = ["choose", "needed_bytes", "message", "variant", "size_text", "arrays_bytes",
           "HOST_ARGS_FACTOR", "LIGHTER_CPU_SECONDS"]

log = logging.getLogger("gpulinalg")
_NUMPY = _arrays.Kind.NUMPY
_host_fits = _budget_host.host_fits

#: Host bytes of a CPU run, as a multiple of its array arguments' bytes, for an Op whose
#: ``nbytes`` is a callable and that gives no ``host_nbytes``: a copy of the inputs, the output
#: and a workspace of the same size (LAPACK's solve measured 2.1x, inv 3.1x, lu_factor 1.1x).
HOST_ARGS_FACTOR = 3
#: The longest modelled CPU run (:func:`.budget.model_seconds`) of a lighter variant chosen
#: because the Op itself does not fit; a longer one is refused like a run that does not fit.
LIGHTER_CPU_SECONDS = 300.0


def variant(op):
    """``op``'s details for a reason (``"precision='mixed': "``), ``""`` without any."""
    return "".join(f"{k}={v!r}, " for k, v in op.details.items())[:-2] + ": " \
        if op.details else ""


def choose(op, args, kwargs, kind, reason, fell_back, settings):
    """``(op, args, kwargs, (needed, allowed), reason)`` of the CPU run: ``op`` when its host
    estimate fits the host budget, else the first of its lighter variants that does (the
    reason then says why); when none does, records the refusal and raises
    :class:`OutOfMemoryError` naming each variant's need (nothing of the run allocated)."""
    tried, first = [], op  # tried: (variant, needed) of those over the budget
    while True:
        needed = needed_bytes(op, args, kwargs, kind)
        ok, allowed, avail = _host_fits(needed, settings.host_memory_share)
        if ok or op.lighter is None:
            break
        tried.append((op, needed))
        op, args, kwargs = op.lighter, op.lighter.args, op.lighter.kwargs or {}
    verdicts = [f"{variant(v)}host estimate {b} B over the {allowed} B allowed"
                for v, b in tried]
    slow = _slow_lighter(op, first) if ok else None
    if ok and slow is None:
        if first.lighter is not None:  # a choice between variants: say why this one
            verdicts.append(f"{variant(op)}host estimate {needed} B within the {allowed} B "
                            "allowed")
        return op, args, kwargs, (needed, allowed), "; ".join([reason, *verdicts])
    if slow is not None:
        verdicts.append(f"{variant(op)}fits, but its modelled CPU time {slow:.3g} s is over "
                        f"{LIGHTER_CPU_SECONDS:g} s")
        why = "not started: the variants that fit would run too long on the CPU"
        heavy, heavy_needed = tried[-1]  # the lightest variant that does not fit
        text = message(heavy, heavy_needed, allowed, avail, reason, settings, tried[:-1]) + (
            f" The lighter {variant(op)[:-2]} fits in host memory ({size_text(needed)}), "
            f"but would run about {_duration(slow)} on this CPU (modelled): it is not started "
            f"automatically; pass {variant(op)[:-2]} to run it anyway.")
        needed = heavy_needed
    else:
        why = (f"not started: its host-memory estimate {size_text(needed)} is over the "
               f"{size_text(allowed)} it may use")
        text = message(op, needed, allowed, avail, reason, settings, tried)
    exc = OutOfMemoryError(text, needed, allowed, avail, "host")
    _local.record = (op.name, "cpu", "cpu", fell_back, "; ".join([reason, *verdicts, why]), 0.0,
                     {"raised": f"OutOfMemoryError: {exc}", "host_bytes": needed,
                      "host_allowed": allowed, "host_available": avail})
    log.error("%s: %s", op.name, why)
    raise mark_recorded(exc)


def _slow_lighter(op, first):
    """The modelled CPU seconds of the lighter variant ``op`` taken in place of ``first`` when
    over :data:`LIGHTER_CPU_SECONDS`; ``None`` for ``first`` itself or a quick enough one."""
    if op is first or op.flops is None:
        return None
    seconds = _budget.model_seconds(float(op.flops), 0)[0]
    return seconds if seconds > LIGHTER_CPU_SECONDS else None


def _duration(seconds):
    """``seconds`` for a message: ``"3.2 hours"``, ``"14 minutes"``."""
    return f"{seconds / 3600:.2g} hours" if seconds >= 5400 else f"{seconds / 60:.2g} minutes"


def needed_bytes(op, args, kwargs, kind):
    """Host bytes of ``op``'s CPU run (see :attr:`Op.host_nbytes`)."""
    needed = op.host_nbytes
    if needed is None:
        needed = op.nbytes
        if type(needed) is not int:
            needed = HOST_ARGS_FACTOR * arrays_bytes(args, kwargs) if callable(needed) \
                else int(needed)  # a GPU estimate that may ask a GPU library: never called
    else:
        if type(needed) is not int:
            needed = int(needed()) if callable(needed) else int(needed)
        if kind is not _NUMPY and op.convert:  # the host copies of GPU arguments
            needed += arrays_bytes(args, kwargs, gpu_only=True)
    return needed


def message(op, needed, allowed, avail, reason, settings, tried=()):
    """The refusal's message (``tried``: ``(variant, needed)`` of the heavier variants, each
    over the budget too)."""
    share = settings.host_memory_share
    options = [] if tried else [
        'lower precision: precision="mixed" where the call has it (GaussianProcess'
        'Regressor: a float32 kernel matrix refined to float64 accuracy, about half the '
        'bytes), or float32 inputs where float64 is not needed']
    options.append("Dask arrays on a cluster with more memory, where the operation takes them "
                   "(docs/dask.md)")
    options.append("a smaller problem (fewer points, rows or columns, or a subset)")
    if share < 1.0:
        options.append("a larger share: gpulinalg.set_config(host_memory_share=...)")
    lighter = f" with {variant(op)[:-2]} (" + ", ".join(
        f"{variant(v)[:-2]}: {size_text(b)}" for v, b in tried) + ")" if tried else ""
    return (f"{op.name} was not started: its CPU run needs about {size_text(needed)} of host "
            f"memory{lighter}, and this machine has {size_text(avail)} available, of which "
            f"{size_text(allowed)} (host_memory_share={share:g}) may be used. Options: "
            + "; ".join(options)
            + f". (It was to run on the CPU because: {reason}.)")


def size_text(nbytes):
    """``nbytes`` for a message: ``"1.5 GiB (1610612736 B)"``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit} ({nbytes} B)"
    return f"{nbytes} B"


def arrays_bytes(args, kwargs, gpu_only=False, host_only=False):
    """Bytes of the array arguments (top level and inside tuples, lists and dicts); only those
    on a GPU with ``gpu_only``; only those on the host with ``host_only``, host matrices read
    in panels (an ``nbytes`` of their own, PCA's and truncated_svd's host input) included."""
    total = 0
    for x in (*args, *(kwargs or {}).values()):
        if isinstance(x, (tuple, list)):
            total += arrays_bytes(x, None, gpu_only, host_only)
        elif isinstance(x, dict):
            total += arrays_bytes(x.values(), None, gpu_only, host_only)
        elif _arrays.is_array(x):
            if (not gpu_only and not host_only) or _arrays.on_gpu(x) is gpu_only:
                total += int(x.nbytes)
        elif gpu_only and _arrays.is_gpu_sparse(x):  # a CuPy sparse matrix: its arrays
            total += sum(int(getattr(x, f).nbytes) for f in ("data", "indices", "indptr", "row",
                                                              "col") if hasattr(x, f))
        elif host_only and type(getattr(x, "nbytes", None)) is int and \
                not type(x).__module__.startswith("cupy"):
            total += x.nbytes
    return total
