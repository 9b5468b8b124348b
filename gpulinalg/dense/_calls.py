"""A per-thread memo of validated ``matmul`` calls on CuPy arrays and torch tensors (the
per-call hot path).

What ``matmul`` works out before it dispatches (packages, dtypes, shapes, bias form, options,
the dispatcher's size estimates: its :class:`~gpulinalg.dense._spec.Spec`) depends only on the
operands' types, shapes, strides, dtypes and the options. A repeat of a call with the same
key finds that work here instead of redoing it, and the GPU engine finds on the memoized spec the
cuBLASLt plan an earlier call left there (the key also holds the operands' pointer alignment and
device, so it is as strict as the plan cache's own key). Specs are per thread because plans are.

CuPy arrays and torch tensors (``nn.Parameter`` included) are memoized (their layout is read in
a few attribute lookups; a torch key also holds the device index, so CPU and CUDA tensors never
share an entry); anything else, and any call whose options cannot be hashed, takes the full path.
``matmul_backward`` calls without an aux or an upstream pair have keys of their own
(:func:`backward_key`).

The keys are the dispatcher's memo keys (:mod:`gpulinalg._runtime.memo`): a repeat of a key
under the same settings object skips ``matmul``'s planner (the entry keeps the validated spec,
the last of the call's arguments) and, while the dispatcher keeps its GPU decision, the
decision. Keys hold the ``autotune`` argument as given.
"""

import sys

from .._runtime import memo as _memo

__all__ = ["call_key", "backward_key", "linear_key", "grad_key", "lookup", "clear"]

#: The dispatcher's entry (:class:`~gpulinalg._runtime.memo.Kept`) of a key, or ``None``;
#: forget the calling thread's calls (the plan cache's clearing does this).
lookup, clear = _memo.lookup, _memo.clear
_ndarray: list = []  # [cupy.ndarray] once CuPy is imported
_tensor_types: set = set()  # {torch.Tensor, torch.nn.Parameter} once torch is imported


def _layout(x):
    """Everything of a CuPy array a plan depends on."""
    d = x.data
    return (x.shape, x.strides, x.dtype, d.ptr & 255, d.device_id)


def _torch_layout(x):
    """Everything of a torch tensor a plan and the route depend on."""
    return (x.shape, x.stride(), x.dtype, x.data_ptr() & 255, x.get_device(), x.is_conj())


def _is_tensor(x):
    if not _tensor_types:
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "nn"):
            return False
        _tensor_types.update((torch.Tensor, torch.nn.Parameter))
    return type(x) in _tensor_types


def _torch_key(a, b, bias, c, options):
    """The key of torch tensors ``a``, ``b`` and the optional ``bias`` and ``c`` (``a`` is a
    tensor; ``None`` unless they all are). Inline: this runs on every call."""
    types = _tensor_types
    if type(b) not in types or bias is not None and type(bias) not in types \
            or c is not None and type(c) not in types:
        return None
    return (a.shape, a.stride(), a.dtype, a.data_ptr() & 255, a.get_device(), a.is_conj(),
            b.shape, b.stride(), b.dtype, b.data_ptr() & 255, b.get_device(), b.is_conj(),
            None if bias is None else (bias.shape, bias.stride(), bias.dtype,
                                       bias.data_ptr() & 255, bias.get_device(), bias.is_conj()),
            None if c is None else _torch_layout(c), options)


def backward_key(grad_out, a, b, activation, bias, compute_type, autotune):
    """The memo key of a ``matmul_backward`` call without aux or upstream pair (torch tensors
    only: the ``FusedLinear`` backward), or ``None``."""
    if type(grad_out) is tuple or type(grad_out) is list or not _is_tensor(a):
        return None
    return _torch_key(a, b, grad_out, None, ("backward", activation, bias, compute_type,
                                             autotune))


def linear_key(x, weight, third, options):
    """The memo key of a fused-linear call (:mod:`gpulinalg.dense._linear_api`) on torch tensors
    ``x``, ``weight`` and ``third`` (the bias, the output gradient, or ``None``), or ``None``."""
    if type(x) not in _tensor_types and not _is_tensor(x):
        return None
    return _torch_key(x, weight, third, None, options)


def grad_key(base, grad, options):
    """The memo key of a fused-linear backward call whose ``x`` and ``weight`` are those of the
    forward call of key ``base`` (``grad`` has that call's output shape, dtype and device, as
    autograd guarantees): only ``grad``'s layout is read."""
    return (base, grad.stride(), grad.data_ptr() & 255, grad.is_conj(), options)


def call_key(a, b, bias, c, activation, alpha, beta, return_aux, compute_type, autotune):
    """The memo key of a ``matmul`` call, or ``None`` when its arrays are not all CuPy arrays
    or all torch tensors.

    ``alpha`` and ``beta`` enter with their types (``1`` and ``1.0`` validate alike, ``1+0j``
    does not).
    """
    if not _ndarray:
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            _ndarray.append(cupy.ndarray)
    nd = _ndarray[0] if _ndarray else None
    if type(a) is not nd or type(b) is not nd:
        if _is_tensor(a):
            return _torch_key(a, b, bias, c, (activation, type(alpha), alpha, type(beta),
                                              beta, return_aux, compute_type, autotune))
        return None
    if bias is not None and type(bias) is not nd or c is not None and type(c) is not nd:
        return None
    ad, bd = a.data, b.data  # a and b inline: this runs on every call
    return (a.shape, a.strides, a.dtype, ad.ptr & 255, ad.device_id,
            b.shape, b.strides, b.dtype, bd.ptr & 255, bd.device_id,
            None if bias is None else _layout(bias), None if c is None else _layout(c),
            activation, type(alpha), alpha, type(beta), beta, return_aux, compute_type, autotune)
