"""The GPU engine: NumPy-shaped fused products mapped onto cuBLASLt through cached nvmath plans.

cuBLASLt adds its bias along the columns of the column-major ``M x N`` result (one value per
row). A NumPy bias of shape ``(N,)`` (one value per column) is therefore served by planning the
transposed product ``b.T @ a.T`` (``N x M``): its column-major result, read transposed, is the
C-ordered ``(M, N)`` answer, and no operand is copied (the plan is made on views; a hit reuses
the same pointers and allocates the result in ``(M, N)`` layout directly). A ``(M, 1)`` bias
uses the direct product, whose result comes back in Fortran order.

The few cases cuBLASLt cannot fuse run :mod:`gpulinalg.dense._fused_xp` on CuPy arrays, with
CuPy's bit packing (:func:`pack_bits`, :func:`unpack_bits`). Receives CuPy arrays; same
signatures as the CPU engine (:mod:`gpulinalg.dense._matmul_host`).
"""

from . import _fused_xp
from ._epilogs_xp import RELU_BITORDER
from ._plans_cuda import gemm, lookup, rerun, run
from ._results import Gradients, MatmulAux
from ._spec import ACTIVATIONS, forward_epilog

__all__ = ["matmul", "matmul_backward", "pack_bits", "unpack_bits"]

_UNFUSABLE_KINDS = "c"  # complex: cuBLASLt has no complex epilogs; bias goes through C
#: (activation, bias?, aux?) -> epilog name, worked out once.
_EPILOGS = {(act, bias, aux): forward_epilog(act, bias, aux)
            for act in ACTIVATIONS for bias in (False, True) for aux in (False, True)}


def pack_bits(positive, pad_rows):
    """Boolean ``(..., C, R)`` -> ``uint8`` ``(..., C, pad_rows)``: CuPy's ``packbits`` has no
    axis, so a padded, flattened copy is packed."""
    import cupy
    batch, (cols, rows) = positive.shape[:-2], positive.shape[-2:]
    bits = cupy.zeros((*batch, cols, pad_rows * 8), dtype=cupy.uint8)
    bits[..., :rows] = positive
    packed = cupy.packbits(bits.reshape(-1), bitorder=RELU_BITORDER)
    return packed.reshape(*batch, cols, pad_rows)


def unpack_bits(packed, rows):
    """``uint8`` ``(..., C, P)`` -> boolean ``(..., C, rows)`` (flattened, as for packing)."""
    import cupy
    t = cupy.ascontiguousarray(packed)
    batch, cols = t.shape[:-2], t.shape[-2]
    bits = cupy.unpackbits(t.reshape(-1), bitorder=RELU_BITORDER)
    bits = bits.reshape(*batch, cols, t.shape[-1] * 8)
    return bits[..., :rows].astype(bool)


def _t(x):
    return None if x is None else x.swapaxes(-1, -2)


def _gemm_ready(x, batch_shape):
    """``x`` broadcast to ``batch_shape`` and laid out as cuBLASLt accepts (copies only if not)."""
    if x.ndim > 2 and x.shape[:-2] != batch_shape:
        import cupy
        x = cupy.broadcast_to(x, (*batch_shape, *x.shape[-2:]))
    item = x.itemsize
    s = x.strides
    ok = s[-1] == item or s[-2] == item
    if ok and x.ndim > 2:
        ok = all(st != 0 for st in s[:-2]) and all(
            s[i] == s[i + 1] * x.shape[i + 1] for i in range(x.ndim - 3))
        ok = ok and min(s[:-2]) >= x.shape[-1] * x.shape[-2] * item
    if ok:
        return x
    import cupy
    return cupy.ascontiguousarray(x)


def _row_major(x):
    """``x`` with C-contiguous matrices (a copy only when it is not)."""
    if x is None or x.flags.c_contiguous:
        return x
    import cupy
    return cupy.ascontiguousarray(x)


def _vector(v):
    """A 1-D, unit-stride, 16-byte-aligned copy of ``v`` only when ``v`` is not one already."""
    if v.ndim != 1:
        v = v.reshape(-1)
    if v.strides[0] != v.itemsize or v.data.ptr % 16:
        import cupy
        v = cupy.array(v, copy=True)
    return v


def _operands(a, b, c, spec):
    """``(a, b, c)`` ready for cuBLASLt, in NumPy orientation (``gemm(transpose=...)`` plans
    the transposed product when ``spec.transposed``); ``c`` laid out so that the planned C is
    column-major, the result order the epilogs need (the result takes C's order)."""
    batch = spec.batch_shape
    a, b = _gemm_ready(a, batch), _gemm_ready(b, batch)
    if c is None:
        return a, b, None
    if c.shape != spec.out_shape:
        import cupy
        c = cupy.ascontiguousarray(cupy.broadcast_to(c, spec.out_shape))
    if spec.transposed:
        return a, b, _row_major(c)
    return a, b, _col_major(c)


def _col_major(c):
    """``c`` (planned orientation) with column-major matrices, the result order the epilogs need
    (the result takes C's order): a copy only when ``c`` is not laid out so already."""
    if c is None:
        return None
    s, item = c.strides, c.itemsize
    ok = s[-2] == item and s[-1] >= c.shape[-2] * item
    if ok and c.ndim > 2:
        ok = all(s[i] == s[i + 1] * c.shape[i + 1] for i in range(c.ndim - 3)) and \
            s[-3] == c.shape[-1] * s[-1]
    if ok:
        return c
    import cupy
    return cupy.ascontiguousarray(_t(c)).swapaxes(-1, -2)


def matmul(a, b, bias, c, spec):
    """``act(alpha * a @ b + beta * c + bias)`` on cuBLASLt (CuPy arrays in, CuPy arrays out).

    ``spec.plan`` is the plan an earlier call with the same call key (``_matmul_api`` keeps such
    specs per thread) left there when its operands went to cuBLASLt as given: a repeat then
    goes straight to the launch.
    """
    cc = c if c is not None and spec.beta != 0.0 else None
    beta = spec.beta if cc is not None else 0.0
    plan = spec.plan
    if plan is not None:
        inputs = None if bias is None else {"bias": bias if bias.ndim == 1 else bias.reshape(-1)}
        done = rerun(plan, a, b, cc, spec.transposed, spec.alpha, beta, inputs)
        if done is not None:
            return _forward_result(done, spec) if spec.return_aux else done[0]
    if a.shape[-1] == 0 or a.dtype.kind in _UNFUSABLE_KINDS:
        return _unfused(a, b, bias, c, spec)
    ga, gb, gc = _operands(a, b, cc, spec)
    epilog = _EPILOGS[spec.activation, bias is not None, spec.return_aux]
    inputs = vec = None
    if bias is not None:
        vec = _vector(bias)
        inputs = {"bias": vec}
    plan = lookup(ga, gb, gc, spec.transposed, spec.alpha, beta, epilog, inputs,
                  spec.compute_type, spec.autotune)
    if ga is a and gb is b and gc is cc and (bias is None or vec.data.ptr == bias.data.ptr):
        spec.plan = plan  # the operands as given are the planned ones: repeats may skip to it
    return _forward_result(run(plan, ga, gb, gc, spec.transposed, spec.alpha, beta, inputs),
                           spec)


def _forward_result(done, spec):
    out, extra = done
    if not spec.return_aux:
        return out
    if spec.activation is None:
        return out, None
    return out, MatmulAux(spec.activation, extra[f"{spec.activation}_aux"], spec.transposed,
                          *spec.aux_dims)


def _unfused(a, b, bias, c, spec):
    """Complex (no cuBLASLt epilogs) or ``K == 0``: bias folded into ``C``, or
    :mod:`~gpulinalg.dense._fused_xp` on CuPy arrays."""
    import cupy
    if a.shape[-1] == 0 or spec.activation is not None:
        return _fused_xp.matmul(a, b, bias, c, spec, cupy, pack_bits)
    cc = None
    if bias is not None or (c is not None and spec.beta != 0.0):
        cc = cupy.zeros(spec.out_shape, dtype=a.dtype)
        if c is not None and spec.beta != 0.0:
            cc += spec.beta * c
        if bias is not None:
            cc += bias
    sub = spec.replace(beta=1.0, activation=None)
    a, b, c = _operands(a, b, cc, sub)
    out, _ = gemm(a, b, c, transpose=spec.transposed, alpha=spec.alpha,
                  beta=1.0 if c is not None else 0.0, compute_type=spec.compute_type,
                  autotune=spec.autotune)
    return (out, None) if spec.return_aux else out


def _dz(grad_out, upstream, aux, spec):
    """``(dL/dZ, grad_bias or None)``: DRELU/DGELU(_BGRAD) fused with ``upstream`` when given."""
    import cupy
    if upstream is None:
        g = grad_out
        return _fused_xp.activation_grad(g, aux, spec.activation, cupy, unpack_bits), None
    g1, w = upstream
    fused = spec.activation is not None and g1.dtype.kind not in _UNFUSABLE_KINDS
    if not fused:
        return _fused_xp.activation_grad(cupy.matmul(g1, w), aux, spec.activation, cupy,
                                         unpack_bits), None
    want_bias = spec.bias_form == ("n" if aux.transposed else "m1")
    epilog = "D" + spec.activation.upper() + ("_BGRAD" if want_bias else "")
    batch = spec.batch_shape
    g1, w = _gemm_ready(g1, batch), _gemm_ready(w, batch)
    data = _col_major(aux.data)  # a trip through the host may have made it C-ordered
    dz, extra = gemm(g1, w, transpose=aux.transposed, epilog=epilog,
                     inputs={f"{spec.activation}_aux": data},
                     compute_type=spec.compute_type, autotune=spec.autotune)
    if not want_bias:
        return dz, None
    return dz, _bias_from_bgrad(extra[epilog.lower()], spec.bias_form)


def _bias_from_bgrad(bgrad, form):
    """Sum a per-batch ``(..., L, 1)`` or ``(L,)`` BGRAD output to the bias shape."""
    v = bgrad.reshape(-1, bgrad.shape[-2] if bgrad.ndim > 1 else bgrad.shape[0])
    v = v.sum(axis=0) if v.shape[0] > 1 else v[0]
    return v if form == "n" else v.reshape(-1, 1)


def matmul_backward(grad_out, upstream, a, b, aux, spec):
    """The gradients of :func:`matmul` on cuBLASLt's backward epilogs (CuPy arrays)."""
    import cupy
    if a.dtype.kind in _UNFUSABLE_KINDS or a.shape[-1] == 0 or 0 in spec.out_shape:
        return _fused_xp.matmul_backward(grad_out, upstream, a, b, aux, spec, cupy, unpack_bits)
    dz, grad_bias = _dz(grad_out, upstream, aux, spec)
    dz = dz.astype(a.dtype, copy=False)
    batch = spec.batch_shape
    dz_ready = _gemm_ready(dz, batch)
    a_b, b_b = _gemm_ready(a, batch), _gemm_ready(b, batch)
    form = spec.bias_form if grad_bias is None else None
    # grad_a.T = b @ dz.T; BGRADB sums its B operand (dz.T) over rows: the (M, 1) bias gradient.
    # (BGRADA on grad_a = dz @ b.T would be the direct route; cuBLASLt does not support it here.)
    # BGRADB is run with a row-major B operand (here dz.T: dz column-major), the layout it is
    # known to accept.
    ga, ea = gemm(_col_major(dz_ready) if form == "m1" else dz_ready, _t(b_b), transpose=True,
                  epilog="BGRADB" if form == "m1" else None,
                  compute_type=spec.compute_type, autotune=spec.autotune)
    # grad_b = a.T @ dz; BGRADB sums dz over its rows: the (N,) bias gradient.
    gb, eb = gemm(_t(a_b), _row_major(dz_ready) if form == "n" else dz_ready,
                  epilog="BGRADB" if form == "n" else None,
                  compute_type=spec.compute_type, autotune=spec.autotune)
    if form == "m1":
        grad_bias = _bias_from_bgrad(ea["bgradb"], "m1")
    elif form == "n":
        grad_bias = _bias_from_bgrad(eb["bgradb"], "n")
    grad_a = _fused_xp.unbroadcast(ga, a.shape, cupy).astype(a.dtype, copy=False)
    grad_b = _fused_xp.unbroadcast(gb, b.shape, cupy).astype(a.dtype, copy=False)
    return Gradients(grad_a, grad_b, grad_bias)
