"""The per-thread, bounded LRU cache of planned nvmath ``Matmul`` objects.

A plan is valid for one combination of shapes, strides, dtypes, pointer alignments, epilog,
compute type, autotuning and device; that tuple is the cache key. On a hit only the operand
pointers, ``alpha`` and ``beta`` change: the plan executes with one ``cublasLtMatmul`` call on the
caller's current stream, with the descriptors and algorithm found when it was planned and a
workspace of the planned size kept per stream. What a launch needs is read off nvmath's planned
``Matmul`` by the adapter :mod:`gpulinalg.dense._nvmath_cuda` (its internals, version-checked).

Each thread owns its cache, stream and cuBLASLt handle, so plans are never shared between
threads. :func:`clear_plan_cache` frees the caller's plans at once and makes every other thread
drop its plans at its next lookup.
"""

import collections
import threading

from .._runtime.config import get_config
from .._runtime.streams import op_stream
from . import _calls, _nvmath_cuda
from ._results import PlanCacheInfo
from ._spec import COMPUTE_TYPES, WORKSPACE_LIMIT

__all__ = ["gemm", "clear_plan_cache", "plan_cache_info"]

#: Products of fewer flops than this plan with at most SMALL_WORKSPACE_LIMIT bytes: there the
#: host's time per call dominates, and the split-K algorithms a large workspace admits launch a
#: second (reduction) kernel, which costs more host time than it saves on the GPU (512^3 fp32 on
#: the H200: 40 us per call with the split-K algorithm against 32 with a single-kernel one).
SMALL_PRODUCT_FLOPS = 2 ** 31
SMALL_WORKSPACE_LIMIT = 1 << 20
AUTOTUNE_ITERATIONS = 5
#: Workspaces one plan keeps, one per stream it ran on (more streams: the oldest are freed).
MAX_STREAM_WORKSPACES = 4
AUTOTUNE_CANDIDATES = 16  # heuristic candidates timed when autotuning (nvmath's default: 8)
#: (dtype, epilog) whose heuristic first choice measured slow on the H200 (bf16 bias+GELU 4096^3:
#: 415 TFLOP/s against torch's 610-679): tuned once per plan key when the caller did not choose.
AUTO_TUNED = frozenset((dt, ep) for dt in ("bfloat16",)
                       for ep in ("GELU", "GELU_BIAS", "GELU_AUX", "GELU_AUX_BIAS"))
AUTO_TUNE_FLOPS = 2 ** 36  # about 4096^3: below it the tuning costs more than it can win

_generation = [0]
_ALL = "pointers"  # Plan.bound's entry of the last pointer tuple bound (attributes are ints)
_lock = threading.Lock()


class _Cache(threading.local):
    def __init__(self):
        self.plans = collections.OrderedDict()
        self.generation = _generation[0]
        self.hits = self.misses = self.evictions = 0


_cache = _Cache()


class Plan:
    """A planned ``Matmul`` and what one execution needs besides the operands.

    ``parts``: :func:`gpulinalg.dense._nvmath_cuda.planned_parts` of ``mm`` (read from it when
    not given). The epilog operands' device pointers (``pointers``: the descriptor attribute of
    each input, then of each output) are written to the matmul descriptor only when they differ
    from the pointer it holds (``bound``: attribute -> pointer, and the last pointer tuple
    bound under ``_ALL``, so that a launch with the same pointers checks one tuple; descriptor
    attributes persist between launches, and only this plan writes them).
    """

    __slots__ = ("new_array", "alloc", "launch", "mm", "handle", "desc", "layouts", "alpha", "beta",
                 "scalar_ptrs", "algo_ptr", "out", "out_t", "outputs", "inputs", "bound", "ws_size",
                 "ws", "key", "scalars", "_keep", "pointers", "set_attribute",
                 "ptr_buf", "ptr_addr")

    def __init__(self, mm, epilog, parts=None):
        import ctypes

        import cupy
        self.new_array, self.alloc = cupy.ndarray, cupy.cuda.alloc
        self.mm = mm
        if parts is None:
            parts = _nvmath_cuda.planned_parts(mm, epilog)
        self.launch, self.handle, self.desc = parts["launch"], parts["handle"], parts["desc"]
        self.set_attribute = parts["set_attribute"]
        self.layouts, self.alpha, self.beta = parts["layouts"], parts["alpha"], parts["beta"]
        self.scalar_ptrs = parts["scalar_ptrs"]
        self.scalars = (None, None)  # the (alpha, beta) last written to the host scalars
        self._keep, self.algo_ptr = parts["algo"], parts["algo_ptr"]
        self.out = parts["out"]
        shape, dtype, nbytes, strides = self.out  # the result read transposed: a @ b's layout
        self.out_t = ((*shape[:-2], shape[-1], shape[-2]), dtype, nbytes,
                      (*strides[:-2], strides[-1], strides[-2]))
        self.outputs, self.inputs = parts["outputs"], parts["inputs"]
        self.pointers = tuple(i[-1] for i in self.inputs) + tuple(o[-1] for o in self.outputs)
        self.bound = {}
        self.ptr_buf = ctypes.c_uint64(0)  # the host buffer a pointer attribute is set from
        self.ptr_addr = ctypes.addressof(self.ptr_buf)
        self.ws_size = parts["ws_size"]
        self.ws = {}  # stream pointer -> workspace: calls on two streams never share one
        self.key = None  # the cache key while the plan is cached; None once freed

    def bind(self, ptrs):
        """Point the descriptor at the epilog operands ``ptrs`` (in the order of
        :attr:`pointers`), writing only the attributes whose pointer changed."""
        bound, buf = self.bound, self.ptr_buf
        for attr, ptr in zip(self.pointers, ptrs):
            if bound.get(attr) != ptr:
                buf.value = ptr
                self.set_attribute(self.desc, attr, self.ptr_addr, 8)
                bound[attr] = ptr
        bound[_ALL] = ptrs  # all of them at once: what execute() compares a call's tuple with

    def execute(self, a_ptr, b_ptr, c_ptr, alpha, beta, ptrs, out_ptr, ws_ptr, stream):
        """One launch on raw pointers (the caller allocated the result, the epilog outputs and
        the workspace; ``ptrs``: the epilog inputs' then outputs' pointers, see :meth:`bind`)."""
        if alpha != self.scalars[0] or beta != self.scalars[1]:
            self.alpha[0] = alpha
            self.beta[0] = beta
            self.scalars = (alpha, beta)
        if ptrs and ptrs != self.bound.get(_ALL):  # the same pointers as the last call's: none
            self.bind(ptrs)
        la, lb, lc, ld = self.layouts
        self.launch(self.handle, self.desc, self.scalar_ptrs[0], a_ptr, la, b_ptr, lb,
                    self.scalar_ptrs[1], c_ptr, lc, out_ptr, ld, self.algo_ptr, ws_ptr,
                    self.ws_size, stream)

    def run(self, a, b, c, alpha, beta, inputs, stream, transposed=False):
        """Execute on ``stream`` (a pointer); returns ``(result, {aux output name: array})``.

        ``a``, ``b``, ``c`` supply the planned operands' pointers; with ``transposed=True`` ``c``
        is the transpose of the planned C and the result is returned transposed (as a view-free
        array of the transposed layout).
        """
        if alpha != self.scalars[0] or beta != self.scalars[1]:  # written only on change
            self.alpha[0] = alpha
            self.beta[0] = beta
            self.scalars = (alpha, beta)
        new, alloc = self.new_array, self.alloc
        shape, dtype, nbytes, strides = self.out_t if transposed else self.out
        out = new(shape, dtype, alloc(nbytes), strides)
        extra = {}
        ptrs = [inputs[name].data.ptr for name, _ in self.inputs]
        for name, shape_, dtype_, nbytes_, strides_, _ in self.outputs:
            extra[name] = buf = new(shape_, dtype_, alloc(nbytes_), strides_)
            ptrs.append(buf.data.ptr)
        if ptrs:
            self.bind(ptrs)
        ws_ptr = 0
        if self.ws_size:
            ws = self.ws.get(stream)
            if ws is None:
                if len(self.ws) >= MAX_STREAM_WORKSPACES:
                    self.ws.clear()  # pool blocks go back to their own stream's arena
                ws = self.ws[stream] = new((self.ws_size,), "uint8", alloc(self.ws_size))
            ws_ptr = ws.data.ptr
        la, lb, lc, ld = self.layouts
        self.launch(self.handle, self.desc, self.scalar_ptrs[0], a.data.ptr, la, b.data.ptr, lb,
                    self.scalar_ptrs[1], 0 if c is None else c.data.ptr, lc, out.data.ptr, ld,
                    self.algo_ptr, ws_ptr, self.ws_size, stream)
        return out, extra

    def free(self):
        self.key = None
        self.ws = {}
        if self.mm is not None:
            self.mm.free()


def _current_stream():
    """CuPy's current stream, the caller's (the dispatcher runs dense on it); resolved once."""
    global _current_stream
    import cupy
    _current_stream = cupy.cuda.get_current_stream
    return _current_stream()


def _operand_key(x):
    return None if x is None else (x.shape, x.strides, x.data.ptr & 255)


def _t(x):
    return None if x is None else x.swapaxes(-1, -2)


def gemm(a, b, c=None, *, transpose=False, alpha=1.0, beta=0.0, epilog=None, inputs=None,
         compute_type=None, autotune=False):
    """``epilog(alpha * a @ b + beta * c)`` through a cached plan, on the current CuPy stream.

    ``a``, ``b``, ``c`` are CuPy arrays laid out as cuBLASLt accepts them; ``inputs`` maps epilog
    input names (``bias``, ``relu_aux``, ``gelu_aux``) to arrays. Returns ``(d, outputs)``.
    With ``transpose=True`` cuBLASLt computes the transposed product ``b.T @ a.T`` (so that its
    per-row bias runs along ``N``) and ``d`` comes back as ``a @ b`` (no views are made on a
    hit); epilog inputs and outputs (aux, bias gradients) are those of the transposed product.
    """
    return run_cached(a, b, c, transpose, alpha, beta, epilog, inputs, compute_type, autotune)


def run_cached(a, b, c, transpose, alpha, beta, epilog, inputs, compute_type, autotune):
    """:func:`gemm` with positional arguments."""
    plan = lookup(a, b, c, transpose, alpha, beta, epilog, inputs, compute_type, autotune)
    return run(plan, a, b, c, transpose, alpha, beta, inputs)


def lookup(a, b, c, transpose, alpha, beta, epilog, inputs, compute_type, autotune):
    """The calling thread's plan for these operands and options (planned on a miss)."""
    if autotune == "auto":
        autotune = resolve_autotune(autotune, a.dtype.name, epilog, _flops(a, b))
    ad, bd = a.data, b.data
    key = (transpose, ad.device_id, a.dtype, epilog, compute_type, autotune, a.shape,
           a.strides, b.shape, b.strides, ad.ptr & 255, bd.ptr & 255,
           None if c is None else _operand_key(c),
           None if not inputs else tuple([(k, _operand_key(v)) for k, v in inputs.items()]))
    cache = _cache
    if cache.generation != _generation[0]:
        _drop_all(cache)
    plan = cache.plans.get(key)
    if plan is None:
        planned = (_t(b), _t(a), _t(c)) if transpose else (a, b, c)
        # Planned (and autotuned) on the thread's own stream, ordered after the caller's: nvmath
        # needs a stream it can own, which the caller's default stream is not in a new thread.
        with op_stream() as own:
            plan = _insert(cache, key, _build(*planned, alpha, beta, epilog, inputs,
                                              compute_type, autotune, own.ptr))
    else:
        cache.hits += 1
        cache.plans.move_to_end(key)
    return plan


def run(plan, a, b, c, transpose, alpha, beta, inputs):
    """Execute ``plan`` (from :func:`lookup` on operands laid out as these) on the current
    stream; returns ``(d, outputs)``."""
    stream = _current_stream().ptr
    if transpose:
        return plan.run(b, a, c, alpha, beta, inputs, stream, transposed=True)
    return plan.run(a, b, c, alpha, beta, inputs, stream)


def rerun(plan, a, b, c, transpose, alpha, beta, inputs):
    """:func:`run` for a plan the caller kept from an earlier :func:`lookup` on operands of the
    same key (shapes, strides, dtypes, alignment, device); counts as a cache hit.

    Returns ``None`` when the plan has since been evicted or the cache cleared: the caller then
    goes through :func:`lookup` again.
    """
    if not touch(plan):
        return None
    if transpose:
        return plan.run(b, a, c, alpha, beta, inputs, _current_stream().ptr, transposed=True)
    return plan.run(a, b, c, alpha, beta, inputs, _current_stream().ptr)


def touch(plan):
    """Count a hit of a plan kept by its caller; ``False`` when it was evicted or the cache
    cleared since (the caller then plans again)."""
    cache = _cache
    key = plan.key
    if key is None or cache.generation != _generation[0]:
        return False
    cache.hits += 1
    cache.plans.move_to_end(key)
    return True


def touch_all(plans):
    """:func:`touch` of every plan in ``plans``; ``False`` (none counted) when any was evicted
    or the cache cleared since."""
    cache = _cache
    if cache.generation != _generation[0]:
        return False
    for plan in plans:
        if plan.key is None:
            return False
    cache.hits += len(plans)
    move = cache.plans.move_to_end
    for plan in plans:
        move(plan.key)
    return True


def resolve_autotune(autotune, dtype_name, epilog, flops):
    """``autotune`` as a bool: ``"auto"`` (no choice made by the caller) tunes the epilogs where
    cuBLASLt's heuristic is known to pick a slow kernel (:data:`AUTO_TUNED`) on products of at
    least :data:`AUTO_TUNE_FLOPS`; ``autotune=False`` opts out."""
    if autotune != "auto":
        return bool(autotune)
    return flops >= AUTO_TUNE_FLOPS and (dtype_name, epilog) in AUTO_TUNED


def _insert(cache, key, plan):
    cache.misses += 1
    cache.plans[key] = plan
    plan.key = key
    limit = get_config().plan_cache_size
    while len(cache.plans) > limit:
        _, old = cache.plans.popitem(last=False)
        old.free()
        cache.evictions += 1
    return plan


def _build(a, b, c, alpha, beta, epilog, inputs, compute_type, autotune, stream):
    _nvmath_cuda.check_nvmath()  # first: an unknown nvmath fails loudly before anything runs
    from nvmath.bindings import cublas
    from nvmath.linalg.advanced import Matmul, MatmulEpilog

    from .._runtime.streams import get_handle
    options = {"handle": get_handle("cublasLt"), "memory_limit": _workspace_limit(a, b)}
    if compute_type is not None:
        options["compute_type"] = getattr(cublas.ComputeType, COMPUTE_TYPES[compute_type])
    mm = Matmul(a, b, c=c, alpha=alpha, beta=beta if c is not None else None, options=options,
                stream=stream)
    try:
        mm.plan(preferences={"limit": AUTOTUNE_CANDIDATES} if autotune else None,
                epilog=None if epilog is None else MatmulEpilog[epilog],
                epilog_inputs=dict(inputs) if inputs else None, stream=stream)
        if autotune:
            mm.autotune(iterations=AUTOTUNE_ITERATIONS, release_workspace=True, stream=stream)
        plan = Plan(mm, epilog)
    except BaseException:
        mm.free()
        raise
    mm.release_operands()  # the cache must not keep the first caller's arrays alive
    return plan


def _flops(a, b):
    import math

    import numpy as np
    batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


def _workspace_limit(a, b):
    """Workspace bytes a plan for ``a @ b`` may ask for (see SMALL_PRODUCT_FLOPS)."""
    return SMALL_WORKSPACE_LIMIT if _flops(a, b) < SMALL_PRODUCT_FLOPS else WORKSPACE_LIMIT


def _drop_all(cache):
    while cache.plans:
        _, plan = cache.plans.popitem()
        plan.free()
    cache.generation = _generation[0]


def clear_plan_cache() -> None:
    """Free the calling thread's cached matmul plans; other threads drop theirs on next use.

    Also forgets the calling thread's memo of validated calls (:mod:`gpulinalg.dense._calls`).

    See Also
    --------
    plan_cache_info

    Examples
    --------
    >>> from gpulinalg.dense import clear_plan_cache, plan_cache_info
    >>> clear_plan_cache()
    >>> plan_cache_info().size
    0
    """
    with _lock:
        _generation[0] += 1
    _drop_all(_cache)
    _calls.clear()


def plan_cache_info() -> PlanCacheInfo:
    """:class:`PlanCacheInfo` (hits, misses, evictions, size, maxsize) of the calling thread.

    See Also
    --------
    clear_plan_cache
    gpulinalg.set_config : ``plan_cache_size`` bounds each thread's cache.

    Examples
    --------
    >>> from gpulinalg.dense import plan_cache_info
    >>> info = plan_cache_info()
    >>> info.size <= info.maxsize
    True
    """
    c = _cache
    return PlanCacheInfo(c.hits, c.misses, c.evictions, len(c.plans), get_config().plan_cache_size)
