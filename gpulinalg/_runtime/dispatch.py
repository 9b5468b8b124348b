"""The one dispatcher: every public operation runs through :func:`dispatch`.

It alone picks the GPU or the CPU, moves arrays, falls back, and records what happened.
"""

import dataclasses
import functools
import logging
import sys
import threading
import time

from . import arrays as _arrays
from . import budget as _budget
from . import device as _device
from .config import Backend, Fallback, get_config
from .errors import FallbackWarning, GPUUnavailableError
from .errors import warn as _warn
from .streams import op_stream as _op_stream
from .validation import is_dask as _is_dask

__all__ = ["dispatch", "front_door", "RunRecord", "last_run", "is_sticky", "granted_bytes",
           "headroom_bytes", "note", "shortcut", "Decision", "again"]

log = logging.getLogger("gpulinalg")

# Enum members as module globals: a class-attribute lookup of an Enum member costs several
# times a global lookup, and the hot path makes half a dozen.
_CPU, _GPU, _AUTO, _RAISE = Backend.CPU, Backend.GPU, Backend.AUTO, Fallback.RAISE
_CUPY, _NUMPY = _arrays.Kind.CUPY, _arrays.Kind.NUMPY

#: CUDA error codes after which the context is unusable (illegal address, launch failure, ...).
STICKY_CUDA_ERRORS = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 720})


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What the last operation of a thread did (see :func:`gpulinalg.last_run`)."""

    op: str
    backend: str  # "gpu", "gpu-out-of-core", "cpu", "dask" (a lazy graph), or "none"
    device: object  # GPU index, or "cpu"
    fell_back: bool
    reason: str
    seconds: float
    details: dict = dataclasses.field(default_factory=dict)


def _new_record(op, backend, device, fell_back, reason, seconds, details):
    """``RunRecord(...)`` without the frozen dataclass's per-field ``object.__setattr__`` calls
    (the same immutable object, built in a third of the time). ``reason`` may still be a
    ``(format, *values)`` tuple (see :func:`_plan`)."""
    reason = _reason_text(reason)
    rec = object.__new__(RunRecord)
    rec.__dict__.update(op=op, backend=backend, device=device, fell_back=fell_back,
                        reason=reason, seconds=seconds, details=details)
    return rec


class _Local(threading.local):
    record = None  # class defaults: lookups on the hot path never raise AttributeError
    details = None
    granted = None
    headroom = None


_local = _Local()
# What a repeat (again()) reads on every call, bound once: the calling thread's device provider
# (a threading.local, never replaced), the GPU's state (a dict, updated in place), the clock and
# the logger's level check (a logger's level still counts at every call).
_installed, _gpu_state = _device._installed, _device._state
_clock, _debug_on, _DEBUG = time.perf_counter, log.isEnabledFor, logging.DEBUG


def _reason_text(reason):
    return reason[0].format(*reason[1:]) if type(reason) is tuple else reason


def last_run() -> "RunRecord | None":
    """The :class:`RunRecord` of the calling thread's last operation (``None`` before any).

    The dispatcher keeps the record's fields as a plain tuple; the record is made when asked
    for (once).

    Examples
    --------
    >>> import numpy as np, gpulinalg
    >>> with gpulinalg.config(backend="cpu"):
    ...     _ = gpulinalg.decomp.cholesky(np.eye(2))
    >>> gpulinalg.last_run().backend
    'cpu'
    """
    rec = _local.record
    if type(rec) is tuple:
        rec = _local.record = _new_record(*rec)
    return rec


def note(**details: object) -> None:
    """Let the running operation add details (iterations, residuals...) to its record."""
    pending = getattr(_local, "details", None)
    if pending is not None:
        pending.update(details)


def shortcut(op, result, reason="empty input: nothing to compute"):
    """Return ``result`` of a call answered without running anything (empty input, ``k = 0``),
    recorded like any other call: :func:`last_run` says so (backend ``"none"``), and
    ``backend="gpu"`` without a usable GPU still raises :class:`GPUUnavailableError`, as the
    same call with data would.

    Examples
    --------
    >>> import gpulinalg
    >>> shortcut("decomp.qr", ()) == ()
    True
    >>> gpulinalg.last_run().backend, gpulinalg.last_run().reason
    ('none', 'empty input: nothing to compute')
    """
    if get_config().backend is _GPU and not _device.gpu_available():
        _local.record = (op, "none", "cpu", False, reason, 0.0, {"raised": "GPUUnavailableError"})
        raise GPUUnavailableError(f"{op}: backend='gpu' but no usable GPU: "
                                  f"{_device.unavailable_reason()}")
    _local.record = (op, "none", "none", False, reason, 0.0, {})
    return result


def granted_bytes():
    """Device bytes the dispatcher found available for the out-of-core run in progress on this
    thread (``None`` outside one): a streaming GPU function sizes its panels from this figure
    instead of asking the budget again.

    Examples
    --------
    >>> granted_bytes() is None
    True
    """
    return _local.granted


def headroom_bytes():
    """Device bytes beyond its estimate that the dispatcher found available for the GPU run in
    progress on this thread (``None`` outside one): what a GPU function may spend on an
    optional buffer (a faster route's workspace) instead of asking the budget again, or trying
    the allocation and catching its failure.

    Examples
    --------
    >>> headroom_bytes() is None
    True
    """
    return _local.headroom


def is_sticky(exc):
    """True when ``exc`` (or its cause) carries a CUDA status that poisons the context."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        status = getattr(exc, "status", None)
        try:
            if status is not None and int(status) in STICKY_CUDA_ERRORS:
                return True
        except (TypeError, ValueError):
            pass
        exc = exc.__cause__ or exc.__context__
    return False


def _free_pools():
    cupy = sys.modules.get("cupy")
    if cupy is None or not _device.gpu_is_real():
        return
    try:
        cupy.cuda.get_current_stream().synchronize()
    except Exception:  # a poisoned context: freeing is all that is left to try
        pass
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()


def front_door(op):
    """Decorator of a public function whose validation computes on the caller's GPU arrays
    (finiteness checks, conversions, CSR normalization) before :func:`dispatch` decides.

    Running out of GPU memory there is handled like it is in a dispatched GPU run: the pools
    are freed, then under ``fallback="cpu"`` the whole call runs again on host copies on the
    CPU (results back in the caller's package and device, a :class:`FallbackWarning`, recorded
    as a fallback); under ``fallback="raise"`` the ``MemoryError`` propagates, recorded. A
    ``MemoryError`` the dispatcher already handled passes through untouched.

    Examples
    --------
    >>> @front_door("demo.double")
    ... def double(x):
    ...     return 2 * x
    >>> double(3)
    6
    """
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except MemoryError as exc:
                if getattr(exc, "_gpulinalg_recorded", False):
                    raise
                return _front_door_fallback(op, fn, args, kwargs, exc)
        return call
    return wrap


def _front_door_fallback(op, fn, args, kwargs, exc):
    from .config import config_context
    settings = get_config()
    _free_pools_quietly()
    why = f"GPU out of memory before the dispatch ({type(exc).__name__}: {exc})"
    values = (*args, *kwargs.values())
    if settings.fallback is _RAISE or not (_arrays.any_on_gpu(values)
                                           or any(map(_arrays.is_gpu_sparse, values))):
        _local.record = (op, "gpu", _device.current_device(), False, why, 0.0,
                         {"raised": f"{type(exc).__name__}: {exc}"})
        raise exc
    _warn(f"gpulinalg: {op} ran on the CPU: {why}", FallbackWarning)
    kind, like = _arrays.caller_kind(*args, *kwargs.values())
    host_args = tuple(_arrays.host_copies(a) for a in args)
    host_kwargs = {k: _arrays.host_copies(v) for k, v in kwargs.items()}
    start = time.perf_counter()
    with config_context(backend="cpu"):
        result = fn(*host_args, **host_kwargs)
    result = _arrays.convert_tree(result, lambda x: _arrays.to_kind(x, kind, like))
    seconds = time.perf_counter() - start
    _local.record = (op, "cpu", "cpu", True, why, seconds, {})
    log.warning("%s ran on %s (%s) in %.3g s", op, "cpu", why, seconds)
    return result


def dispatch(op, gpu_fn, cpu_fn, args=(), kwargs=None, *, nbytes=0, flops=None,
             oversize_fn=None, convert=True, like=None, same_package=False, own_stream=True,
             dask_fn=None, no_gpu_reason="no GPU engine for this call"):
    """Run operation ``op`` on the GPU or the CPU and return its result in the caller's package.

    Parameters
    ----------
    op : str
        Name recorded in :func:`last_run` and the log (``"decomp.qr"``).
    gpu_fn, cpu_fn : callable
        Same signature. With ``convert=True``, array arguments reach ``gpu_fn`` as CuPy arrays
        and ``cpu_fn`` as NumPy arrays, and arrays in the result go back to the caller's package.
    args, kwargs : tuple, dict
        Arguments for the chosen function.
    nbytes : int or callable
        Estimated peak device bytes of the GPU run (inputs, outputs, workspaces). A callable
        (no arguments) is called only when the dispatcher considers the GPU, so estimates that
        ask a GPU library (workspace queries) are never made for a CPU run.
    flops : float, optional
        Work estimate; with host inputs under ``backend="auto"`` it decides whether the transfer
        pays (:func:`gpulinalg._runtime.budget.offload_pays`). ``None``: always offload.
    oversize_fn : callable, optional
        GPU route for jobs larger than the budget (out-of-core); used instead of the CPU then.
    like : array, optional
        Array whose package and device results take (default: the first array argument).
    same_package : bool
        The caller checked that every array argument is of one package: CuPy arguments on the
        GPU route then skip the conversion walks (there is nothing to move).
    own_stream : bool
        Run ``gpu_fn`` on the thread's own stream, ordered against the caller's current stream
        by events (:class:`~gpulinalg._runtime.streams.op_stream`), as libraries whose handle is
        bound to a stream need. ``False``: on the caller's current stream itself, for functions
        that name their stream in every call (cuBLASLt), saving the two event hand-offs.
    gpu_fn=None
        This call has no GPU engine (e.g. an option cuSOLVER lacks): it runs on the CPU,
        recorded with ``no_gpu_reason``; under ``backend="gpu"`` as a fallback, with a
        :class:`FallbackWarning`.
    dask_fn : callable, optional
        The Dask route: when an argument is a ``dask.array.Array``, it is called instead (same
        signature) and returns lazy Dask arrays built on the user's cluster; without one, Dask
        input raises ``TypeError`` (it is never computed behind the caller's back).
    """
    kwargs = kwargs or {}
    if "dask" in sys.modules and _is_dask(*args, *kwargs.values()):  # one lookup without Dask
        return _run_dask(op, dask_fn, args, kwargs)
    settings = get_config()
    kind, like_arr = (_arrays.kind_of(like), like) if like is not None else \
        _arrays.caller_kind(*args, *kwargs.values())
    if gpu_fn is None:
        return _without_gpu_engine(op, cpu_fn, args, kwargs, kind, like_arr, convert,
                                   settings, no_gpu_reason)
    try:
        route, reason, fell_back, dev = _plan(op, settings, args, kwargs, nbytes, flops,
                                              oversize_fn, kind if same_package else None)
    except Exception as exc:  # a sticky error from an earlier call surfaces in the memory query
        if not is_sticky(exc):
            raise
        route, reason, fell_back = "cpu", _on_sticky(op, exc, settings), True
        _warn(f"gpulinalg: {op} ran on the CPU: {reason}", FallbackWarning)
    if route == "cpu":
        return _run(op, "cpu", cpu_fn, args, kwargs, kind, like_arr, convert, reason, fell_back)
    fn = oversize_fn if route == "gpu-out-of-core" else gpu_fn
    gpu_convert = convert and not (same_package and kind is _CUPY)
    try:
        return _run(op, route, fn, args, kwargs, kind, like_arr, gpu_convert, reason, False,
                    own_stream, dev)
    except Exception as exc:
        why = _after_gpu_failure(op, exc, settings)
    return _fall_back(op, cpu_fn, args, kwargs, kind, like_arr, convert, why)


def _out_of_memory(exc):
    """``exc`` as a ``MemoryError`` when it is the GPU running out of memory, else ``None``.

    CuPy's ``OutOfMemoryError`` is a ``MemoryError``; torch's caching allocator raises
    ``torch.OutOfMemoryError``, a ``RuntimeError``: it becomes a ``MemoryError`` (chained)."""
    if isinstance(exc, MemoryError):
        return exc
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom is not None and isinstance(exc, oom):
        mem = MemoryError(f"GPU out of memory in torch's allocator: {exc}")
        mem.__cause__ = exc
        return _mark_recorded(mem)
    return None


def _after_gpu_failure(op, exc, settings):
    """The reason to run on the CPU after a GPU run raised ``exc`` (out of memory, or a sticky
    CUDA error); raises when it is neither, or under ``fallback="raise"``."""
    mem = _out_of_memory(exc)
    if mem is not None:
        _free_pools_quietly()
        if settings.fallback is _RAISE:
            if mem is exc:
                raise exc
            raise mem from exc
        return f"GPU out of memory ({type(exc).__name__}: {exc})"
    if not is_sticky(exc):
        raise exc
    return _on_sticky(op, exc, settings)


def _fall_back(op, cpu_fn, args, kwargs, kind, like_arr, convert, why):
    _warn(f"gpulinalg: {op} ran on the CPU: {why}", FallbackWarning)
    return _run(op, "cpu", cpu_fn, args, kwargs, kind, like_arr, convert, why, True)


class Decision:
    """A :func:`dispatch` call kept by its caller for repeats of the same call (see :func:`again`).

    Everything but the arrays: ``op``, ``gpu_fn``, ``cpu_fn`` and the keywords of
    :func:`dispatch` (``nbytes``, ``flops``, ``convert``, ``same_package``, ``own_stream``). A
    caller keeps one per call key (same package, shapes, layouts and options, so the same
    estimate).
    """

    __slots__ = ("op", "gpu_fn", "cpu_fn", "options", "settings", "dev", "reason", "own")

    def __init__(self, op, gpu_fn, cpu_fn, **options):
        self.op, self.gpu_fn, self.cpu_fn, self.options = op, gpu_fn, cpu_fn, options
        self.own = options.get("own_stream", True)  # a repeat runs on the thread's stream
        self.settings = None  # the Settings the GPU decision was made under, while it holds


def again(decision, args, like, settings):
    """``dispatch(op, gpu_fn, cpu_fn, args, like=like, **options)`` of ``decision``, deciding
    once: a repeat runs ``gpu_fn(*args)`` at once and is recorded as a GPU run when the last
    decision was a GPU run on the arrays as given (no conversion; on the thread's own stream,
    ordered against the caller's, with ``own_stream``, else on the caller's stream) of a job
    of at most ``budget.FREE_CACHE_FRACTION`` of the memory then available, and nothing it
    depended on changed since: ``settings`` (the caller's ``get_config()`` of this call) is the
    same object, no device provider is installed, the GPU is not disabled. Anything else, and
    any exception of the repeat, goes through :func:`dispatch` (which decides afresh, falls
    back or raises, and records).
    """
    d = decision
    if d.settings is settings and _installed.provider is None and _gpu_state["disabled"] is None:
        local = _local
        start = _clock()
        local.details = details = {}  # what the engine notes (note()) goes in the record
        try:
            if d.own:
                with _op_stream():
                    result = d.gpu_fn(*args)
            else:
                result = d.gpu_fn(*args)
        except Exception as exc:
            _local.details = None
            d.settings = None
            if _out_of_memory(exc) is not None or is_sticky(exc):  # not run on the GPU again
                _local.record = (d.op, "gpu", d.dev, False, d.reason,
                                 time.perf_counter() - start,
                                 {"raised": f"{type(exc).__name__}: {exc}"})
                why = _after_gpu_failure(d.op, exc, settings)
                kind = _arrays.kind_of(like) if like is not None else None
                return _fall_back(d.op, d.cpu_fn, args, {}, kind, like,
                                  d.options.get("convert", True), why)
        else:
            local.details = None
            seconds = _clock() - start
            local.record = (d.op, "gpu", d.dev, False, d.reason, seconds, details)
            if _debug_on(_DEBUG):
                log.debug("%s ran on gpu (%s) in %.3g s", d.op, _reason_text(d.reason), seconds)
            return result
    result = dispatch(d.op, d.gpu_fn, d.cpu_fn, args, like=like, **d.options)
    rec, opts = _local.record, d.options
    reason = rec[4] if type(rec) is tuple and rec[1] == "gpu" else None
    # a GPU run's reason is ("estimate {} B fits in {} B", nbytes, available) (see _plan)
    d.settings = settings if (
        type(reason) is tuple and len(reason) == 3
        and reason[1] <= _budget.FREE_CACHE_FRACTION * reason[2]
        and _device._installed.provider is None
        and (not opts.get("convert", True)
             or (opts.get("same_package") and _arrays.kind_of(like) is _CUPY))) else None
    if d.settings is not None:
        d.dev, d.reason = rec[2], (reason[0] + " (decided at the first call)", *reason[1:])
    return result


def _without_gpu_engine(op, cpu_fn, args, kwargs, kind, like_arr, convert, settings, why):
    """A call the GPU cannot serve runs on the CPU, visibly: the reason is recorded, and a
    caller who insisted on the GPU gets a fallback warning (results still go back to the
    caller's package and device)."""
    fell_back = settings.backend is _GPU
    if fell_back:
        _warn(f"gpulinalg: {op} ran on the CPU: {why}", FallbackWarning)
    return _run(op, "cpu", cpu_fn, args, kwargs, kind, like_arr, convert, why, fell_back)


def _mark_recorded(exc):
    """Tag ``exc`` as handled and recorded by the dispatcher (see :func:`front_door`)."""
    try:
        exc._gpulinalg_recorded = True
    except (AttributeError, TypeError):  # an exception type without a __dict__
        pass
    return exc


def _run_dask(op, dask_fn, args, kwargs):
    """Build the lazy graph of ``dask_fn`` (nothing runs until the caller computes it)."""
    if dask_fn is None:
        raise TypeError(f"{op} does not take Dask arrays; pass a NumPy, CuPy or torch array "
                        "(dask_array.compute() gives one), or see docs/dask.md for what does")
    _local.details = details = {}
    start = time.perf_counter()
    try:
        result = dask_fn(*args, **kwargs)
    except BaseException as exc:
        details["raised"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _local.details = None
        _local.record = (op, "dask", "dask", False, "Dask array input: lazy graph for the "
                         "user's cluster", time.perf_counter() - start, details)
    return result


def _on_sticky(op, exc, settings):
    """Disable the GPU for the process and return why; re-raise under ``fallback="raise"``
    (warning then that the GPU is gone, since no CPU run will say it). The caller warns once
    for the CPU run, so the first sticky error gives one warning, not two."""
    _free_pools_quietly()
    why = f"sticky CUDA error ({type(exc).__name__}: {exc}); GPU disabled for this process"
    if _device.disable_gpu(why):
        log.error("%s: %s", op, why)
        if settings.fallback is _RAISE:
            _warn(f"gpulinalg: {why}", FallbackWarning)
    if settings.fallback is _RAISE:
        raise exc
    return why


def _free_pools_quietly():
    try:
        _free_pools()
    except Exception:  # the context is gone; nothing more can be freed
        pass


def _plan(op, settings, args, kwargs, nbytes, flops, oversize_fn, kind=None):
    """Return ``(route, reason, fell_back, device)`` before anything runs (``kind``: the one
    package of every array argument, when the caller checked that; ``device``: the current GPU
    for the GPU routes, else ``"cpu"``). ``reason`` may be a ``(format, *values)`` tuple,
    formatted only when the record is read."""
    if settings.backend is _CPU:
        return "cpu", "backend='cpu'", False, "cpu"
    if not _device.gpu_available():
        why = _device.unavailable_reason()
        if settings.backend is _GPU:
            raise GPUUnavailableError(f"{op}: backend='gpu' but no usable GPU: {why}")
        return "cpu", f"no GPU: {why}", False, "cpu"
    if callable(nbytes):
        nbytes = int(nbytes())
    if kind is _CUPY or kind is _NUMPY:
        on_host = kind is _NUMPY
    else:
        on_host = not (_arrays.any_on_gpu(args)
                       or (kwargs and _arrays.any_on_gpu(kwargs.values())))
    if settings.backend is _AUTO and on_host and not _budget.offload_pays(flops, nbytes):
        return "cpu", "host inputs; too small for the GPU to pay", False, "cpu"
    dev = _device.current_device()
    ok, avail = _budget.fits(nbytes, dev)
    if ok:
        _local.headroom = avail - nbytes
        return "gpu", ("estimate {} B fits in {} B", nbytes, avail), False, dev
    if oversize_fn is not None:
        _local.granted = avail
        return ("gpu-out-of-core", f"estimate {nbytes} B > {avail} B available: streaming",
                False, dev)
    why = f"estimate {nbytes} B > {avail} B available on the GPU"
    if settings.fallback is _RAISE:
        exc = MemoryError(f"{op}: {why} and fallback='raise'")
        _local.record = (op, "gpu", dev, False, why, 0.0, {"raised": f"MemoryError: {exc}"})
        raise _mark_recorded(exc)
    _warn(f"gpulinalg: {op} ran on the CPU: {why}", FallbackWarning)
    return "cpu", why, True, "cpu"


def _run(op, route, fn, args, kwargs, kind, like_arr, convert, reason, fell_back,
         own_stream=True, dev="cpu"):
    _local.details = details = {}
    start = time.perf_counter()
    if route == "cpu":
        dev = "cpu"
    try:
        if route == "cpu":
            result = _call_cpu(fn, args, kwargs, convert)
        else:
            prov = _device._installed.provider
            if prov is not None:  # a provider installed by a test or the demo
                prov.before_run(op)
                result = _call_gpu(fn, args, kwargs, convert, own_stream, prov.simulated)
            elif own_stream or convert:
                result = _call_gpu(fn, args, kwargs, convert, own_stream)
            else:  # the caller's stream, arrays as given: the per-call hot path of dense
                result = fn(*args, **kwargs)
        if convert:
            result = _arrays.convert_tree(result, lambda x: _arrays.to_kind(x, kind, like_arr))
    except BaseException as exc:  # the record says what ran, also when it raised
        details["raised"] = f"{type(exc).__name__}: {exc}"
        _mark_recorded(exc)
        _local.record = (op, route, dev, fell_back, reason, time.perf_counter() - start, details)
        raise
    finally:
        _local.details = None
        _local.granted = _local.headroom = None
    seconds = time.perf_counter() - start
    _local.record = (op, route, dev, fell_back, reason, seconds, details)  # see last_run()
    level = logging.WARNING if fell_back else logging.DEBUG
    if log.isEnabledFor(level):
        log.log(level, "%s ran on %s (%s) in %.3g s", op, route, _reason_text(reason), seconds)
    return result


def _call_cpu(fn, args, kwargs, convert):
    return _call_moved(fn, args, kwargs, _arrays.to_host if convert else None)


def _call_gpu(fn, args, kwargs, convert, own_stream=True, simulated=False):
    if simulated:  # a simulated GPU (test provider): arrays stay on the host
        return _call_cpu(fn, args, kwargs, convert)
    move = _arrays.to_device if convert else None
    if not own_stream:
        return _call_moved(fn, args, kwargs, move)
    with _op_stream():
        return _call_moved(fn, args, kwargs, move)


def _call_moved(fn, args, kwargs, move):
    """``fn(*args, **kwargs)`` with every array argument passed through ``move`` first."""
    if move is not None:
        args = _arrays.convert_tree(args, move)
        if kwargs:
            kwargs = _arrays.convert_tree(kwargs, move)
    return fn(*args, **kwargs)
