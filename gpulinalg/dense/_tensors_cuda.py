"""The GPU engine for CUDA torch tensors: cuBLASLt on torch's current stream, every result from
torch's caching allocator (torch in, torch out; no CuPy memory, no DLPack round trip per call).

Plans are :mod:`gpulinalg.dense._plans_cuda`'s, made once per key on zero-copy CuPy views of the
tensors (on torch's current stream); a call then allocates its result, epilog outputs and (once
per stream) the workspace with ``torch.empty_strided`` and launches ``cublasLtMatmul`` on the
raw pointers, on ``torch.cuda.current_stream()``: no host synchronization, nothing outside the
caching allocator, so a training step with these calls can be captured in a CUDA graph.

What this engine does not launch itself (complex, ``K == 0``, a used ``c``, batched operands,
layouts cuBLASLt does not take as given, the activation part of a backward pass) runs the CuPy
engine (:mod:`gpulinalg.dense._matmul_cuda`) on zero-copy views, on the same torch stream, its
results handed back through DLPack. Same signatures as the other engines.
"""

import threading

from . import _matmul_cuda, _plans_cuda
from ._results import Gradients, MatmulAux

__all__ = ["matmul", "matmul_backward", "MAX_GEMMS"]

#: Backward products remembered per thread (layout key -> plan); the map starts afresh when full.
MAX_GEMMS = 256

_torch: list = []  # [torch, raw-stream getter] once resolved


class _Local(threading.local):
    def __init__(self):
        self.gemms = {}


_local = _Local()


def _mods():
    if not _torch:
        import torch
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is None:  # a torch without the raw getter: the public (slower) one
            def raw(dev):
                return torch.cuda.current_stream(dev).cuda_stream
        _torch.extend((torch, raw))
    return _torch


def _parts(plan, torch):
    """``(out, out transposed, epilog outputs, their names)`` as torch shapes/strides/dtypes."""
    parts = plan.torch_parts
    if parts is None:
        def conv(shape, dtype, nbytes, strides):
            item = dtype.itemsize
            return tuple(shape), tuple(s // item for s in strides), getattr(torch, dtype.name)
        parts = plan.torch_parts = (conv(*plan.out), conv(*plan.out_t),
                                    tuple(conv(*o[1:5]) for o in plan.outputs),
                                    tuple(o[0] for o in plan.outputs))
    return parts


def _launch(plan, a, b, c, alpha, beta, in_ptrs, transposed):
    """Run ``plan`` on tensors in NumPy orientation; returns ``(result, {output name: tensor})``."""
    torch, raw = _mods()
    out_l, out_tl, extra_l, names = _parts(plan, torch)
    dev = a.device
    stream = raw(dev.index)
    shape, strides, dtype = out_tl if transposed else out_l
    out = torch.empty_strided(shape, strides, dtype=dtype, device=dev)
    extra, ptrs = {}, []
    for name, (s, st, dt) in zip(names, extra_l):
        buf = extra[name] = torch.empty_strided(s, st, dtype=dt, device=dev)
        ptrs.append(buf.data_ptr())
    ws_ptr = 0
    if plan.ws_size:
        ws = plan.torch_ws.get(stream)
        if ws is None:
            if len(plan.torch_ws) >= _plans_cuda.MAX_STREAM_WORKSPACES:
                plan.torch_ws.clear()
            ws = plan.torch_ws[stream] = torch.empty(plan.ws_size, dtype=torch.uint8, device=dev)
        ws_ptr = ws.data_ptr()
    if transposed:
        a, b = b, a
    plan.execute(a.data_ptr(), b.data_ptr(), 0 if c is None else c.data_ptr(), alpha, beta,
                 in_ptrs, out.data_ptr(), ptrs, ws_ptr, stream)
    return out, extra


class _OnTorchStream:
    """CuPy's device and current stream set to the tensor's device and torch's current stream
    (the cold paths: planning, and the CuPy engine for what this one does not launch)."""

    def __init__(self, dev):
        import cupy
        torch, raw = _mods()
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


def _finish(done, spec):
    out, extra = done
    if not spec.return_aux:
        return out
    if spec.activation is None:
        return out, None
    return out, MatmulAux(spec.activation, extra[f"{spec.activation}_aux"], spec.transposed,
                          *spec.aux_dims)


def _bias_ptrs(bias):
    return {} if bias is None else {"bias": bias.data_ptr()}


def matmul(a, b, bias, c, spec):
    """``act(alpha * a @ b + beta * c + bias)`` on CUDA torch tensors, on torch's stream."""
    used_c = c is not None and spec.beta != 0.0
    plan = spec.plan
    if plan is not None and not used_c and _plans_cuda.touch(plan):
        return _finish(_launch(plan, a, b, None, spec.alpha, 0.0, _bias_ptrs(bias),
                               spec.transposed), spec)
    with _OnTorchStream(a.get_device()):
        ca, cb, cbias, cc = _view(a), _view(b), _view(bias), _view(c)
        plan = None if used_c else _direct_plan(ca, cb, cbias, spec)
        if plan is None:  # the CuPy engine, on views (a fresh spec: it keeps no plan in ours)
            return _to_torch(_matmul_cuda.matmul(ca, cb, cbias, cc, spec.replace()))
    spec.plan = plan
    return _finish(_launch(plan, a, b, None, spec.alpha, 0.0, _bias_ptrs(bias),
                           spec.transposed), spec)


def _direct_plan(ca, cb, cbias, spec):
    """The plan of a product cuBLASLt takes on the operands as given, or ``None``."""
    if ca.shape[-1] == 0 or ca.dtype.kind == "c" or ca.ndim > 2 or cb.ndim > 2:
        return None
    if _matmul_cuda._gemm_ready(ca, ()) is not ca or _matmul_cuda._gemm_ready(cb, ()) is not cb:
        return None
    inputs = None
    if cbias is not None:
        vec = cbias.reshape(-1) if cbias.ndim != 1 else cbias
        if _matmul_cuda._vector(vec) is not vec or vec.data.ptr != cbias.data.ptr:
            return None
        inputs = {"bias": vec}
    epilog = _matmul_cuda._EPILOGS[spec.activation, cbias is not None, spec.return_aux]
    return _plans_cuda.lookup(ca, cb, None, spec.transposed, spec.alpha, 0.0, epilog, inputs,
                              spec.compute_type, spec.autotune)


def _gemm(a, b, transpose, epilog, spec):
    """``a @ b`` (``epilog``) on tensors as given, or ``None`` when cuBLASLt would need copies."""
    key = (transpose, epilog, spec.compute_type, spec.autotune, a.dtype, a.get_device(),
           a.shape, a.stride(), a.data_ptr() & 255, b.shape, b.stride(), b.data_ptr() & 255)
    gemms = _local.gemms
    plan = gemms.get(key)
    if plan is None or not _plans_cuda.touch(plan):
        with _OnTorchStream(a.get_device()):
            ca, cb = _view(a), _view(b)
            if _matmul_cuda._gemm_ready(ca, ()) is not ca or \
                    _matmul_cuda._gemm_ready(cb, ()) is not cb:
                return None
            plan = _plans_cuda.lookup(ca, cb, None, transpose, 1.0, 0.0, epilog, None,
                                      spec.compute_type, spec.autotune)
        if len(gemms) >= MAX_GEMMS:
            gemms.clear()
        gemms[key] = plan
    return _launch(plan, a, b, None, 1.0, 0.0, {}, transpose)


def matmul_backward(grad_out, upstream, a, b, aux, spec):
    """The gradients of :func:`matmul` on CUDA torch tensors.

    Without an activation and with a ``(N,)`` bias or none, two launches on torch memory:
    ``grad_a = dz @ b.T`` and ``grad_b = a.T @ dz`` (the bias gradient from its BGRADB epilog,
    the same products as the CuPy engine's). Everything else runs the CuPy engine on views.
    """
    if upstream is None and spec.activation is None and spec.bias_form != "m1" \
            and a.ndim == 2 and b.ndim == 2 and a.shape[-1] > 0 and not a.is_complex() \
            and grad_out.is_contiguous():
        done = _direct_backward(grad_out, a, b, spec)
        if done is not None:
            return done
    with _OnTorchStream(a.get_device()):
        views = (_view(grad_out), None if upstream is None else (_view(upstream[0]),
                                                                 _view(upstream[1])),
                 _view(a), _view(b))
        if aux is not None:
            aux = aux._replace(data=_view(aux.data))
        return _to_torch(_matmul_cuda.matmul_backward(*views, aux, spec))


def _direct_backward(dz, a, b, spec):
    form = spec.bias_form
    ga = _gemm(dz, b.t(), True, None, spec)
    if ga is None:
        return None
    gb = _gemm(a.t(), dz, False, "BGRADB" if form == "n" else None, spec)
    if gb is None:
        return None
    grad_bias = None
    if form == "n":
        v = gb[1]["bgradb"]
        v = v.reshape(-1, v.shape[-2] if v.ndim > 1 else v.shape[0])
        grad_bias = v.sum(0) if v.shape[0] > 1 else v[0]
    return Gradients(ga[0], gb[0], grad_bias)
