"""The GPU engine of ``FusedMLP``'s two products that ``FusedLinear`` does not have: a hidden
layer's forward keeping cuBLASLt's aux (the ReLU bit-mask or the GELU pre-activation), and the
next layer's data-gradient product fused with the DRELU_BGRAD / DGELU_BGRAD epilog, which
gives ``dz = (g @ w) * act'(z)`` and the bias gradient of the layer below in one launch.

CUDA torch tensors (:func:`linear_aux`, :func:`act_grad`): plans made once per key on
zero-copy CuPy views, every repeat a :class:`~gpulinalg.dense._tensors_cuda._Launch` on
torch's current stream with torch's caching allocator, as in
:mod:`gpulinalg.dense._tensors_cuda`. CuPy arrays (:func:`act_grad_cupy`, host tensors the
dispatcher moved): :mod:`gpulinalg.dense._matmul_cuda`'s own pair path.
"""

from . import _matmul_cuda, _plans_cuda, _tensors_cuda
from ._results import MatmulAux

__all__ = ["linear_aux", "act_grad", "act_grad_cupy"]

_NONE = ()


def _raw_stream(dev):
    return _tensors_cuda._torch[1](dev.index)


def linear_aux(x, weight, bias, spec):
    """``(act(x @ weight.T + bias), aux)`` on CUDA torch tensors (``spec``: that of
    ``matmul(x, weight.T, bias=..., activation=..., return_aux=True)``); a repeat launches at
    once, the aux in cuBLASLt's layout (a :class:`~gpulinalg.dense.MatmulAux`)."""
    run = spec.plan
    if run is not None and _plans_cuda.touch(run.plan):
        dev = x.device
        out, bufs = run(x.data_ptr(), weight.data_ptr(),
                        _NONE if bias is None else (bias.data_ptr(),), 1.0, dev, _raw_stream(dev))
        return out, MatmulAux(spec.activation, bufs[0], spec.transposed, *spec.aux_dims)
    return _tensors_cuda.matmul(x, weight.t(), bias, None, spec)


def _epilog(spec):
    return "D" + spec.activation.upper() + ("_BGRAD" if spec.bias_form is not None else "")


def _plan_dgrad(g, w, aux, spec):
    """The plan of ``g @ w`` with the backward epilog of ``spec`` on tensors as given, or
    ``None`` when cuBLASLt would need copies."""
    with _tensors_cuda._OnTorchStream(g.get_device()):
        view = _tensors_cuda._view
        cg, cw, data = view(g), view(w), view(aux.data)
        if _matmul_cuda._gemm_ready(cg, ()) is not cg or \
                _matmul_cuda._gemm_ready(cw, ()) is not cw or \
                _matmul_cuda._col_major(data) is not data:
            return None
        return _plans_cuda.lookup(cg, cw, None, aux.transposed, 1.0, 0.0, _epilog(spec),
                                  {f"{spec.activation}_aux": data}, spec.compute_type,
                                  spec.autotune)


def act_grad(g, w, aux, spec):
    """``(dz, grad_bias or None)`` of ``dz = (g @ w) * act'(z)`` on CUDA torch tensors: one
    cuBLASLt launch (``spec.bias_form``: with the bias gradient from the ``_BGRAD`` epilog);
    ``spec.plan`` keeps the launch for repeats. Operands cuBLASLt cannot take as given run
    the CuPy engine's pair path on views."""
    run = spec.plan
    if run is None or not run.live():
        plan = None if g.dim() != 2 or w.dim() != 2 or g.is_complex() else \
            _plan_dgrad(g, w, aux, spec)
        if plan is None:
            with _tensors_cuda._OnTorchStream(g.get_device()):
                view = _tensors_cuda._view
                res = _matmul_cuda._dz(None, (view(g), view(w)),
                                       aux._replace(data=view(aux.data)), spec)
                return _tensors_cuda._to_torch(res)
        run = spec.plan = _tensors_cuda._Launch(plan, aux.transposed)
    dev = g.device
    dz, bufs = run(g.data_ptr(), w.data_ptr(), (aux.data.data_ptr(),), 1.0, dev,
                   _raw_stream(dev))
    if not bufs:
        return dz, None
    gb = bufs[0]
    return dz, gb if gb.ndim == 1 else _tensors_cuda._bias_grad(bufs)


def act_grad_cupy(g, w, aux, spec):
    """:func:`act_grad` on CuPy arrays (the engine's ``matmul_backward`` pair path, stopped
    after its fused product)."""
    return _matmul_cuda._dz(None, (g, w), aux, spec)
