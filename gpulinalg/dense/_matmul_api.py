"""The public functions :func:`matmul` and :func:`matmul_backward`: validation, then one call
to the dispatcher with the GPU engine (``_matmul_cuda``) and the CPU engine (``_matmul_host``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime.config import get_config
from .._runtime.dispatch import Op, dispatch, front_door, shortcut
from .._runtime.gradients import differentiable
from . import _matmul_grad  # noqa: F401  (registers the gradient rule)
from .._runtime.validation import check_finite as _check_finite
from . import _calls, _matmul_cuda, _matmul_host, _tensors_cuda
from ._results import Gradients, MatmulAux
from ._spec import ACTIVATIONS, COMPUTE_TYPES, WORKSPACE_LIMIT, Spec, aux_shape

__all__ = ["matmul", "matmul_backward"]

DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "complex64", "complex128"})
_dtype_names: dict = {}
#: Byte-swapped (non-native) NumPy dtypes met so far: their arrays are converted to native
#: byte order before anything runs, as every other family does (``>f8`` is float64).
_SWAPPED: set = set()


def _dtype_name(x):
    dt = x.dtype
    name = _dtype_names.get(dt)
    if name is None:
        name = _dtype_names[dt] = _name_of(dt)
    return name


def _name_of(dt):
    """The name of dtype ``dt`` in :data:`DTYPES`' spelling (``>f8`` is ``float64``)."""
    if isinstance(dt, np.dtype) and not dt.isnative:
        _SWAPPED.add(dt)
        dt = dt.newbyteorder("=")
    return str(dt).replace("torch.", "")


def _native(x):
    """``x`` in native byte order (a copy only for a byte-swapped NumPy array)."""
    if type(x) is np.ndarray and x.dtype in _SWAPPED:
        return x.astype(x.dtype.newbyteorder("="))
    return x


def _arrays_of(named):
    """Check every given array: one package, supported dtype, one dtype. Returns the dtype name."""
    kind = dtype = first = None
    for name, x in named:
        if x is None:
            continue
        if isinstance(x, np.ma.MaskedArray):  # its mask would be dropped silently
            raise ValueError(f"masked arrays are not supported ({name})")
        k = _arrays.kind_of(x)
        if k is None:
            raise TypeError(f"{name} must be a NumPy, CuPy or torch array, got {type(x).__name__}")
        dt = _dtype_name(x)
        if kind is None:
            kind, dtype, first = k, dt, name
            if dt not in DTYPES:
                raise TypeError(f"{name} has dtype {dt}; supported: {', '.join(sorted(DTYPES))}")
        elif k is not kind:
            raise TypeError(f"{name} is a {k.value} array but {first} is a {kind.value} array; "
                            "pass arrays of one package")
        elif dt != dtype:
            raise TypeError(f"{name} has dtype {dt} but {first} has dtype {dtype}; "
                            "cast them to one dtype")
    return dtype


def _coerce(x):
    """Lists and scalars become NumPy arrays (the array types pass through untouched)."""
    if x is None or _arrays.kind_of(x) is not None:
        return x
    return np.asarray(x)


def _shapes(a, b):
    """``(batch_shape, M, K, N)``, raising ``ValueError`` with the shapes when they disagree."""
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul needs a (..., M, K) and b (..., K, N), got shapes "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    sa, sb = tuple(a.shape), tuple(b.shape)
    if sa[-1] != sb[-2]:
        raise ValueError(f"matmul: a has K={sa[-1]} (shape {sa}) but b has K={sb[-2]} "
                         f"(shape {sb})")
    ba, bb = sa[:-2], sb[:-2]
    if ba == bb or not bb:
        batch = ba
    elif not ba:
        batch = bb
    else:
        try:
            batch = np.broadcast_shapes(ba, bb)
        except ValueError:
            raise ValueError(f"matmul: batch shapes {ba} of a and {bb} of b do not broadcast") \
                from None
    return batch, sa[-2], sa[-1], sb[-1]


def _bias_form(bias, m, n):
    if bias is None:
        return None
    shape = tuple(bias.shape)
    if shape == (n,):
        return "n"
    if shape == (m, 1):
        return "m1"
    raise ValueError(f"bias must have shape (N,) = ({n},) or (M, 1) = ({m}, 1), got {shape}")


def _options(activation, compute_type, dtype):
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of None, 'relu', 'gelu', got {activation!r}")
    if activation is not None and dtype.startswith("complex"):
        raise ValueError(f"activation={activation!r} needs real inputs, got dtype {dtype}")
    if compute_type is not None and compute_type not in COMPUTE_TYPES:
        raise ValueError(f"compute_type must be None or one of {sorted(COMPUTE_TYPES)}, "
                         f"got {compute_type!r}")


def _scalar(v, name, dtype):
    if type(v) is float and dtype[0] != "c":  # the usual case
        return v
    if dtype.startswith("complex"):
        return complex(v)
    if isinstance(v, complex):
        raise TypeError(f"{name}={v!r} is complex but the inputs are {dtype}")
    return float(v)


def _nbytes(*arrays):
    return sum([x.nbytes for x in arrays if x is not None])


def _estimate(array_bytes):
    """Peak device bytes: the arrays plus cuBLASLt's workspace, which small products keep small
    (the figure also prices the host-to-GPU trip, so it must not be dominated by the cap)."""
    return array_bytes + min(WORKSPACE_LIMIT, array_bytes)


def _size(shape):
    size = 1
    for n in shape:
        size *= n
    return size


@differentiable("dense.matmul")
@front_door("dense.matmul")
def matmul(a: Any, b: Any, *, bias: Any = None, activation: Literal["relu", "gelu"] | None = None,
           alpha: float | complex = 1.0, c: Any = None, beta: float | complex = 0.0,
           return_aux: bool = False, compute_type: str | None = None,
           autotune: bool | None = None, check_finite: bool = False
           ) -> Any | tuple[Any, MatmulAux | None]:
    """Fused ``act(alpha * a @ b + beta * c + bias)``: cuBLASLt epilogs on the GPU, NumPy on CPU.

    Parameters
    ----------
    a : (..., M, K) array
    b : (..., K, N) array
        Batch dimensions broadcast as in ``numpy.matmul``. NumPy, CuPy or torch arrays (all of
        one package); float16, bfloat16, float32, float64, complex64 or complex128 (one dtype).
    bias : (N,) or (M, 1) array, optional
        ``(N,)`` adds to every row, as in ``a @ b + bias``; ``(M, 1)`` adds per row.
    activation : {None, "relu", "gelu"}
        GELU is the tanh approximation cuBLASLt computes,
        ``0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z**3)))``, on both backends (cuBLASLt
        evaluates it to about 1e-10 relative, also for float64).
    alpha, beta : float
        Scale the product and ``c``. With ``beta == 0`` ``c`` is not read (as in cuBLAS).
    c : (..., M, N) array, optional
        Broadcast to the result's shape.
    return_aux : bool
        Also return what :func:`matmul_backward` needs (:class:`MatmulAux`: cuBLASLt's ReLU
        bit-mask or the GELU pre-activation, in the same layout on both backends; ``None``
        without an activation).
    compute_type : str, optional
        float32 computes in full float32 unless this asks otherwise: ``"tf32"``, ``"fast_fp16"``,
        ``"fast_bf16"``; also ``"fp16"`` (half accumulation for float16), ``"pedantic"``. The CPU
        ignores it.
    autotune : bool, optional
        Time cuBLASLt's candidate algorithms when the plan is made; the winner is cached with the
        plan. Default: ``gpulinalg.get_config().autotune``.
    check_finite : bool, default False
        Raise ``ValueError`` when an input holds NaN or Inf (one reduction per input). Off by
        default, unlike SciPy's solvers: see Notes.

    Returns
    -------
    out : (..., M, N) array
        In the inputs' package and dtype.
    aux : MatmulAux or None
        Only with ``return_aux=True``.

    See Also
    --------
    matmul_backward : the gradients, from the aux this returns.
    plan_cache_info, clear_plan_cache : the per-thread cache of cuBLASLt plans.

    Notes
    -----
    On the GPU, a NumPy-shaped bias of shape ``(N,)`` is served by planning the transposed
    product ``b.T @ a.T`` (cuBLASLt adds its bias per row of the column-major result); no operand
    is copied. Plans are cached per thread, keyed by shapes, strides, dtypes, pointer
    alignments, epilog, compute type, autotuning and device; repeated calls on CuPy arrays or
    torch tensors of the same layout also skip validation and, while the dispatcher's GPU
    decision holds (same settings, GPU healthy), the decision itself. Half-precision inputs
    are computed in float32 and rounded once, on both backends.

    **NaN and Inf propagate by default.** ``check_finite`` defaults to ``False``, as in
    ``numpy.matmul``, ``cupy.matmul`` and ``torch.matmul``: NaN or Inf in ``a``, ``b``,
    ``bias`` or a used ``c`` give NaN/Inf in the result (IEEE arithmetic, on both backends),
    without an error or a warning. A check would read every input once more (a reduction as
    large as the inputs, and a device-to-host synchronization for its answer) on every call,
    which costs more than the product itself for the small products of a training step. Pass
    ``check_finite=True`` to get SciPy's ``ValueError`` instead. With ``beta == 0``, ``c`` is
    not read at all, so NaN in an unused ``c`` does not propagate (as in cuBLAS).

    Byte-swapped NumPy inputs (``'>f8'`` on a little-endian machine) are converted to native
    byte order first; the result is native. A product that needs no arithmetic (a zero-sized
    result, or ``K == 0`` without ``bias`` and ``c``) is answered without running anything:
    :func:`gpulinalg.last_run` then reports backend ``"none"``.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.dense import matmul
    >>> rng = np.random.default_rng(0)
    >>> a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    >>> bias = rng.standard_normal(5)
    >>> np.allclose(matmul(a, b, bias=bias, activation="relu"), np.maximum(a @ b + bias, 0))
    True

    NaN propagates unless ``check_finite=True`` asks for the check:

    >>> a[0, 0] = np.nan
    >>> bool(np.isnan(matmul(a, b)[0]).all())
    True
    >>> matmul(a, b, check_finite=True)
    Traceback (most recent call last):
    ...
    ValueError: a must not contain infs or NaNs
    """
    key = None if check_finite else _key(a, b, bias, c, activation, alpha, beta, return_aux,
                                         compute_type, autotune)
    return dispatch(plan, a, b, bias, c, activation, alpha, beta, return_aux, compute_type,
                    autotune, check_finite, key=key, lead=(a, b, bias, c))


def plan(a, b, bias, c, activation, alpha, beta, return_aux, compute_type, autotune,
         check_finite):
    """Validate a :func:`matmul` call; its :class:`~gpulinalg._runtime.dispatch.Op` (arguments
    ``(a, b, bias, c, spec)``), or the answer of a product that needs no arithmetic."""
    tune = _tune(autotune, get_config())
    a, b, bias, c = _coerce(a), _coerce(b), _coerce(bias), _coerce(c)
    dtype = _arrays_of((("a", a), ("b", b), ("bias", bias), ("c", c)))
    if _SWAPPED:  # only once a byte-swapped array was ever seen
        a, b, bias, c = _native(a), _native(b), _native(bias), _native(c)
    _options(activation, compute_type, dtype)
    batch, m, k, n = _shapes(a, b)
    out_shape = (*batch, m, n)
    form = _bias_form(bias, m, n)
    if c is not None and beta != 0.0:
        try:
            np.broadcast_shapes(tuple(c.shape), out_shape)
        except ValueError:
            raise ValueError(f"c of shape {tuple(c.shape)} does not broadcast to the result's "
                             f"shape {out_shape}") from None
    if check_finite:
        for name, x in (("a", a), ("b", b), ("bias", bias), ("c", c)):
            if x is not None:
                _check_finite(x, name)
    spec = Spec(activation, _scalar(alpha, "alpha", dtype), _scalar(beta, "beta", dtype),
                bool(return_aux), compute_type, tune, form, form != "m1", out_shape, batch)
    if 0 in out_shape:
        return shortcut("dense.matmul", _zeros(a, spec))
    if k == 0 and bias is None and (c is None or spec.beta == 0.0):
        return shortcut("dense.matmul", _zeros(a, spec), "K = 0: the product is zero")
    size = _size(out_shape)
    arrays = a.nbytes + b.nbytes + (0 if bias is None else bias.nbytes) + \
        (0 if c is None else c.nbytes)
    nbytes, flops = _estimate(arrays + 2 * size * a.itemsize), 2.0 * size * k
    args = (a, b, bias, c, spec)
    if _cuda_tensors(a, b, bias, c):  # the torch engine (torch's stream and allocator), no moves
        return Op("dense.matmul", _tensors_cuda.matmul, _host_matmul_tensors, args,
                  nbytes=nbytes, flops=flops, same_package=True, own_stream=False, convert=False)
    return Op("dense.matmul", _matmul_cuda.matmul, _matmul_host.matmul, args, nbytes=nbytes,
              # the product, the epilog's temporaries (GELU's tanh form and its aux: 3), a mask
              host_nbytes=(4 if activation == "gelu" else 2) * size * a.itemsize
              + (size if return_aux else 0),
              flops=flops, same_package=True, own_stream=False)


#: torch's tensor types once torch is imported (``_calls`` fills this set; shared, not copied).
_tensor_types = _calls._tensor_types
#: torch's complex dtypes (filled with the first torch key): only their tensors can carry the
#: conjugate bit (torch asserts that a real tensor's is clear), so only theirs is read.
_COMPLEX: set = set()
#: The pointer bits a key holds (``_calls``'s alignment: that of the plan cache's key).
_ALIGN = 255


def _key(a, b, bias, c, activation, alpha, beta, return_aux, compute_type, autotune):
    """``_calls.call_key(...)``: the same key (``FusedLinear`` finds the entries of ``matmul``
    by it), built in this one frame for torch tensors (a tensor's conjugate bit read only for
    complex dtypes: it is ``False`` for every real tensor) and for CuPy arrays without ``c``.
    Everything else goes to ``_calls.call_key``."""
    types = _tensor_types
    if type(a) not in types:
        nd = _calls._ndarray  # [cupy.ndarray] once resolved (by call_key)
        if nd and type(a) is nd[0] and type(b) is nd[0] and c is None:
            if bias is not None:
                if type(bias) is not nd[0]:
                    return None
                vd = bias.data
                bias = (bias.shape, bias.strides, bias.dtype, vd.ptr & 255, vd.device_id)
            ad, bd = a.data, b.data
            return (a.shape, a.strides, a.dtype, ad.ptr & 255, ad.device_id,
                    b.shape, b.strides, b.dtype, bd.ptr & 255, bd.device_id, bias, None,
                    activation, type(alpha), alpha, type(beta), beta, return_aux, compute_type,
                    autotune)
        return _calls.call_key(a, b, bias, c, activation, alpha, beta, return_aux, compute_type,
                               autotune)
    if type(b) not in types or bias is not None and type(bias) not in types \
            or c is not None and type(c) not in types:
        return None
    cplx, align = _COMPLEX or _complex_dtypes(), _ALIGN
    da, db = a.dtype, b.dtype
    if bias is not None:
        dv = bias.dtype
        bias = (bias.shape, bias.stride(), dv, bias.data_ptr() & align, bias.get_device(),
                dv in cplx and bias.is_conj())
    return (a.shape, a.stride(), da, a.data_ptr() & align, a.get_device(),
            da in cplx and a.is_conj(),
            b.shape, b.stride(), db, b.data_ptr() & align, b.get_device(),
            db in cplx and b.is_conj(), bias, None if c is None else _calls._torch_layout(c),
            (activation, type(alpha), alpha, type(beta), beta, return_aux, compute_type,
             autotune))


def _complex_dtypes():
    import torch
    _COMPLEX.update((torch.complex32, torch.complex64, torch.complex128))
    return _COMPLEX


def _tune(autotune, settings):
    """The call's autotuning: ``True``/``False`` as asked (argument, else the config's ``True``);
    ``"auto"`` when nobody asked (the GPU engine then tunes only the epilogs listed in
    ``_plans_cuda.AUTO_TUNED``)."""
    if autotune is None:
        return True if settings.autotune else "auto"
    return bool(autotune)


def _cuda_tensors(*xs):
    """True when every given array is an unconjugated CUDA torch tensor, all on one device."""
    dev = None
    for x in xs:
        if x is None:
            continue
        if _arrays.kind_of(x) is not _arrays.Kind.TORCH or not x.is_cuda or x.is_conj():
            return False
        d = x.get_device()
        if dev is None:
            dev = d
        elif d != dev:
            return False
    return True


def _on_host(fn):
    """``fn`` (a CPU engine) for the torch route's fallback: CUDA tensors in and out."""
    def run(*args):
        like = args[0] if args[0] is not None else args[2]
        result = fn(*_arrays.convert_tree(args, _arrays.to_host))
        return _arrays.convert_tree(result, lambda x: _arrays.to_kind(x, _arrays.Kind.TORCH,
                                                                       like))
    return run


_host_matmul_tensors = _on_host(_matmul_host.matmul)
_host_backward_tensors = _on_host(_matmul_host.matmul_backward)


def _zeros(a, spec):
    """The answer of a product that needs no arithmetic, in ``a``'s package and on its device:
    a zero-sized result, or ``act(0) = 0`` when ``K == 0`` without bias or ``c`` (its aux then
    says ``Z = 0`` everywhere: no ReLU bit set, a zero GELU pre-activation)."""
    with _device_of(a):
        return _zeros_here(a, spec)


def _device_of(a):
    """A context on the GPU of CuPy array ``a`` (results go there, not to the current GPU)."""
    return a.device if _arrays.kind_of(a) is _arrays.Kind.CUPY else contextlib.nullcontext()


def _zeros_here(a, spec):
    out = _arrays.to_kind(np.zeros(spec.out_shape, dtype=_host_dtype(a)), _arrays.kind_of(a), a)
    if not spec.return_aux:
        return out
    if spec.activation is None:
        return out, None
    rows, cols = spec.aux_dims
    pr, pc = aux_shape(spec.activation, rows, cols)
    dt = np.uint8 if spec.activation == "relu" else _host_dtype(a)
    data = np.swapaxes(np.zeros((*spec.batch_shape, pc, pr), dtype=dt), -1, -2)
    aux = MatmulAux(spec.activation, _arrays.to_kind(data, _arrays.kind_of(a), a),
                    spec.transposed, rows, cols)
    return out, aux


def _host_dtype(a):
    if _arrays.kind_of(a) is _arrays.Kind.TORCH:
        import torch
        if a.dtype == torch.bfloat16:  # NumPy has none: ml_dtypes' (the bits torch shares)
            return _arrays.bfloat16()
        return torch.empty(0, dtype=a.dtype).numpy().dtype
    return np.dtype(a.dtype)


@differentiable("dense.matmul_backward")
@front_door("dense.matmul_backward")
def matmul_backward(grad_out: Any, a: Any, b: Any, *, aux: MatmulAux | None = None,
                    activation: Literal["relu", "gelu"] | None = None,
                    bias: bool | Literal["column"] = False, compute_type: str | None = None,
                    autotune: bool | None = None) -> Gradients:
    """Gradients of :func:`matmul`'s ``act(a @ b + bias)`` with cuBLASLt's backward epilogs.

    Parameters
    ----------
    grad_out : (..., M, N) array, or a pair ``(g, w)``
        ``dL/d(out)``. A pair means ``dL/d(out) = g @ w`` (the gradient arriving through the next
        linear layer): on the GPU that product then runs fused with the DRELU/DGELU (and
        ``_BGRAD``) epilog instead of a separate elementwise pass.
    a, b : arrays
        The forward operands.
    aux : MatmulAux, optional
        From ``matmul(..., return_aux=True)``; required with an activation.
    activation : {None, "relu", "gelu"}
        The forward activation (must match ``aux``).
    bias : bool or {"column"}
        Whether the forward had a bias: ``True`` for shape ``(N,)`` (``(M, 1)`` when ``aux``
        says the forward used that form), ``"column"`` for ``(M, 1)``. On the GPU the bias
        gradient comes from the BGRADB epilog (of ``a.T @ dz`` for ``(N,)``, of the
        transposed ``b @ dz.T`` for ``(M, 1)``), or from
        DRELU_BGRAD/DGELU_BGRAD with a ``(g, w)`` pair.
    compute_type, autotune
        As in :func:`matmul`.

    Returns
    -------
    Gradients
        ``(grad_a, grad_b, grad_bias)``; ``grad_bias`` is ``None`` when ``bias=False``.

    See Also
    --------
    matmul : the forward pass (``return_aux=True`` gives ``aux``).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.dense import matmul, matmul_backward
    >>> rng = np.random.default_rng(1)
    >>> a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    >>> bias = rng.standard_normal(5)
    >>> out, aux = matmul(a, b, bias=bias, activation="relu", return_aux=True)
    >>> g = np.ones_like(out)
    >>> grads = matmul_backward(g, a, b, aux=aux, activation="relu", bias=True)
    >>> np.allclose(grads.grad_bias, ((a @ b + bias) > 0).sum(axis=0))
    True
    """
    key = None if aux is not None else _calls.backward_key(grad_out, a, b, activation, bias,
                                                           compute_type, autotune)
    return dispatch(plan_backward, grad_out, a, b, aux, activation, bias, compute_type, autotune,
                    key=key, lead=(grad_out, None, a, b, None))


def plan_backward(grad_out, a, b, aux, activation, bias, compute_type, autotune):
    """Validate a :func:`matmul_backward` call; its :class:`~gpulinalg._runtime.dispatch.Op`
    (arguments ``(grad_out, upstream, a, b, aux, spec)``), or the answer of an empty one."""
    tune = _tune(autotune, get_config())
    upstream = None
    if isinstance(grad_out, (tuple, list)):
        upstream, grad_out = (_coerce(grad_out[0]), _coerce(grad_out[1])), None
    a, b, grad_out = _coerce(a), _coerce(b), _coerce(grad_out)
    pairs: tuple = (("grad_out", grad_out), ("a", a), ("b", b))
    if upstream is not None:
        pairs += (("grad_out[0]", upstream[0]), ("grad_out[1]", upstream[1]))
    if aux is not None:
        pairs += (("aux.data", aux.data if aux.activation == "gelu" else None),)
    dtype = _arrays_of(pairs)
    if _SWAPPED:
        a, b, grad_out = _native(a), _native(b), _native(grad_out)
        if upstream is not None:
            upstream = (_native(upstream[0]), _native(upstream[1]))
    _options(activation, compute_type, dtype)
    batch, m, k, n = _shapes(a, b)
    out_shape = (*batch, m, n)
    g_shape = tuple(grad_out.shape) if upstream is None else _shapes(*upstream)[0] + (
        upstream[0].shape[-2], upstream[1].shape[-1])
    if g_shape != out_shape:
        raise ValueError(f"grad_out has shape {g_shape}, expected the forward result's "
                         f"shape {out_shape}")
    form = _backward_bias_form(bias, aux)
    if activation is not None:
        _check_aux(aux, activation, m, n)
    spec = Spec(activation=activation, alpha=1.0, beta=0.0, return_aux=False,
                compute_type=compute_type, autotune=tune,
                bias_form=form, transposed=True if aux is None else aux.transposed,
                out_shape=out_shape, batch_shape=batch)
    if 0 in out_shape:
        with _device_of(a):
            return shortcut("dense.matmul_backward", _zero_grads(a, b, form, m, n))
    size = _size(out_shape)
    nbytes = _estimate(_nbytes(a, b, grad_out) * 3 + 2 * size * a.itemsize)
    tensors = _cuda_tensors(a, b, grad_out, *(upstream or ()),
                            None if aux is None else aux.data)
    args = (grad_out, upstream, a, b, aux, spec)
    if tensors:
        return Op("dense.matmul_backward", _tensors_cuda.matmul_backward, _host_backward_tensors,
                  args, nbytes=nbytes, flops=4.0 * size * k, own_stream=False, convert=False)
    return Op("dense.matmul_backward", _matmul_cuda.matmul_backward,
              _matmul_host.matmul_backward, args, nbytes=nbytes, flops=4.0 * size * k,
              own_stream=False)


def _zero_grads(a, b, form, m, n):
    """The gradients when the result is empty (nothing reaches ``a``, ``b`` or the bias)."""
    kind, dt = _arrays.kind_of(a), _host_dtype(a)

    def zeros(shape):
        return _arrays.to_kind(np.zeros(shape, dtype=dt), kind, a)
    grad_bias = None if form is None else zeros((n,) if form == "n" else (m, 1))
    return Gradients(zeros(tuple(a.shape)), zeros(tuple(b.shape)), grad_bias)


def _backward_bias_form(bias, aux):
    if bias is False or bias is None:
        return None
    if bias == "column":
        return "m1"
    if bias is True:
        return "n" if aux is None or aux.transposed else "m1"
    raise ValueError(f"bias must be True, False or 'column', got {bias!r}")


def _check_aux(aux, activation, m, n):
    if not isinstance(aux, MatmulAux):
        raise ValueError(f"activation={activation!r} needs the aux of the forward pass "
                         f"(matmul(..., return_aux=True)), got {type(aux).__name__}")
    if aux.activation != activation:
        raise ValueError(f"aux was made for activation={aux.activation!r}, not {activation!r}")
    expect = (n, m) if aux.transposed else (m, n)
    if (aux.rows, aux.cols) != expect:
        raise ValueError(f"aux describes a {aux.rows}x{aux.cols} product, expected "
                         f"{expect[0]}x{expect[1]}")
