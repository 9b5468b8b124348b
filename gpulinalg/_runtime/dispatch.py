"""The one dispatcher: every public operation runs through :func:`dispatch`, once.

An ``_api`` function describes its call as an :class:`Op` record (the GPU and CPU functions,
their arguments, the byte and flop estimates, the routes' options) and hands it, or the planner
that validates the call and makes it, to :func:`dispatch`. The front door of :func:`dispatch`
looks the call's key up in the thread's memo (:mod:`.memo`): a repeat skips the planner, and,
while a GPU decision is kept, the decision too. Otherwise it decides (Dask, GPU, GPU out of
core, or CPU; the budget is asked once), runs, falls back on the GPU running out of memory or on
a sticky CUDA error, and records what happened (:mod:`.records`). No CPU run starts whose
host-byte estimate is over the memory the machine can give (:mod:`.host_check`, on
:mod:`.budget_host`): it raises :class:`~gpulinalg._runtime.errors.OutOfMemoryError` instead.
"""

import functools
import logging
import sys
import time
from typing import Any, NamedTuple
from collections.abc import Callable

import numpy as _np

from . import arrays as _arrays
from . import budget as _budget
from . import device as _device
from . import measured as _measured
from . import memo as _memo
from .config import Backend, Fallback, get_config
from .errors import FallbackWarning, GPUUnavailableError, OutOfMemoryError
from .errors import warn as _warn
from . import host_check as _host
from .records import RunRecord, granted_bytes, headroom_bytes, last_run, note
from .records import mark_recorded as _mark_recorded
from .records import local as _local
from .streams import op_stream as _op_stream
from .validation import is_dask as _is_dask

__all__ = ["Op", "dispatch", "front_door", "RunRecord", "last_run", "is_sticky",
           "granted_bytes", "headroom_bytes", "note", "shortcut"]

log = logging.getLogger("gpulinalg")

# Enum members as module globals: a class-attribute lookup of an Enum member costs several
# times a global lookup, and the hot path makes half a dozen.
_CPU, _GPU, _AUTO, _RAISE = Backend.CPU, Backend.GPU, Backend.AUTO, Fallback.RAISE
_CUPY, _NUMPY = _arrays.Kind.CUPY, _arrays.Kind.NUMPY

#: CUDA error codes after which the context is unusable (illegal address, launch failure, ...).
STICKY_CUDA_ERRORS = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719, 720})

# What a repeat reads on every call, bound once: the memo's lookup, the calling thread's device
# provider (a threading.local, never replaced), the GPU's state (a dict, updated in place), the
# clock and the logger's level check.
_lookup, _installed, _gpu_state = _memo.lookup, _device._installed, _device._state
_clock, _debug_on, _DEBUG = time.perf_counter, log.isEnabledFor, logging.DEBUG


class Op(NamedTuple):
    """One call for the dispatcher: everything :func:`dispatch` needs to decide and run it.

    Attributes
    ----------
    name : str
        Name recorded in :func:`last_run` and the log (``"decomp.qr"``).
    gpu_fn, cpu_fn : callable
        Same signature. With ``convert=True``, array arguments reach ``gpu_fn`` as CuPy arrays
        and ``cpu_fn`` as NumPy arrays, and arrays in the result go back to the caller's package.
        ``gpu_fn=None``: the call has no GPU engine (e.g. an option cuSOLVER lacks): it runs on
        the CPU, recorded with ``no_gpu_reason``; under ``backend="gpu"`` as a fallback, with a
        :class:`FallbackWarning`.
    args, kwargs : tuple, dict
        Arguments for the chosen function.
    nbytes : int or callable
        Estimated peak device bytes of the GPU run (inputs, outputs, workspaces). A callable
        (no arguments) is called only when the dispatcher considers the GPU, so estimates that
        ask a GPU library (workspace queries) are never made for a CPU run. A kept call's
        estimate holds no array.
    host_nbytes : int or callable, optional
        Estimated peak host bytes the CPU run allocates on host inputs (copies the engine
        makes, outputs, workspaces; not the inputs themselves, which exist already); the
        dispatcher adds the host copies of GPU arguments. A callable is called only for a CPU
        run. ``None``: ``nbytes`` when it is a number (the GPU run's inputs, outputs and
        workspaces: what the CPU run holds when its inputs come from the GPU), else
        :data:`.host_check.HOST_ARGS_FACTOR` times the bytes of the array arguments. A CPU run
        whose estimate is over ``host_memory_share`` of the available host memory is not
        started (:class:`OutOfMemoryError`).
    flops : float, optional
        Work estimate; with host inputs under ``backend="auto"`` the cost model
        (:func:`gpulinalg._runtime.budget.model_seconds`) and, where its two sides are close,
        the times measured on this machine (:mod:`gpulinalg._runtime.measured`) decide where
        the call runs. ``None``: always offload.
    oversize_fn : callable, optional
        GPU route for jobs larger than the budget (out-of-core); used instead of the CPU then.
    convert : bool
        Move array arguments to the chosen side and results back (``False``: as given).
    like : array, optional
        Array whose package and device results take (default: the first array argument).
    same_package : bool
        The planner checked that every array argument is of one package: CuPy arguments on the
        GPU route then skip the conversion walks (there is nothing to move).
    own_stream : bool
        Run ``gpu_fn`` on the thread's own stream, ordered against the caller's current stream
        by events (:class:`~gpulinalg._runtime.streams.op_stream`), as libraries whose handle is
        bound to a stream need. ``False``: on the caller's current stream itself, for functions
        that name their stream in every call (cuBLASLt), saving the two event hand-offs.
    dask_fn : callable, optional
        The Dask route: when an argument is a ``dask.array.Array``, it is called instead (same
        signature) and returns lazy Dask arrays built on the user's cluster; without one, Dask
        input raises ``TypeError`` (it is never computed behind the caller's back).
    no_gpu_reason : str
        What the record says when ``gpu_fn`` is ``None``.
    lighter : Op, optional
        The same call in a variant that needs less memory (``precision="mixed"``), with its
        own functions, arguments and estimates: the dispatcher's next choice where this Op
        does not fit, its GPU estimate over the bytes available there (before the
        out-of-core route or the CPU) or its CPU run's host estimate over the host budget
        (see :func:`.host_check.choose`). It may have a ``lighter`` of its own. An Op with one is
        never kept in the memo.
    details : dict, optional
        What this variant is, for the record (``{"precision": "float64"}``): added to the
        run's :func:`last_run` details and named in the reasons of a choice between variants.

    Examples
    --------
    >>> import numpy as np
    >>> op = Op("demo.twice", None, lambda x: 2 * x, (np.ones(2),))
    >>> dispatch(op)
    array([2., 2.])
    >>> op._replace(name="demo.again").name
    'demo.again'
    """

    name: str
    gpu_fn: Callable | None
    cpu_fn: Callable
    args: tuple = ()
    kwargs: dict | None = None
    nbytes: Any = 0
    flops: float | None = None
    oversize_fn: Callable | None = None
    convert: bool = True
    like: Any = None
    same_package: bool = False
    own_stream: bool = True
    dask_fn: Callable | None = None
    no_gpu_reason: str = "no GPU engine for this call"
    host_nbytes: Any = None
    lighter: Any = None
    details: dict | None = None


class _Route:
    """What the decision chose for an :class:`Op`: ``where`` (``"gpu"``, ``"gpu-out-of-core"``
    or ``"cpu"``), why, whether that is a fallback, the device, for a GPU route the estimate
    and the bytes found available, and ``op``: the Op's lighter variant that the GPU route
    runs (``None``: the Op itself)."""

    __slots__ = ("where", "reason", "fell_back", "dev", "nbytes", "avail", "op", "probe")

    def __init__(self, where, reason, fell_back=False, dev="cpu", nbytes=0, avail=0, op=None,
                 probe=None):
        self.where, self.reason, self.fell_back, self.dev = where, reason, fell_back, dev
        self.nbytes, self.avail, self.op = nbytes, avail, op
        self.probe = probe  # auto's measurement of this run (a .measured signature), or None


def dispatch(op, *plan_args, key=None, lead=()):
    """Run one call on the GPU, the CPU or Dask and return its result in the caller's package.

    Parameters
    ----------
    op : Op or callable
        The call, or its planner: ``op(*plan_args)`` validates the call and returns its
        :class:`Op`, or a finished result (an empty input answered by :func:`shortcut`).
    *plan_args
        The planner's arguments.
    key : hashable, optional
        The call's memo key (see :mod:`gpulinalg._runtime.memo`): everything the planner's
        result depends on, never an array. ``None``: no memo.
    lead : tuple
        With ``key``: the call's own leading arguments, as given. The planner's ``Op.args``
        begin with them; a repeat runs with ``lead + `` the kept rest of the arguments.

    Notes
    -----
    A repeat of a key under the same settings object skips the planner. When the kept entry
    holds a GPU decision (see :mod:`gpulinalg._runtime.memo`), no device provider is installed
    and the GPU is not disabled, it also skips the decision: the GPU function runs at once (on
    the thread's own stream, or the caller's with ``own_stream=False``) and is recorded as a GPU
    run "decided at the first call". Any exception of such a run drops the decision; running
    out of memory and sticky errors fall back as in a first call, anything else goes through
    the full road (which decides afresh, falls back or raises, and records).
    """
    settings = get_config()
    if key is not None:
        kept = _lookup(key)
        if kept is not None and kept.settings is settings:
            args = lead + kept.tail
            if kept.dev is not None and _installed.provider is None \
                    and _gpu_state["disabled"] is None:  # the repeat road, inline (hot)
                local = _local
                start = _clock()
                details: dict = {}  # what the engine notes (note()) goes in the record
                local.details = details
                try:
                    if kept.own_stream:
                        with _op_stream():
                            result = kept.gpu_fn(*args)
                    else:
                        result = kept.gpu_fn(*args)
                except Exception as exc:
                    local.details = None
                    return _repeat_failed(kept, args, settings, exc, start)
                local.details = None
                seconds = _clock() - start
                local.record = (kept.name, "gpu", kept.dev, False, kept.reason, seconds, details)
                if _debug_on(_DEBUG):
                    log.debug("%s ran on gpu (%s) in %.3g s", kept.name, kept.reason, seconds)
                return result
            return _decide_and_run(kept.op, args, kept.op.kwargs, kept.like(args), settings,
                                   kept)
    if type(op) is not Op:
        op = op(*plan_args)
        if type(op) is not Op:  # answered without running anything (shortcut)
            return op
    kept = None if key is None else _keep(key, op, len(lead), settings)
    return _decide_and_run(op, op.args, op.kwargs, op.like, settings, kept)


def _keep(key, op, n_lead, settings):
    """The memo's new entry for ``key`` (``None`` when ``op`` cannot be kept: keyword
    arguments, or results that follow an array that is not an argument)."""
    like_at = None
    if op.like is not None:
        like_at = next((i for i, x in enumerate(op.args) if x is op.like), None)
        if like_at is None:
            return None
    if op.kwargs or op.lighter is not None:
        return None
    kept = _memo.Kept(op._replace(args=(), like=None), op.args[n_lead:], like_at, settings)
    _memo.remember(key, kept)
    return kept


def _repeat_failed(kept, args, settings, exc, start):
    """A repeat's GPU run raised ``exc``: the kept decision is dropped; running out of memory
    and sticky errors fall back as in a first call (recorded), anything else goes through the
    full road (which decides afresh, falls back or raises, and records)."""
    op = kept.op
    dev, reason = kept.dev, kept.reason
    kept.dev = kept.reason = None
    if _out_of_memory(exc) is not None or is_sticky(exc):  # not run on the GPU again
        _local.record = (op.name, "gpu", dev, False, reason, _clock() - start,
                         {"raised": f"{type(exc).__name__}: {exc}"})
        why = _after_gpu_failure(op.name, exc, settings)
        like = kept.like(args)
        kind = _arrays.kind_of(like) if like is not None else None
        return _fall_back(op, args, {}, kind, like, why)
    return _decide_and_run(op, args, None, kept.like(args), settings, kept)


def shortcut(op, result, reason="empty input: nothing to compute"):
    """Return ``result`` of a call answered without running anything (empty input, ``k = 0``),
    recorded like any other call: :func:`last_run` says so (backend ``"none"``), and
    ``backend="gpu"`` without a usable GPU still raises :class:`GPUUnavailableError`, as the
    same call with data would. A planner returns what this returns.

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


def _decide_and_run(op, args, kwargs, like, settings, kept):
    """The full road of one call: decide, run, fall back, record; keep a GPU decision in
    ``kept`` (a memo entry, or ``None``) when it may serve the repeats."""
    kwargs = kwargs or {}
    if "dask" in sys.modules and _is_dask(*args, *kwargs.values()):  # one lookup without Dask
        return _run_dask(op.name, op.dask_fn, args, kwargs)
    kind, like_arr = (_arrays.kind_of(like), like) if like is not None else \
        _arrays.caller_kind(*args, *kwargs.values())
    name, convert = op.name, op.convert
    if op.gpu_fn is None:
        return _without_gpu_engine(op, args, kwargs, kind, like_arr, settings)
    try:
        route = _decide(op, settings, args, kwargs, kind if op.same_package else None)
    except Exception as exc:  # a sticky error from an earlier call surfaces in the memory query
        if not is_sticky(exc):
            raise
        route = _Route("cpu", _on_sticky(name, exc, settings), fell_back=True)
    if route.where == "cpu":
        return _measure(route.probe, name, "cpu", lambda: _run_on_cpu(
            op, args, kwargs, kind, like_arr, route.reason, route.fell_back, settings))
    fn = op.oversize_fn if route.where == "gpu-out-of-core" else op.gpu_fn
    gpu_convert = convert and not (op.same_package and kind is _CUPY)
    run, run_args, run_kwargs = op, args, kwargs
    if route.op is not None:  # a lighter variant fits where the Op does not
        run, run_args, run_kwargs = route.op, route.op.args, route.op.kwargs or {}
        fn = run.gpu_fn
    try:
        # a probe times host inputs only: the results' download synchronizes
        result = _measure(route.probe, name, "gpu", lambda: _run(
            name, route.where, fn, run_args, run_kwargs, kind, like_arr, gpu_convert,
            route.reason, False, op.own_stream, route.dev, extra=run.details))
    except Exception as exc:
        why = _after_gpu_failure(name, exc, settings)
    else:
        if kept is not None:
            _hold(kept, route, gpu_convert)
        return result
    return _fall_back(op, args, kwargs, kind, like_arr, why)


def _measure(key, name, side, run):
    """``run()``, its seconds kept by :mod:`.measured` for ``key`` (``None``: not measured)
    when ``side`` was warm."""
    if key is None:
        return run()
    warm = _measured.is_warm(name, side)
    start = _clock()
    result = run()
    if warm:
        _measured.record(key, side, _clock() - start)
    return result


def _hold(kept, route, moved):
    """Keep the GPU decision of ``route`` for the repeats of ``kept`` when it may be skipped:
    a GPU run on the arrays as given (nothing ``moved``) of a job small against the memory
    then available (``budget.FREE_CACHE_FRACTION``), with no device provider installed."""
    if (route.where == "gpu" and not moved and _installed.provider is None
            and route.nbytes <= _budget.FREE_CACHE_FRACTION * route.avail):
        kept.dev, kept.reason = route.dev, route.reason + " (decided at the first call)"
    else:
        kept.dev = kept.reason = None


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
    as a fallback); under ``fallback="raise"`` the ``MemoryError`` propagates, recorded. With
    host inputs only and no CuPy allocator error, it is the host that ran out: recorded as
    that (backend ``"none"``), raised. A ``MemoryError`` the dispatcher already handled passes
    through untouched. A call refused
    before anything ran (invalid input) is recorded too, with backend ``"none"``: the previous
    call's record never stands for it.

    Examples
    --------
    >>> @front_door("demo.double")
    ... def double(x):
    ...     return 2 * x
    >>> double(3)
    6
    """
    def wrap(fn):
        def failed(args, kwargs, exc, before):
            if isinstance(exc, MemoryError):
                if getattr(exc, "_gpulinalg_recorded", False):
                    raise exc
                return _front_door_fallback(op, fn, args, kwargs, exc)
            if _local.record is before:  # refused before anything ran: recorded all the same
                _local.record = (op, "none", "cpu", False,
                                 f"raised before running: {type(exc).__name__}: {exc}", 0.0,
                                 {"raised": f"{type(exc).__name__}: {exc}"})
            raise exc

        @functools.wraps(fn)
        def call(*args, **kwargs):
            before = _local.record
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                return failed(args, kwargs, exc, before)
        # (the function, the handler of its exceptions): a wrapper above this one may run the
        # door in its own frame (gradients.differentiable: one frame less per call)
        call.front_door = (fn, failed)  # type: ignore[attr-defined]
        return call
    return wrap


def _front_door_fallback(op, fn, args, kwargs, exc):
    from .config import config_context
    settings = get_config()
    _free_pools_quietly()
    values = (*args, *kwargs.values())
    on_gpu = _arrays.any_on_gpu(values) or any(map(_arrays.is_gpu_sparse, values))
    if not on_gpu and type(exc).__module__.partition(".")[0] not in ("cupy", "cupy_backends"):
        # host inputs and no CuPy allocator error: the host ran out, no GPU took part
        _local.record = (op, "none", "cpu", False,
                         f"host out of memory before the dispatch ({type(exc).__name__}: {exc})",
                         0.0, {"raised": f"{type(exc).__name__}: {exc}"})
        raise exc
    why = f"GPU out of memory before the dispatch ({type(exc).__name__}: {exc})"
    if settings.fallback is _RAISE or not on_gpu:
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


def _fall_back(op, args, kwargs, kind, like_arr, why):
    return _run_on_cpu(op, args, kwargs, kind, like_arr, why, True, get_config())


def _without_gpu_engine(op, args, kwargs, kind, like_arr, settings):
    """A call the GPU cannot serve runs on the CPU, visibly: the reason is recorded, and a
    caller who insisted on the GPU gets a fallback warning (results still go back to the
    caller's package and device)."""
    return _run_on_cpu(op, args, kwargs, kind, like_arr, op.no_gpu_reason,
                       settings.backend is _GPU, settings)


def _run_on_cpu(op, args, kwargs, kind, like_arr, reason, fell_back, settings):
    """Run ``op`` (or the lighter variant :func:`.host_check.choose` takes) on the CPU, after the
    host check; a fallback warns once the check lets it start."""
    op, args, kwargs, host, reason = _host.choose(op, args, kwargs, kind, reason, fell_back,
                                                  settings)
    if fell_back:
        _warn(f"gpulinalg: {op.name} ran on the CPU: {reason}", FallbackWarning)
    return _run(op.name, "cpu", op.cpu_fn, args, kwargs, kind, like_arr, op.convert, reason,
                fell_back, host=host, extra=op.details)


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


def _decide(op, settings, args, kwargs, kind=None):
    """The :class:`_Route` of ``op`` before anything runs (``kind``: the one package of every
    array argument, when the planner checked that)."""
    name = op.name
    if settings.backend is _CPU:
        return _Route("cpu", "backend='cpu'")
    if not _device.gpu_available():
        why = _device.unavailable_reason()
        if settings.backend is _GPU:
            raise GPUUnavailableError(f"{name}: backend='gpu' but no usable GPU: {why}")
        return _Route("cpu", f"no GPU: {why}")
    nbytes = op.nbytes
    if callable(nbytes):
        nbytes = int(nbytes())
    if kind is _CUPY or kind is _NUMPY:
        on_host = kind is _NUMPY
    else:
        on_host = not (_arrays.any_on_gpu(args)
                       or (kwargs and _arrays.any_on_gpu(kwargs.values())))
    probe, why = None, None
    if settings.backend is _AUTO and on_host and op.flops is not None:
        side, probe, why = _auto_side(op, nbytes, args, kwargs)
        if side == "cpu":
            return _Route("cpu", why or "host inputs; too small for the GPU to pay", probe=probe)
    route = _decide_gpu(op, settings, nbytes)
    if route.where != "cpu":
        route.probe = probe
        if why:
            route.reason = f"{why}; {route.reason}"
    return route


def _auto_side(op, nbytes, args, kwargs):
    """``(side, probe, reason)`` of ``backend="auto"`` on host inputs: the cost model's side,
    or the one :mod:`.measured` found faster for this call's signature; ``probe``: the
    signature when this run is to be timed."""
    host_bytes = _host.arrays_bytes(args, kwargs, host_only=True)
    cpu_s, gpu_s = _budget.model_seconds(op.flops, host_bytes)
    key = _measured.signature(op.name, nbytes, op.flops)
    side, measure, why = _measured.choose(key, cpu_s, gpu_s)
    return side, key if measure else None, why


def _decide_gpu(op, settings, nbytes):
    """The GPU route of ``op`` when its estimate ``nbytes`` fits (or a lighter variant's, or
    the out-of-core route); else the CPU fallback, or ``OutOfMemoryError`` under
    ``fallback="raise"``."""
    name = op.name
    dev = _device.current_device()
    ok, avail = _budget.fits(nbytes, dev)
    if ok:
        _local.headroom = avail - nbytes
        return _Route("gpu", f"estimate {nbytes} B fits in {avail} B", False, dev, nbytes, avail)
    if op.oversize_fn is not None:
        _local.granted = avail
        return _Route("gpu-out-of-core", f"estimate {nbytes} B > {avail} B available: streaming",
                      False, dev, nbytes, avail)
    why = f"{_host.variant(op)}estimate {nbytes} B > {avail} B available on the GPU"
    lighter = op.lighter
    while lighter is not None:  # the same call in less memory, before leaving the GPU
        nbytes = int(lighter.nbytes()) if callable(lighter.nbytes) else int(lighter.nbytes)
        ok, avail = _budget.fits(nbytes, dev)
        if ok:
            _local.headroom = avail - nbytes
            return _Route("gpu", f"{why}; {_host.variant(lighter)}estimate {nbytes} B fits in "
                          f"{avail} B", False, dev, nbytes, avail, lighter)
        why += f"; {_host.variant(lighter)}estimate {nbytes} B > {avail} B"
        lighter = lighter.lighter
    if settings.fallback is _RAISE:
        exc = OutOfMemoryError(f"{name}: {why} and fallback='raise'", nbytes, avail, avail, "gpu")
        _local.record = (name, "gpu", dev, False, why, 0.0, {"raised": f"MemoryError: {exc}"})
        raise _mark_recorded(exc)
    return _Route("cpu", why, fell_back=True)  # warned once the host check lets it start


def _fp_error(kind, flag):
    """NumPy's ``errstate`` callback of a CPU run: the kind of floating-point error, kept."""
    errors = _local.fp_errors
    if errors is None:
        errors = _local.fp_errors = set()
    errors.add(kind)


def _tell_fp_errors(op):
    """One ``RuntimeWarning`` at the caller's line for the floating-point errors of ``op``'s
    CPU run (NumPy's own would point inside the library or SciPy)."""
    errors, _local.fp_errors = _local.fp_errors, None
    _warn(f"{op}: {', '.join(sorted(errors))} encountered in floating-point arithmetic",
          RuntimeWarning)


def _run(op, route, fn, args, kwargs, kind, like_arr, convert, reason, fell_back,
         own_stream=True, dev="cpu", host=None, extra=None):
    _local.details = details = {} if extra is None else dict(extra)  # extra: Op.details
    if host is not None:  # the host check's (needed, allowed) bytes
        details["host_bytes"], details["host_allowed"] = host
    start = time.perf_counter()
    if route == "cpu":
        dev = "cpu"
    try:
        if route == "cpu":  # NumPy's overflow/invalid warnings: collected, told at the caller
            outer, _local.fp_errors = _local.fp_errors, None  # a run inside a run: its own
            try:
                with _np.errstate(call=_fp_error, over="call", divide="call", invalid="call"):
                    result = _call_moved(fn, args, kwargs, _arrays.to_host if convert else None)
                if _local.fp_errors:
                    _tell_fp_errors(op)
            finally:
                _local.fp_errors = outer
        else:
            prov = _installed.provider
            if prov is not None:  # a device provider installed by the caller (a test)
                prov.before_run(op)
                move, stream = prov.to_device if convert else None, prov.stream
            else:
                move, stream = _arrays.to_device if convert else None, _op_stream
            if own_stream:
                with stream():
                    result = _call_moved(fn, args, kwargs, move)
            else:  # the caller's stream: the per-call hot path of dense
                result = _call_moved(fn, args, kwargs, move)
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
    _measured.mark_warm(op, "cpu" if route == "cpu" else "gpu")
    _local.record = (op, route, dev, fell_back, reason, seconds, details)  # see last_run()
    level = logging.WARNING if fell_back else logging.DEBUG
    if log.isEnabledFor(level):
        log.log(level, "%s ran on %s (%s) in %.3g s", op, route, reason, seconds)
    return result


def _call_moved(fn, args, kwargs, move):
    """``fn(*args, **kwargs)`` with every array argument passed through ``move`` first."""
    if move is not None:
        args = _arrays.convert_tree(args, move)
        if kwargs:
            kwargs = _arrays.convert_tree(kwargs, move)
    return fn(*args, **kwargs)
