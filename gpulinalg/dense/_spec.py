"""What a fused product asks for, in plain Python (no arrays): the call's :class:`Spec`, the
accepted activations and compute types, cuBLASLt's epilog names and the aux buffer's shape.

Shared by the public functions (``_matmul_api``), both engines (``_matmul_cuda``,
``_matmul_host``) and the algorithms written for any array module (``_fused_xp``,
``_epilogs_xp``).
"""

__all__ = ["Spec", "ACTIVATIONS", "COMPUTE_TYPES", "WORKSPACE_LIMIT", "forward_epilog",
           "aux_shape"]

ACTIVATIONS = (None, "relu", "gelu")

#: compute_type strings accepted at the edge -> cuBLAS ComputeType member names.
COMPUTE_TYPES = {
    "tf32": "COMPUTE_32F_FAST_TF32", "fast_tf32": "COMPUTE_32F_FAST_TF32",
    "fast_fp16": "COMPUTE_32F_FAST_16F", "fast_bf16": "COMPUTE_32F_FAST_16BF",
    "fp32": "COMPUTE_32F", "float32": "COMPUTE_32F", "pedantic": "COMPUTE_32F_PEDANTIC",
    "fp16": "COMPUTE_16F", "float16": "COMPUTE_16F",
    "fp64": "COMPUTE_64F", "float64": "COMPUTE_64F",
}

#: Most workspace bytes one plan may ask for (cuBLASLt recommends 32 MiB on Hopper).
WORKSPACE_LIMIT = 64 << 20


class Spec:
    """Everything but the arrays that both engines need (a plain object: the dispatcher skips it).

    ``plan`` is where the GPU engine leaves the cuBLASLt plan of a call whose operands it used as
    given (see :mod:`gpulinalg.dense._calls`); it is not one of the fields :meth:`replace` copies.
    """

    _FIELDS = ("activation", "alpha", "beta", "return_aux", "compute_type", "autotune",
               "bias_form", "transposed", "out_shape", "batch_shape")
    __slots__ = _FIELDS + ("plan",)

    def __init__(self, activation=None, alpha=1.0, beta=0.0, return_aux=False, compute_type=None,
                 autotune=False, bias_form=None, transposed=True, out_shape=(), batch_shape=()):
        self.activation, self.alpha, self.beta = activation, alpha, beta
        self.return_aux = return_aux
        self.compute_type, self.autotune, self.bias_form = compute_type, autotune, bias_form
        self.transposed, self.out_shape, self.batch_shape = transposed, out_shape, batch_shape
        self.plan = None

    @property
    def aux_dims(self):
        """``(rows, cols)`` of the product as cuBLASLt lays it out (transposed or not)."""
        m, n = self.out_shape[-2:]
        return (n, m) if self.transposed else (m, n)

    def replace(self, **changes):
        kw = {n: getattr(self, n) for n in self._FIELDS}
        kw.update(changes)
        return Spec(**kw)


#: (activation, bias?) -> nvmath MatmulEpilog member name (None: plain product).
_FORWARD = {
    (None, False): None, (None, True): "BIAS",
    ("relu", False): "RELU", ("relu", True): "RELU_BIAS",
    ("gelu", False): "GELU", ("gelu", True): "GELU_BIAS",
}


def forward_epilog(activation, has_bias, aux):
    """The cuBLASLt epilog name of a forward pass (``None`` for a plain product)."""
    name = _FORWARD[activation, bool(has_bias)]
    if aux and activation is not None:
        name = name.replace(activation.upper(), activation.upper() + "_AUX")
    return name


def _ceil(n, base):
    return -(-n // base) * base


def aux_shape(activation, rows, cols):
    """Shape (last two axes) of the aux buffer of an ``rows x cols`` planned product."""
    if activation == "relu":
        return _ceil(-(-rows // 8), 16), cols
    return _ceil(rows, 8), cols
