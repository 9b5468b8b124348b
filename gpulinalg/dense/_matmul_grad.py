"""The gradient of :func:`~gpulinalg.dense.matmul` for torch tensors (the rule of
:mod:`gpulinalg._runtime.gradients`): the backward is :func:`~gpulinalg.dense.matmul_backward`
(cuBLASLt's DRELU/DGELU and BGRAD epilogs on the GPU) from the forward's aux.

Real dtypes, ``alpha = 1`` and no ``c``; other calls raise ``NotImplementedError`` when grad is
required. When the backward is itself recorded (``create_graph=True``: double backward,
``gradgradcheck``), it is computed from differentiable pieces instead: the pre-activation
recomputed by :func:`~gpulinalg.dense.matmul`, torch's own activation derivative (ReLU; GELU in
its tanh form, as cuBLASLt's and the CPU engine's), and the products by ``matmul`` again."""

from .._runtime.gradients import FUNCTIONS, bound, call, rule, unbroadcast

__all__: list[str] = []


def _dz(g, z, act):
    """``dL/dZ`` from ``dL/dOut`` (``g``) at the pre-activation ``z``, differentiable in both."""
    import torch
    if act == "relu":
        return g * (z > 0).to(g.dtype)
    with torch.enable_grad():
        out = torch.nn.functional.gelu(z, approximate="tanh")
    return torch.autograd.grad(out, z, g, create_graph=True)[0]


def _recorded_backward(g, a, b, bias, act, column, options):
    """The gradients of ``a``, ``b`` and ``bias`` as a graph of their own (double backward)."""
    product = FUNCTIONS["dense.matmul"]
    dz = g
    if act is not None:
        dz = _dz(g, product(a, b, bias=bias, **options), act)
    ga = unbroadcast(product(dz, b.mT, **options), a.shape)
    gb = unbroadcast(product(a.mT, dz, **options), b.shape)
    if bias is None:
        return ga, gb
    gbias = dz.sum(dim=tuple(range(dz.dim() - 1))) if not column else \
        dz.sum(dim=tuple(range(dz.dim() - 2)) + (-1,))
    return ga, gb, gbias.reshape(bias.shape)


@rule("dense.matmul")
def _matmul(fn, *args, **kwargs):
    p = bound(fn, args, kwargs)
    a, b, bias, act = p["a"], p["b"], p["bias"], p["activation"]
    complex_in = any(getattr(x, "is_complex", lambda: False)() for x in (a, b))
    if p["alpha"] != 1 or (p["c"] is not None and p["beta"] != 0) or complex_in:
        raise NotImplementedError(
            "dense.matmul: gradients are not supported with alpha != 1, c, or complex inputs; "
            "use FusedLinear, or torch for this product")
    column = bias is not None and len(bias.shape) == 2
    options = dict(compute_type=p["compute_type"], autotune=p["autotune"])
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
