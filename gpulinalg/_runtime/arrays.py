"""Which package an array comes from, and moving arrays between NumPy, CuPy and torch.

Detection looks only at ``sys.modules``: it never imports CuPy or torch.
"""

import sys
from enum import Enum

import numpy as np

from . import staging as _staging

__all__ = ["Kind", "kind_of", "is_array", "to_host", "to_device", "to_kind", "convert_tree"]


class Kind(str, Enum):
    NUMPY = "numpy"
    CUPY = "cupy"
    TORCH = "torch"


def kind_of(x):
    """Return the :class:`Kind` of array ``x``, or ``None`` when it is not an array.

    Examples
    --------
    >>> import numpy as np
    >>> kind_of(np.ones(3)).value
    'numpy'
    >>> kind_of([1, 2]) is None
    True
    """
    t = type(x)
    try:
        return _KIND_OF_TYPE[t]
    except KeyError:
        pass
    kind = _kind_of_slow(x)
    if kind is not None or t.__module__.split(".")[0] not in _ARRAY_MODULES:
        _KIND_OF_TYPE[t] = kind  # a type's answer never changes: remember it
    return kind


#: type -> Kind (or None) already worked out; the per-call hot path is one dict lookup.
_KIND_OF_TYPE = {np.ndarray: Kind.NUMPY, type(None): None}
_ARRAY_MODULES = frozenset({"cupy", "torch", "cupyx"})


def _kind_of_slow(x):
    if isinstance(x, np.ndarray):
        return Kind.NUMPY
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(x, cupy.ndarray):
        return Kind.CUPY
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return Kind.TORCH
    return None


def is_array(x):
    return kind_of(x) is not None


def on_gpu(x):
    """True when ``x`` lives in GPU memory (a CuPy array or a CUDA torch tensor)."""
    k = kind_of(x)
    return k is _CUPY or (k is _TORCH and x.device.type == "cuda")


def any_on_gpu(values):
    """True when any of ``values`` lives in GPU memory (see :func:`on_gpu`)."""
    for x in values:
        k = kind_of(x)
        if k is _CUPY or (k is _TORCH and x.device.type == "cuda"):
            return True
    return False


_NUMPY, _CUPY, _TORCH = Kind.NUMPY, Kind.CUPY, Kind.TORCH  # globals: faster than Enum lookups


def is_gpu_sparse(x):
    """True for a CuPy (``cupyx.scipy.sparse``) sparse matrix: GPU memory that is not an array
    of :func:`kind_of` (a CUDA torch sparse tensor is a torch array, see :func:`on_gpu`)."""
    csp = sys.modules.get("cupyx.scipy.sparse")
    return csp is not None and bool(csp.issparse(x))


def host_copies(obj):
    """``obj`` with every GPU array and CuPy sparse matrix in it copied to the host (NumPy /
    SciPy sparse); the walk of :func:`convert_tree`."""
    if is_gpu_sparse(obj):
        return obj.get()
    return convert_tree(obj, to_host)


def to_host(x):
    """Return ``x`` as a NumPy array (zero-copy for NumPy and CPU torch tensors)."""
    k = kind_of(x)
    if k is Kind.NUMPY or k is None:
        return x if k else np.asarray(x)
    if k is Kind.CUPY:
        return _cupy_to_host(x)
    x = x.detach()
    x = (x.cpu() if x.device.type != "cpu" else x).resolve_conj()
    if str(x.dtype) == "torch.bfloat16":  # NumPy has no bfloat16: the same bits, as ml_dtypes'
        import torch
        return x.view(torch.int16).numpy().view(bfloat16())
    return x.numpy()


def _cupy_to_host(x):
    """A NumPy copy of CuPy array ``x`` in ``x``'s own layout: C, Fortran, or a stack of
    Fortran-ordered matrices (what LAPACK-style engines return), as SciPy's results have it."""
    if x.ndim > 2 and not x.flags.c_contiguous:
        t = x.swapaxes(-1, -2)
        if t.flags.c_contiguous:
            return t.get().swapaxes(-1, -2)
    return x.get(order="F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C")


def bfloat16():
    """NumPy's bfloat16 dtype, from ml_dtypes (NumPy itself has none)."""
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("bfloat16 arrays on the CPU need the ml_dtypes package "
                        "(pip install ml_dtypes): NumPy has no bfloat16 of its own") from None
    return np.dtype(ml_dtypes.bfloat16)


def to_device(x, stream=None):
    """Return ``x`` as a CuPy array on the current device (zero-copy for CuPy and CUDA torch;
    large host arrays are staged through pinned buffers, see :mod:`.staging`)."""
    k = kind_of(x)
    if k is _CUPY:
        return x
    import cupy
    if k is Kind.TORCH and x.device.type == "cuda":
        return cupy.from_dlpack(x.detach().resolve_conj())
    host = to_host(x)
    out = cupy.empty(host.shape, dtype=host.dtype, order="F" if _is_f_only(host) else "C")
    if not _staging.upload(host, out, stream):
        out.set(host, stream=stream)
    return out


def _is_f_only(a):
    return a.ndim >= 2 and a.flags.f_contiguous and not a.flags.c_contiguous


def to_kind(x, kind, like=None):
    """Move array ``x`` into package ``kind``; ``like`` (an array of that kind) picks the device."""
    if kind is None:
        return x
    k = kind_of(x)
    if k is None or (k is kind and k is not _TORCH):  # not an array, or already where it goes
        return x
    if type(kind) is not Kind:
        kind = Kind(kind)
    if kind is _NUMPY:
        return to_host(x)
    if kind is _CUPY:
        return to_device(x)
    import torch
    device = like.device if like is not None and kind_of(like) is Kind.TORCH else None
    if k is Kind.TORCH:  # a tensor already: at most a move to like's device
        return x if device is None or x.device == device else x.to(device)
    if kind_of(x) is Kind.CUPY:
        t = torch.from_dlpack(x)
        return t if device is None or t.device == device else t.to(device)
    if not x.flags.writeable or any(st < 0 for st in x.strides):  # torch.from_numpy refuses
        x = np.ascontiguousarray(x)
    if x.dtype.name == "bfloat16":  # torch cannot read ml_dtypes' bfloat16: share the bits
        t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(x)
    return t if device is None or device.type == "cpu" else t.to(device)


def convert_tree(obj, fn):
    """Apply ``fn`` to every array in ``obj`` (arrays, tuples incl. NamedTuples, lists, dicts)."""
    if obj is None:
        return None
    if kind_of(obj) is not None:
        return fn(obj)
    if isinstance(obj, tuple):
        items = [_convert_item(v, fn) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [_convert_item(v, fn) for v in obj]
    if isinstance(obj, dict):
        return {k: _convert_item(v, fn) for k, v in obj.items()} if obj else {}
    return obj


#: Types of arguments that are never arrays nor hold any (a call's flags and sizes).
_PLAIN = frozenset({type(None), bool, int, float, complex, str})


def _convert_item(v, fn):
    """One element of a container: leaves (None, plain scalars, arrays) without a recursive
    call."""
    if type(v) in _PLAIN:
        return v
    if _KIND_OF_TYPE.get(type(v)) is not None:
        return fn(v)
    return convert_tree(v, fn)


def caller_kind(*arrays):
    """The package results go back to: the first array argument's (NumPy for array-likes)."""
    for a in arrays:
        k = kind_of(a)
        if k is not None:
            return k, a
    return Kind.NUMPY, None
