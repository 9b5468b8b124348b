"""The fused linear layer's products (``FusedLinear`` and its custom ops): ``act(x @ weight.T +
bias)`` and its gradients, with the fewest host steps a repeat allows.

Each entry point makes one dispatcher call keyed by the torch tensors' shapes, strides, dtypes,
alignments, devices and the options (:mod:`gpulinalg.dense._calls`). Its planner validates as
:func:`~gpulinalg.dense.matmul` / :func:`~gpulinalg.dense.matmul_backward` do on ``weight.T``
(their planners); when that sends the call to the torch engine (CUDA tensors), the
:class:`~gpulinalg._runtime.dispatch.Op` names the engine's linear entry points instead
(:func:`gpulinalg.dense._tensors_cuda.linear`, ``linear_backward``: they take ``weight`` as it
is, so no transposed view is made, and the weight gradient is written in the weight's layout);
otherwise the public engines, on ``weight.T``. A repeat of a key skips the planner (and, while
the dispatcher keeps its GPU decision, the decision).
"""

from .._runtime.config import get_config
from .._runtime.dispatch import Op, dispatch
from . import _calls, _matmul_api, _matmul_cuda, _matmul_host, _mlp_cuda, _mlp_host, _tensors_cuda
from ._matmul_api import _host_backward_tensors, _host_matmul_tensors
from ._spec import Spec

__all__ = ["forward", "forward_keyed", "backward", "forward_aux", "act_backward"]


def forward(x, weight, bias, activation, need_saved):
    """``(act(x @ weight.T + bias), saved)`` for 2-D ``x``: ``saved`` is the GELU
    pre-activation ``(M, N)`` when ``need_saved`` (else ``None``)."""
    out, saved, _ = forward_keyed(x, weight, bias, activation, need_saved)
    return out, saved


def forward_keyed(x, weight, bias, activation, need_saved):
    """:func:`forward` and the call's memo key (``None`` for operands that are not all torch
    tensors), which the backward pass of the same operands may pass as ``forward_key``."""
    aux = activation == "gelu" and need_saved
    key = _calls.linear_key(x, weight, bias, ("linear", activation, aux))
    return (*dispatch(_plan_forward, x, weight, bias, activation, aux, key=key,
                      lead=(x, weight, bias)), key)


def _plan_forward(x, weight, bias, activation, aux):
    op = _matmul_api.plan(x, weight.t(), bias, None, activation, 1.0, 0.0, aux, None, None,
                          False)
    if type(op) is not Op:  # an empty product, answered
        return (op, None) if not aux else (op[0], None if op[1] is None else _saved(op[1], x,
                                                                                   weight))
    spec = op.args[4]
    if op.gpu_fn is _tensors_cuda.matmul:
        return op._replace(gpu_fn=_tensors_cuda.linear, cpu_fn=_host_linear,
                           args=(x, weight, bias, spec))
    return op._replace(gpu_fn=_linear_with(_matmul_cuda.matmul),
                       cpu_fn=_linear_with(_matmul_host.matmul), args=(x, weight, bias, spec))


def _saved(aux, x, weight):
    return _tensors_cuda.saved_view(aux.data, aux.transposed, x.shape[0], weight.shape[0])


def _linear_with(engine):
    """The fused linear product through a public engine on ``weight.T`` (CuPy or NumPy
    arguments), with :func:`gpulinalg.dense._tensors_cuda.linear`'s results."""
    def linear(x, weight, bias, spec):
        res = engine(x, weight.T, bias, None, spec)
        return (res, None) if not spec.return_aux else (res[0], _saved(res[1], x, weight))
    return linear


def backward(dz, x, weight, has_bias, need_x=True, need_w=True, forward_key=None):
    """``(grad_x, grad_weight, grad_bias or None)`` of ``x @ weight.T (+ bias)`` for the output
    gradient ``dz`` (the activation's derivative already applied). A repeat launches only the
    products asked for: ``grad_x`` is ``None`` when not ``need_x`` (a first layer), ``grad_weight``
    and ``grad_bias`` are ``None`` when not ``need_w`` (frozen parameters).

    ``forward_key``: the key :func:`forward_keyed` gave for these ``x`` and ``weight`` (``dz``
    then has the forward output's shape, dtype and device), so that only ``dz``'s layout is read.
    """
    options = ("linear_backward", has_bias, need_x, need_w)
    key = (_calls.linear_key(x, weight, dz, options) if forward_key is None
           else _calls.grad_key(forward_key, dz, options))
    return dispatch(_plan_backward, dz, x, weight, has_bias, need_x, need_w, key=key,
                    lead=(dz, x, weight))


def _plan_backward(dz, x, weight, has_bias, need_x, need_w):
    op = _matmul_api.plan_backward(dz, x, weight.t(), None, None, has_bias, None, None)
    if type(op) is not Op:
        grad_x, grad_wt, grad_bias = op
        return grad_x, grad_wt.t() if hasattr(grad_wt, "t") else grad_wt.T, grad_bias
    spec = op.args[5]
    if op.gpu_fn is _tensors_cuda.matmul_backward:
        return op._replace(gpu_fn=_tensors_cuda.linear_backward, cpu_fn=_host_linear_backward,
                           args=(dz, x, weight, spec, need_x, need_w))
    return op._replace(gpu_fn=_linear_backward_with(_matmul_cuda.matmul_backward),
                       cpu_fn=_linear_backward_with(_matmul_host.matmul_backward),
                       args=(dz, x, weight, spec, need_x, need_w))


def _linear_backward_with(engine):
    """The fused linear gradients through a public engine on ``weight.T``."""
    def linear_backward(dz, x, weight, spec, need_x=True, need_w=True):
        grad_x, grad_wt, grad_bias = engine(dz, None, x, weight.T, None, spec)
        return grad_x, grad_wt.T, grad_bias
    return linear_backward


def _host_linear(x, weight, bias, spec):
    """The CPU twin of :func:`gpulinalg.dense._tensors_cuda.linear` (CUDA tensors in and out)."""
    res = _host_matmul_tensors(x, weight.t(), bias, None, spec)
    if not spec.return_aux:
        return res, None
    return res[0], (None if res[1] is None else _saved(res[1], x, weight))


def _host_linear_backward(dz, x, weight, spec, need_x=True, need_w=True):
    """The CPU twin of :func:`gpulinalg.dense._tensors_cuda.linear_backward`."""
    grad_x, grad_wt, grad_bias = _host_backward_tensors(dz, None, x, weight.t(), None, spec)
    return grad_x, grad_wt.t(), grad_bias


def forward_aux(x, weight, bias, activation):
    """``(act(x @ weight.T + bias), aux, key)`` for 2-D ``x`` (a hidden layer of
    ``FusedMLP``): ``aux`` is the :class:`~gpulinalg.dense.MatmulAux` of the forward epilog
    (the ReLU bit-mask or the GELU pre-activation) that :func:`act_backward` consumes; ``key``
    as :func:`forward_keyed`'s."""
    key = _calls.linear_key(x, weight, bias, ("linear_aux", activation))
    return (*dispatch(_plan_forward_aux, x, weight, bias, activation, key=key,
                      lead=(x, weight, bias)), key)


def _plan_forward_aux(x, weight, bias, activation):
    op = _matmul_api.plan(x, weight.t(), bias, None, activation, 1.0, 0.0, True, None, None,
                          False)
    if type(op) is not Op:
        return op
    spec = op.args[4]
    if op.gpu_fn is _tensors_cuda.matmul:
        return op._replace(gpu_fn=_mlp_cuda.linear_aux, cpu_fn=_host_linear_aux,
                           args=(x, weight, bias, spec))
    return op._replace(gpu_fn=_aux_with(_matmul_cuda.matmul),
                       cpu_fn=_aux_with(_matmul_host.matmul), args=(x, weight, bias, spec))


def _aux_with(engine):
    def linear_aux(x, weight, bias, spec):
        return engine(x, weight.T, bias, None, spec)
    return linear_aux


def act_backward(g, w, aux, activation, has_bias):
    """``(dz, grad_bias or None)`` with ``dz = (g @ w) * act'(z)`` (``z`` the pre-activation
    ``aux`` describes) and ``grad_bias`` its column sums: one product with the
    DRELU_BGRAD / DGELU_BGRAD epilog on the GPU (DRELU / DGELU without ``has_bias``): what
    ``matmul_backward(grad_out=(g, w), ...)`` computes first, without the products after it.

    ``g`` is ``(M, K)``, ``w`` ``(K, N)``, ``aux`` the forward's aux of the ``(M, N)`` product
    (made by :func:`forward_aux`). Internal: the operands are not validated beyond their
    package and dtype (``FusedMLP`` passes its own tensors)."""
    key = _calls.linear_key(g, w, aux.data, ("act_backward", activation, has_bias))
    return dispatch(_plan_act_backward, g, w, aux, activation, has_bias, key=key,
                    lead=(g, w, aux))


def _plan_act_backward(g, w, aux, activation, has_bias):
    _matmul_api._arrays_of((("g", g), ("w", w),
                            ("aux.data", aux.data if activation == "gelu" else None)))
    m, k, n = g.shape[0], g.shape[1], w.shape[1]
    spec = Spec(activation=activation, compute_type=None,
                autotune=_matmul_api._tune(None, get_config()),
                bias_form="n" if has_bias else None, transposed=aux.transposed,
                out_shape=(m, n), batch_shape=())
    nbytes = _matmul_api._estimate(g.nbytes + w.nbytes + aux.data.nbytes
                                   + 2 * m * n * g.itemsize)
    if _matmul_api._cuda_tensors(g, w, aux.data):
        return Op("dense.matmul_backward", _mlp_cuda.act_grad,
                  _matmul_api._on_host(_mlp_host.act_grad), (g, w, aux, spec), nbytes=nbytes,
                  flops=2.0 * m * k * n, own_stream=False, convert=False)
    return Op("dense.matmul_backward", _mlp_cuda.act_grad_cupy, _mlp_host.act_grad,
              (g, w, aux, spec), nbytes=nbytes, flops=2.0 * m * k * n, same_package=True,
              own_stream=False)


def _host_linear_aux(x, weight, bias, spec):
    """The CPU twin of :func:`gpulinalg.dense._mlp_cuda.linear_aux` (CUDA tensors in and out)."""
    return _host_matmul_tensors(x, weight.t(), bias, None, spec)
