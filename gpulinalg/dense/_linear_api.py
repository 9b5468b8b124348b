"""The fused linear layer's products (``FusedLinear`` and its custom ops): ``act(x @ weight.T +
bias)`` and its gradients, with the fewest host steps a repeat allows.

A first call of a key (the torch tensors' shapes, strides, dtypes, alignments, devices, and the
options) takes the public road: :func:`~gpulinalg.dense.matmul` /
:func:`~gpulinalg.dense.matmul_backward` on ``weight.T`` validate and dispatch. When the
dispatcher sent that call to the torch engine (CUDA tensors), the key keeps its spec and a
:class:`~gpulinalg._runtime.dispatch.Decision` for the engine's linear entry points
(:func:`gpulinalg.dense._tensors_cuda.linear`, ``linear_backward``: they take ``weight`` as it
is, so no transposed view is made, and the weight gradient is written in the weight's layout);
a repeat goes through :func:`~gpulinalg._runtime.dispatch.again` (recorded, decided afresh
when the settings, the device provider or the GPU's state changed). Everything else (CPU
tensors) takes the public road on every call.
"""

from .._runtime.config import get_config
from .._runtime.dispatch import Decision, again
from . import _calls, _matmul_api, _mlp_cuda, _mlp_host, _tensors_cuda
from ._matmul_api import _host_backward_tensors, _host_matmul_tensors, matmul, matmul_backward
from ._spec import Spec

__all__ = ["forward", "forward_keyed", "backward", "forward_aux", "act_backward"]


def _repeat(key, settings, x, weight, bias):
    """The pair a kept decision gives for a repeat of the call ``key`` (a memo key, or ``None``)
    under the same ``settings``; ``None`` when it is not one."""
    if key is None:
        return None
    known = _calls.lookup(key)
    if known is None or known[2] is not settings:
        return None
    return again(known[0], (x, weight, bias, known[1]), x, settings)


def forward(x, weight, bias, activation, need_saved):
    """``(act(x @ weight.T + bias), saved)`` for 2-D ``x``: ``saved`` is the GELU
    pre-activation ``(M, N)`` when ``need_saved`` (else ``None``)."""
    out, saved, _ = forward_keyed(x, weight, bias, activation, need_saved)
    return out, saved


def forward_keyed(x, weight, bias, activation, need_saved):
    """:func:`forward` and the call's memo key (``None`` for operands that are not all torch
    tensors), which the backward pass of the same operands may pass as ``forward_key``."""
    settings = get_config()
    aux = activation == "gelu" and need_saved
    key = _calls.linear_key(x, weight, bias, ("linear", activation, aux))
    got = _repeat(key, settings, x, weight, bias)
    if got is not None:
        return (*got, key)
    wt = weight.t()
    res = matmul(x, wt, bias=bias, activation=activation, return_aux=aux)
    if key is not None:
        _keep(key, _calls.call_key(x, wt, bias, None, activation, 1.0, 0.0, aux, None, None),
              _tensors_cuda.matmul, _tensors_cuda.linear, _host_linear, settings)
    if not aux:
        return res, None, key
    return res[0], _tensors_cuda.saved_view(res[1].data, res[1].transposed, x.shape[0],
                                            weight.shape[0]), key


def backward(dz, x, weight, has_bias, need_x=True, need_w=True, forward_key=None):
    """``(grad_x, grad_weight, grad_bias or None)`` of ``x @ weight.T (+ bias)`` for the output
    gradient ``dz`` (the activation's derivative already applied). A repeat launches only the
    products asked for: ``grad_x`` is ``None`` when not ``need_x`` (a first layer), ``grad_weight``
    and ``grad_bias`` are ``None`` when not ``need_w`` (frozen parameters).

    ``forward_key``: the key :func:`forward_keyed` gave for these ``x`` and ``weight`` (``dz``
    then has the forward output's shape, dtype and device), so that only ``dz``'s layout is read.
    """
    settings = get_config()
    options = ("linear_backward", has_bias, need_x, need_w)
    key = (_calls.linear_key(x, weight, dz, options) if forward_key is None
           else _calls.grad_key(forward_key, dz, options))
    if key is not None:
        known = _calls.lookup(key)
        if known is not None and known[2] is settings:
            return again(known[0], (dz, x, weight, known[1], need_x, need_w), x, settings)
    wt = weight.t()
    grad_x, grad_wt, grad_bias = matmul_backward(dz, x, wt, bias=has_bias)
    if key is not None:
        _keep(key, _calls.backward_key(dz, x, wt, None, has_bias, None, None),
              _tensors_cuda.matmul_backward, _tensors_cuda.linear_backward,
              _host_linear_backward, settings)
    return grad_x, grad_wt.t(), grad_bias


def _keep(key, public_key, engine, linear_engine, host, settings):
    """Remember ``key`` when the public call of ``public_key`` went to the torch engine."""
    known = _calls.lookup(public_key) if public_key is not None else None
    if known is None or known[0].gpu_fn is not engine or known[2] is not settings:
        return
    first = known[0]
    decision = Decision(first.op, linear_engine, host, **first.options)
    if first.settings is not None:  # the public call's GPU decision holds for this one too
        decision.settings, decision.dev, decision.reason = first.settings, first.dev, first.reason
    _calls.remember(key, (decision, known[1], settings))


def _host_linear(x, weight, bias, spec):
    """The CPU twin of :func:`gpulinalg.dense._tensors_cuda.linear` (CUDA tensors in and out)."""
    res = _host_matmul_tensors(x, weight.t(), bias, None, spec)
    if not spec.return_aux:
        return res, None
    return res[0], (None if res[1] is None else
                    _tensors_cuda.saved_view(res[1].data, res[1].transposed, x.shape[0],
                                             weight.shape[0]))


def _host_linear_backward(dz, x, weight, spec, need_x=True, need_w=True):
    """The CPU twin of :func:`gpulinalg.dense._tensors_cuda.linear_backward`."""
    grad_x, grad_wt, grad_bias = _host_backward_tensors(dz, None, x, weight.t(), None, spec)
    return grad_x, grad_wt.t(), grad_bias


def forward_aux(x, weight, bias, activation):
    """``(act(x @ weight.T + bias), aux, key)`` for 2-D ``x`` (a hidden layer of
    ``FusedMLP``): ``aux`` is the :class:`~gpulinalg.dense.MatmulAux` of the forward epilog
    (the ReLU bit-mask or the GELU pre-activation) that :func:`act_backward` consumes; ``key``
    as :func:`forward_keyed`'s."""
    settings = get_config()
    key = _calls.linear_key(x, weight, bias, ("linear_aux", activation))
    got = _repeat(key, settings, x, weight, bias)
    if got is not None:
        return (*got, key)
    wt = weight.t()
    out, aux = matmul(x, wt, bias=bias, activation=activation, return_aux=True)
    if key is not None:
        _keep(key, _calls.call_key(x, wt, bias, None, activation, 1.0, 0.0, True, None, None),
              _tensors_cuda.matmul, _mlp_cuda.linear_aux, _host_linear_aux, settings)
    return out, aux, key


def act_backward(g, w, aux, activation, has_bias):
    """``(dz, grad_bias or None)`` with ``dz = (g @ w) * act'(z)`` (``z`` the pre-activation
    ``aux`` describes) and ``grad_bias`` its column sums: one product with the
    DRELU_BGRAD / DGELU_BGRAD epilog on the GPU (DRELU / DGELU without ``has_bias``): what
    ``matmul_backward(grad_out=(g, w), ...)`` computes first, without the products after it.

    ``g`` is ``(M, K)``, ``w`` ``(K, N)``, ``aux`` the forward's aux of the ``(M, N)`` product
    (made by :func:`forward_aux`). Internal: the operands are not validated beyond their
    package and dtype (``FusedMLP`` passes its own tensors)."""
    settings = get_config()
    key = _calls.linear_key(g, w, aux.data, ("act_backward", activation, has_bias))
    if key is not None:
        known = _calls.lookup(key)
        if known is not None and known[2] is settings:
            return again(known[0], (g, w, aux, known[1]), g, settings)
    _matmul_api._arrays_of((("g", g), ("w", w),
                            ("aux.data", aux.data if activation == "gelu" else None)))
    m, k, n = g.shape[0], g.shape[1], w.shape[1]
    spec = Spec(activation=activation, compute_type=None,
                autotune=_matmul_api._tune(None, settings), bias_form="n" if has_bias else None,
                transposed=aux.transposed, out_shape=(m, n), batch_shape=())
    nbytes = _matmul_api._estimate(g.nbytes + w.nbytes + aux.data.nbytes
                                   + 2 * m * n * g.itemsize)
    if _matmul_api._cuda_tensors(g, w, aux.data):
        decision = Decision("dense.matmul_backward", _mlp_cuda.act_grad,
                            _matmul_api._on_host(_mlp_host.act_grad), nbytes=nbytes,
                            flops=2.0 * m * k * n, own_stream=False, convert=False)
    else:
        decision = Decision("dense.matmul_backward", _mlp_cuda.act_grad_cupy,
                            _mlp_host.act_grad, nbytes=nbytes, flops=2.0 * m * k * n,
                            same_package=True, own_stream=False)
    if key is not None:
        _calls.remember(key, (decision, spec, settings))
    return again(decision, (g, w, aux, spec), g, settings)


def _host_linear_aux(x, weight, bias, spec):
    """The CPU twin of :func:`gpulinalg.dense._mlp_cuda.linear_aux` (CUDA tensors in and out)."""
    return _host_matmul_tensors(x, weight.t(), bias, None, spec)
