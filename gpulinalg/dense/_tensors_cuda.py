"""The GPU engine for CUDA torch tensors: cuBLASLt on torch's current stream, every result from
torch's caching allocator (torch in, torch out; no CuPy memory, no DLPack round trip per call).

Plans are :mod:`gpulinalg.dense._plans_cuda`'s, made once per key on zero-copy CuPy views of the
tensors (on torch's current stream); a call then allocates its result, epilog outputs and the
workspace of its algorithm (when it needs one) with ``torch.empty_strided`` and launches
``cublasLtMatmul`` on the raw pointers, on ``torch.cuda.current_stream()``: no host
synchronization, nothing outside the caching allocator, so a training step with these calls can
be captured in a CUDA graph.

The workspace is allocated per launch and freed after it (the allocator orders its reuse on the
stream), never kept between calls: under ``torch.cuda.graph`` and inductor's CUDA graphs
(``torch.compile(mode="reduce-overhead")``) every allocation of a call comes from the graph's
memory pool, which must hold only what the graph owns. A workspace kept by the plan would be a
pool block outside the graph's outputs (inductor refuses it), and a workspace made outside the
capture and freed later (plan evicted) would still be written by every replay.

What this engine does not launch itself (complex, ``K == 0``, a used ``c``, batched operands,
layouts cuBLASLt does not take as given, the activation part of a backward pass) runs the CuPy
engine (:mod:`gpulinalg.dense._matmul_cuda`) on zero-copy views, on the same torch stream, its
results handed back through DLPack. Same signatures as the other engines.
"""

from . import _matmul_cuda, _plans_cuda
from ._results import Gradients, MatmulAux

__all__ = ["matmul", "matmul_backward", "linear", "linear_backward"]

_torch: list = []  # [torch, raw-stream getter, torch.uint8] once resolved
_empty: list = []  # [torch.empty_strided] once resolved
_NONE = ()
_BYTE = (1,)  # the workspace's strides


def _mods():
    if not _torch:
        import torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is None:  # a torch without the raw getter: the public (slower) one
            def raw(dev):
                return torch.cuda.current_stream(dev).cuda_stream
        _torch.extend((torch, raw, torch.uint8))
        _empty.append(torch.empty_strided)
    return _torch


def _layout(shape, dtype, nbytes, strides, torch):
    item = dtype.itemsize
    return tuple(shape), tuple(s // item for s in strides), getattr(torch, dtype.name)


class _Launch:
    """One planned product on torch tensors: the plan and the torch layouts (shape, strides,
    dtype) of the result and of the epilog outputs, worked out once. Called with the operands'
    pointers in NumPy orientation (``a @ b``), the epilog inputs' pointers (a tuple, in the
    plan's order), ``alpha``, the device and torch's current raw stream of it; returns
    ``(result, [epilog outputs])``, all from torch's caching allocator."""

    __slots__ = ("plan", "out", "extra", "swap", "rows", "dev", "index")

    def __init__(self, plan, transposed, read_transposed=None, rows=False):
        torch = _mods()[0]
        self.plan, self.swap = plan, transposed
        self.dev = self.index = None  # a public call's device (torch.device, index): see matmul
        if read_transposed is None:
            read_transposed = transposed
        self.out = _layout(*(plan.out_t if read_transposed else plan.out), torch)
        self.extra = tuple(_layout(*o[1:5], torch) for o in plan.outputs)
        self.rows = None  # the fused layer's launch (rows=True), made on first use
        if rows and transposed:  # the epilog outputs of 2-D products read as (M, rows)
            self.extra = tuple((s[::-1], st[::-1], dt) if len(s) == 2 else (s, st, dt)
                               for s, st, dt in self.extra)

    def by_rows(self):
        """This launch with a transposed product's 2-D epilog outputs (the GELU aux) read
        transposed: ``(M, N)`` row-major, the layout of the layer's output (made once)."""
        run = self.rows
        if run is None:
            run = self.rows = _Launch(self.plan, self.swap, rows=True)
        return run

    def launch(self, a_ptr, b_ptr, in_ptrs, alpha, dev, stream):
        """The launch (also ``self(...)``; the hot paths call this method: a bound method call
        costs a third of a call through the type's ``__call__`` slot)."""
        empty = _empty[0]
        plan = self.plan
        shape, strides, dtype = self.out
        out = empty(shape, strides, dtype=dtype, device=dev)
        bufs = _NONE
        if self.extra:
            bufs = [empty(s, st, dtype=dt, device=dev) for s, st, dt in self.extra]
            in_ptrs = (*in_ptrs, *[b.data_ptr() for b in bufs])
        ws_ptr = 0
        if plan.ws_size:  # per launch (see the module's notes on CUDA graphs)
            ws = empty((plan.ws_size,), _BYTE, dtype=_torch[2], device=dev)
            ws_ptr = ws.data_ptr()
        if self.swap:
            a_ptr, b_ptr = b_ptr, a_ptr
        plan.execute(a_ptr, b_ptr, 0, alpha, 0.0, in_ptrs, out.data_ptr(), ws_ptr, stream)
        return out, bufs

    __call__ = launch

    def live(self):
        """Count a plan-cache hit; ``False`` once the plan was evicted or the cache cleared."""
        return _plans_cuda.touch(self.plan)


class _OnTorchStream:
    """CuPy's device and current stream set to the tensor's device and torch's current stream
    (the cold paths: planning, and the CuPy engine for what this one does not launch)."""

    def __init__(self, dev):
        import cupy
        raw = _mods()[1]
        self.device = cupy.cuda.Device(dev)
        self.stream = cupy.cuda.ExternalStream(raw(dev), dev)

    def __enter__(self):
        self.device.__enter__()
        self.stream.__enter__()
        return self

    def __exit__(self, *exc):
        self.stream.__exit__(*exc)
        self.device.__exit__(*exc)
        return False


def _view(x):
    if x is None:
        return None
    import cupy
    return cupy.from_dlpack(x.detach())


def _to_torch(result):
    from .._runtime import arrays
    torch = _mods()[0]
    return arrays.convert_tree(result, torch.from_dlpack)


def _finish(out, bufs, spec):
    if not spec.return_aux:
        return out
    if spec.activation is None:
        return out, None
    rows, cols = spec.out_shape[-2:]
    if spec.transposed:
        rows, cols = cols, rows
    # MatmulAux(...) without the NamedTuple's Python __new__ frame (the same tuple)
    return out, _new_tuple(MatmulAux, (spec.activation, bufs[0], spec.transposed, rows, cols))


_new_tuple = tuple.__new__


def matmul(a, b, bias, c, spec):
    """``act(alpha * a @ b + beta * c + bias)`` on CUDA torch tensors, on torch's stream.

    ``spec.plan`` is the :class:`_Launch` an earlier call of the same call key left there (the
    operands as given went to cuBLASLt): a repeat goes straight to it.
    """
    run = spec.plan
    if run is not None and _touch(run.plan):
        dev = run.dev  # set below when this function made the launch
        out, bufs = run.launch(a.data_ptr(), b.data_ptr(), _NONE if bias is None else
                               (bias.data_ptr(),), spec.alpha, dev, _torch[1](run.index))
        return _finish(out, bufs, spec) if spec.return_aux else out
    used_c = c is not None and spec.beta != 0.0
    plan = None if used_c else _plan_direct(a, b, bias, spec)
    if plan is None:  # the CuPy engine, on views (a fresh spec: it keeps no plan in ours)
        with _OnTorchStream(a.get_device()):
            return _to_torch(_matmul_cuda.matmul(_view(a), _view(b), _view(bias), _view(c),
                                                 spec.replace()))
    run = spec.plan = _Launch(plan, spec.transposed)
    # the call key holds every operand's device: the repeats of this spec run on this one
    dev = run.dev = a.device
    run.index = dev.index
    out, bufs = run(a.data_ptr(), b.data_ptr(), _NONE if bias is None else (bias.data_ptr(),),
                    spec.alpha, dev, _torch[1](dev.index))
    return _finish(out, bufs, spec)


def _plan_direct(a, b, bias, spec):
    """The plan of a product cuBLASLt takes on the tensors as given, or ``None``."""
    with _OnTorchStream(a.get_device()):
        ca, cb, cbias = _view(a), _view(b), _view(bias)
        if ca.shape[-1] == 0 or ca.dtype.kind == "c" or ca.ndim > 2 or cb.ndim > 2:
            return None
        if _matmul_cuda._gemm_ready(ca, ()) is not ca or \
                _matmul_cuda._gemm_ready(cb, ()) is not cb:
            return None
        inputs = None
        if cbias is not None:
            vec = cbias.reshape(-1) if cbias.ndim != 1 else cbias
            if _matmul_cuda._vector(vec) is not vec or vec.data.ptr != cbias.data.ptr:
                return None
            inputs = {"bias": vec}
        epilog = _matmul_cuda._EPILOGS[spec.activation, cbias is not None, spec.return_aux]
        return _plans_cuda.lookup(ca, cb, None, spec.transposed, spec.alpha, 0.0, epilog,
                                  inputs, spec.compute_type, spec.autotune)


def _plan_gemm(x, y, transpose, epilog, spec):
    """The plan of ``x @ y`` (``epilog``) on tensors as given, or ``None`` when cuBLASLt would
    need copies."""
    with _OnTorchStream(x.get_device()):
        cx, cy = _view(x), _view(y)
        if _matmul_cuda._gemm_ready(cx, ()) is not cx or \
                _matmul_cuda._gemm_ready(cy, ()) is not cy:
            return None
        return _plans_cuda.lookup(cx, cy, None, transpose, 1.0, 0.0, epilog, None,
                                  spec.compute_type, spec.autotune)


class _Backward:
    """The two launches of a direct backward pass (``grad_a = dz @ b.T``, ``grad_b = a.T @ dz``
    with the bias gradient from BGRADB) for one call key; ``gbt`` is the second launch writing
    ``grad_b.T`` (the fused linear layer's weight gradient, in the weight's layout)."""

    __slots__ = ("ga", "gb", "gbt", "bias", "plans")

    def __init__(self, ga, gb, bias):
        self.ga, self.gb, self.bias = ga, gb, bias
        self.gbt = _Launch(gb.plan, False, True)
        self.plans = (ga.plan, gb.plan)

    def live(self):
        """Count the hits of both plans; ``False`` once either was evicted."""
        return _plans_cuda.touch_all(self.plans)

    def __call__(self, dz, a, b):
        dev, dz_ptr = a.device, dz.data_ptr()
        stream = _torch[1](dev.index)
        ga = self.ga.launch(dz_ptr, b.data_ptr(), _NONE, 1.0, dev, stream)[0]
        gb, bufs = self.gb.launch(a.data_ptr(), dz_ptr, _NONE, 1.0, dev, stream)
        return Gradients(ga, gb, _bias_grad(bufs) if self.bias else None)

    def linear(self, dz, x, weight, need_x=True, need_w=True):
        """``(grad_x, grad_weight, grad_bias)`` of ``x @ weight.T (+ bias)`` (``b = weight.T``);
        a product not asked for is not launched (its gradients are ``None``)."""
        dev, dz_ptr = x.device, dz.data_ptr()
        stream = _torch[1](dev.index)
        gx = (self.ga.launch(dz_ptr, weight.data_ptr(), _NONE, 1.0, dev, stream)[0] if need_x
              else None)
        if not need_w:
            return gx, None, None
        gw, bufs = self.gbt.launch(x.data_ptr(), dz_ptr, _NONE, 1.0, dev, stream)
        if not self.bias:
            return gx, gw, None
        gb = bufs[0]
        return gx, gw, gb if gb.ndim == 1 else _bias_grad(bufs)


_touch, _touch_all = _plans_cuda.touch, _plans_cuda.touch_all


def _bias_grad(bufs):
    v = bufs[0]
    if v.ndim != 1:  # (1, N) or batched: nvmath's BGRADB layout
        v = v.reshape(-1, v.shape[-2] if v.ndim > 1 else v.shape[0])
        v = v.sum(0) if v.shape[0] > 1 else v[0]
    return v


def matmul_backward(grad_out, upstream, a, b, aux, spec):
    """The gradients of :func:`matmul` on CUDA torch tensors.

    Without an activation and with a ``(N,)`` bias or none, two launches on torch memory:
    ``grad_a = dz @ b.T`` and ``grad_b = a.T @ dz`` (the bias gradient from its BGRADB epilog,
    the same products as the CuPy engine's); a repeat of a call key goes straight to them
    (``spec.plan``). Everything else runs the CuPy engine on views.
    """
    run = spec.plan
    if run is not None and run.live():
        return run(grad_out, a, b)
    if upstream is None and spec.activation is None and spec.bias_form != "m1" \
            and a.ndim == 2 and b.ndim == 2 and a.shape[-1] > 0 and not a.is_complex() \
            and grad_out.is_contiguous():
        run = _direct_backward(grad_out, a, b, spec)
        if run is not None:
            spec.plan = run
            return run(grad_out, a, b)
    with _OnTorchStream(a.get_device()):
        views = (_view(grad_out), None if upstream is None else (_view(upstream[0]),
                                                                 _view(upstream[1])),
                 _view(a), _view(b))
        if aux is not None:
            aux = aux._replace(data=_view(aux.data))
        return _to_torch(_matmul_cuda.matmul_backward(*views, aux, spec))


def _direct_backward(dz, a, b, spec):
    """The :class:`_Backward` of these operands, or ``None`` when cuBLASLt would need copies."""
    ga = _plan_gemm(dz, b.t(), True, None, spec)
    if ga is None:
        return None
    bias = spec.bias_form == "n"
    gb = _plan_gemm(a.t(), dz, False, "BGRADB" if bias else None, spec)
    if gb is None:
        return None
    return _Backward(_Launch(ga, True), _Launch(gb, False), bias)


def linear(x, weight, bias, spec):
    """``(act(x @ weight.T + bias), saved or None)`` for the fused linear layer (``spec`` is that
    of ``matmul(x, weight.T, ...)``): ``saved`` is the GELU pre-activation ``(M, N)`` when the
    spec returns the aux. A repeat launches at once, its aux allocated as ``(M, N)``."""
    run = spec.plan
    if run is not None and _touch(run.plan):
        dev = x.device
        out, bufs = (run.rows or run.by_rows()).launch(
            x.data_ptr(), weight.data_ptr(), _NONE if bias is None else (bias.data_ptr(),), 1.0,
            dev, _torch[1](dev.index))
        if not bufs:
            return out, None
        z = bufs[0]
        if run.swap:  # (M, N') with N' >= N
            n = weight.shape[0]
            return out, (z if z.shape[1] == n else z[:, :n])
        return out, saved_view(z, False, x.shape[0], weight.shape[0])
    res = matmul(x, weight.t(), bias, None, spec)
    if not spec.return_aux:
        return res, None
    return res[0], (None if res[1] is None else
                    saved_view(res[1].data, spec.transposed, x.shape[0], weight.shape[0]))


def saved_view(buf, transposed, m, n):
    """The ``(m, n)`` pre-activation in a GELU aux buffer as cuBLASLt lays it out (a view:
    cuBLASLt pads its rows)."""
    if transposed:
        return (buf if buf.shape[-2] == n else buf[..., :n, :]).transpose(-1, -2)
    return buf if buf.shape[-2] == m else buf[..., :m, :]


def linear_backward(dz, x, weight, spec, need_x=True, need_w=True):
    """``(grad_x, grad_weight, grad_bias or None)`` of the fused linear layer's product (``spec``
    is that of ``matmul_backward(dz, x, weight.T, ...)``); a repeat launches only the products
    asked for (``need_x``: ``grad_x``; ``need_w``: ``grad_weight`` and ``grad_bias``)."""
    run = spec.plan
    if run is not None and _touch_all(run.plans):
        return run.linear(dz, x, weight, need_x, need_w)
    ga, gbt, gb = matmul_backward(dz, None, x, weight.t(), None, spec)
    return ga, gbt.t(), gb
