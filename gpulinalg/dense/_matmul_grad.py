"""The gradient of :func:`~gpulinalg.dense.matmul` for torch tensors (the rule of
:mod:`gpulinalg._runtime.gradients`): the backward is :func:`~gpulinalg.dense.matmul_backward`
(cuBLASLt's DRELU/DGELU and BGRAD epilogs on the GPU) from the forward's aux.

Real dtypes, ``alpha = 1`` and no ``c``; other calls raise ``NotImplementedError`` when grad is
required. The backward is not differentiable again (no double backward)."""

from .._runtime.gradients import FUNCTIONS, bound, call, rule

__all__: list[str] = []


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
        (g,) = grads
        if g is None:
            return (None,) * len(ins)
        ga, gb, gbias = FUNCTIONS["dense.matmul_backward"](
            g.detach(), ins[0].detach(), ins[1].detach(), aux=kept["aux"], activation=act,
            bias=("column" if column else True) if len(ins) == 3 else False, **options)
        if gbias is not None:
            gbias = gbias.reshape(ins[2].shape)
        return (ga, gb) + ((gbias,) if len(ins) == 3 else ())
    out = call(forward, backward, a, b, *(() if bias is None else (bias,)))[0]
    return (out, kept["aux"]) if p["return_aux"] else out
