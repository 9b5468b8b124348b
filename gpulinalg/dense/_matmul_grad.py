"""The gradients of :func:`~gpulinalg.dense.matmul` and :func:`~gpulinalg.dense.matmul_backward`
for torch tensors (the rules of :mod:`gpulinalg._runtime.gradients`).

``matmul``: the backward is :func:`~gpulinalg.dense.matmul_backward` (cuBLASLt's DRELU/DGELU and
BGRAD epilogs on the GPU) from the forward's aux for real dtypes, ``alpha = 1`` and no ``c``;
with ``alpha``, ``c`` or complex inputs, torch.addmm's gradients from ``matmul`` products and
torch's activation derivative (:func:`_scaled_matmul`). When the backward is itself recorded
(``create_graph=True``: double backward, ``gradgradcheck``), it is computed from differentiable
pieces instead: the pre-activation recomputed by :func:`~gpulinalg.dense.matmul`, torch's own
activation derivative (ReLU; GELU in its tanh form, as cuBLASLt's and the CPU engine's), and the
products by ``matmul`` again.

``matmul_backward``: its results ``grad_a = dz b^T``, ``grad_b = a^T dz`` and ``grad_bias`` (the
sums of ``dz``), ``dz = g * act'(z)``, are differentiated with respect to the upstream gradient
``g`` (or the pair ``(g, w)`` that stands for ``g @ w``), ``a`` and ``b``, the activation's
derivative ``act'(z)`` read from ``aux`` and held constant (``aux`` is data: ReLU's mask is
piecewise constant; a GELU pre-activation that requires grad raises). The backward is made of
``matmul`` products and torch's elementwise operations, so it is differentiable again. Real
dtypes only, as ``matmul``'s rule."""

import functools
import operator

from .._runtime.gradients import FUNCTIONS, as_tensor, bound, call, rule, unbroadcast
from ._epilogs_xp import gelu_grad, preactivation, relu_mask
from ._results import Gradients

__all__: list[str] = []


def _dz(g, z, act):
    """``dL/dZ`` from ``dL/dOut`` (``g``) at the pre-activation ``z``, differentiable in both."""
    import torch
    if act == "relu":
        return g * (z > 0).to(g.dtype)
    recorded = torch.is_grad_enabled()  # the outer backward is recorded (double backward)
    with torch.enable_grad():
        if not z.requires_grad:  # a first-order backward: the derivative alone
            z = z.detach().requires_grad_()
        out = torch.nn.functional.gelu(z, approximate="tanh")
        return torch.autograd.grad(out, z, g, create_graph=recorded)[0]


def _recorded_backward(g, a, b, bias, act, column, options, alpha=1.0, c=None, beta=0.0):
    """The gradients of ``a``, ``b``, ``bias`` and ``c`` (those given) of
    ``act(alpha a b + beta c + bias)`` from ``matmul`` products and torch's activation
    derivative: torch.addmm's, ``conj(alpha) dz b^H``, ``conj(alpha) a^H dz``, the sums of
    ``dz`` and ``conj(beta) dz``, a graph of their own (double backward)."""
    product = FUNCTIONS["dense.matmul"]
    dz = g
    if act is not None:
        dz = _dz(g, product(a, b, bias=bias, alpha=alpha, c=c, beta=beta, **options), act)
    scale = alpha.conjugate()
    out = [unbroadcast(scale * product(dz, _adjoint(b), **options), a.shape),
           unbroadcast(scale * product(_adjoint(a), dz, **options), b.shape)]
    if bias is not None:
        gbias = dz.sum(dim=tuple(range(dz.dim() - 1))) if not column else \
            dz.sum(dim=tuple(range(dz.dim() - 2)) + (-1,))
        out.append(gbias.reshape(bias.shape))
    if c is not None:
        out.append(unbroadcast(beta.conjugate() * dz, c.shape))
    return tuple(out)


def _adjoint(x):
    """``x^H`` as a plain tensor (a conjugate view cannot be handed over by DLPack)."""
    return x.mT.conj().resolve_conj() if x.is_complex() else x.mT


@rule("dense.matmul")
def _matmul(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    a, b, bias, act = p["a"], p["b"], p["bias"], p["activation"]
    complex_in = any(getattr(x, "is_complex", lambda: False)() for x in (a, b))
    column = bias is not None and len(bias.shape) == 2
    options = dict(compute_type=p["compute_type"], autotune=p["autotune"])
    if p["alpha"] != 1 or (p["c"] is not None and p["beta"] != 0) or complex_in:
        return _scaled_matmul(fn, p, column, options)
    kept = {}

    def forward(a, b, *rest):
        out, aux = fn(a, b, bias=rest[0] if rest else None, activation=act, return_aux=True,
                      check_finite=p["check_finite"], **options)
        kept["aux"] = aux
        return (out,)

    def backward(ins, outs, grads):
        import torch
        (g,) = grads
        if g is None:
            return (None,) * len(ins)
        if torch.is_grad_enabled():  # create_graph=True: the fused epilogs are not differentiable
            return _recorded_backward(g, ins[0], ins[1], ins[2] if len(ins) == 3 else None,
                                      act, column, options)
        ga, gb, gbias = FUNCTIONS["dense.matmul_backward"](
            g.detach(), ins[0].detach(), ins[1].detach(), aux=kept["aux"], activation=act,
            bias=("column" if column else True) if len(ins) == 3 else False, **options)
        if gbias is not None:
            gbias = gbias.reshape(ins[2].shape)
        return (ga, gb) + ((gbias,) if len(ins) == 3 else ())
    out = call(forward, backward, a, b, *(() if bias is None else (bias,)))[0]
    return (out, kept["aux"]) if p["return_aux"] else out


def _scaled_matmul(fn, p, column, options):
    """The rule of ``act(alpha a b + beta c + bias)`` with ``alpha != 1``, a ``c`` that is read,
    or complex inputs (no activation then): torch.addmm's gradients, ``conj(alpha) g b^H``,
    ``conj(alpha) a^H g`` and ``conj(beta) g``, from ``matmul`` products and torch's activation
    derivative (no fused epilog computes them), so double backward works too."""
    a, b, act = p["a"], p["b"], p["activation"]
    alpha, beta = p["alpha"], p["beta"]
    bias = None if p["bias"] is None else as_tensor(p["bias"], a)
    c = as_tensor(p["c"], a) if p["c"] is not None and p["beta"] != 0 else None
    kept = {}

    def split(rest):
        rest = list(rest)
        return (rest.pop(0) if bias is not None else None), (rest.pop(0) if c is not None else None)

    def forward(a, b, *rest):
        bias_, c_ = split(rest)
        res = fn(a, b, bias=bias_, activation=act, alpha=alpha, c=c_, beta=beta,
                 return_aux=p["return_aux"], check_finite=p["check_finite"], **options)
        if p["return_aux"]:
            res, kept["aux"] = res
        return (res,)

    def backward(ins, outs, grads):
        (g,) = grads
        if g is None:
            return (None,) * len(ins)
        bias_, c_ = split(ins[2:])
        return _recorded_backward(g, ins[0], ins[1], bias_, act, column, options, alpha, c_,
                                  beta)
    extra = tuple(x for x in (bias, c) if x is not None)
    out = call(forward, backward, a, b, *extra)[0]
    return (out, kept["aux"]) if p["return_aux"] else out


def _unpack_bits(packed, rows):
    """``uint8`` ``(..., C, P)`` -> boolean ``(..., C, rows)`` (least significant bit first,
    cuBLASLt's order) for a torch tensor."""
    import torch
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    bits = (packed[..., None] >> shifts) & 1
    return bits.reshape(*packed.shape[:-1], -1)[..., :rows].bool()


def _derivative(aux, act, like):
    """``act'(z)`` in ``like``'s dtype and on its device, NumPy-shaped ``(..., M, N)``, from the
    forward's aux (a constant: no graph)."""
    import torch
    data = as_tensor(aux.data, like).detach()
    aux = aux._replace(data=data)
    if act == "relu":
        return relu_mask(aux, torch, _unpack_bits).to(like.dtype)
    z = preactivation(aux, torch)
    wide = torch.float32 if z.dtype in (torch.float16, torch.bfloat16) else z.dtype
    return gelu_grad(z.to(wide), torch).to(like.dtype)


def _backward_refusal(p):
    """Why a ``matmul_backward`` call cannot carry gradients (``None`` when it can)."""
    grad_out, aux, act = p["grad_out"], p["aux"], p["activation"]
    parts = tuple(grad_out) if isinstance(grad_out, (tuple, list)) else (grad_out,)
    if any(getattr(x, "is_complex", lambda: False)() for x in (*parts, p["a"], p["b"])):
        return "complex inputs"
    if act == "gelu" and getattr(getattr(aux, "data", None), "requires_grad", False):
        return ("an aux whose GELU pre-activation requires grad (the rule holds aux constant; "
                "pass aux.data.detach(), or differentiate dense.matmul itself)")
    return None


@rule("dense.matmul_backward")
def _matmul_backward(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    why = _backward_refusal(p)
    if why is not None:
        raise NotImplementedError(
            f"dense.matmul_backward: gradients are not supported with {why}; call it on "
            "tensors that do not require grad")
    act, aux, bias = p["activation"], p["aux"], p["bias"]
    options = dict(compute_type=p["compute_type"], autotune=p["autotune"])
    product = FUNCTIONS["dense.matmul"]
    g = p["grad_out"]
    if isinstance(g, (tuple, list)):  # dL/dOut = g @ w: its own product carries (g, w)'s graph
        g = product(g[0], g[1], **options)
    like = next(x for x in (g, p["a"], p["b"]) if hasattr(x, "requires_grad"))
    g, a, b = (as_tensor(x, like) for x in (g, p["a"], p["b"]))

    def forward(g, a, b):
        grads = fn(g, a, b, aux=aux, activation=act, bias=bias, **options)
        return tuple(grads) if grads.grad_bias is not None else tuple(grads[:2])

    def backward(ins, outs, grads):
        g, a, b = ins
        gga, ggb = grads[:2]
        ggbias = grads[2] if len(grads) == 3 else None
        d = None if act is None else _derivative(aux, act, g)
        dz = g if d is None else g * d
        # the cotangent of dz: grad_a = dz b^T, grad_b = a^T dz, grad_bias = sum(dz) transposed
        parts = []
        if gga is not None:
            parts.append(product(gga, b, **options))
        if ggb is not None:
            parts.append(product(a, ggb, **options))
        if ggbias is not None:
            parts.append(ggbias)  # (N,) or (M, 1): broadcast over dz's rows or columns
        grad_g = None
        if parts:
            gdz = functools.reduce(operator.add, parts).expand(g.shape)
            grad_g = gdz if d is None else gdz * d
        grad_a = None if ggb is None else unbroadcast(product(dz, ggb.mT, **options), a.shape)
        grad_b = None if gga is None else unbroadcast(product(gga.mT, dz, **options), b.shape)
        return grad_g, grad_a, grad_b
    outs = call(forward, backward, g, a, b)
    return Gradients(outs[0], outs[1], outs[2] if len(outs) == 3 else None)
