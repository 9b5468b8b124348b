"""CPU engine of the symmetric/Hermitian eigenproblems: SciPy's ``eigh`` over the broadcast
batch; the twin of :mod:`._eigh_cuda`."""

import numpy as np

from ..._runtime.errors import LinAlgError
from ..._runtime.validation import check_finite
from .._checks import broadcast_batch, sub, writable
from .._results import EighResult
from ._eigh_xp import flip_signs

__all__ = ["eigh", "stack_counted"]


def eigh(a, b, lower, eigvals_only, itype, index, value, driver, dtype, overwrite_a=False,
         overwrite_b=False, finite=False):
    """SciPy's ``eigh`` of every matrix of ``a`` (with ``b``'s: the generalized problem of
    type ``itype``), eigenvectors with deterministic signs; ``index``/``value``: SciPy's
    ``subset_by_index``/``subset_by_value``; ``finite``: SciPy's ``check_finite``."""
    import scipy.linalg
    if finite:
        check_finite(a, "a")
        if b is not None:
            check_finite(b, "b")
    a = np.asarray(a, dtype=dtype)
    b = None if b is None else np.asarray(b, dtype=dtype)
    single = a.ndim == 2 and (b is None or b.ndim == 2)
    kwargs = dict(lower=lower, eigvals_only=eigvals_only, check_finite=False,
                  overwrite_a=writable(a, overwrite_a) and single,
                  overwrite_b=b is not None and writable(b, overwrite_b) and single,
                  subset_by_index=index, subset_by_value=value, driver=driver)
    if b is not None:
        kwargs["type"] = itype
    batch = broadcast_batch(a.shape[:-2], () if b is None else b.shape[:-2])
    try:
        if single:
            out = scipy.linalg.eigh(a, b, **kwargs)
        else:
            out = stack_counted([scipy.linalg.eigh(sub(a, idx, 2), None if b is None else
                                                   sub(b, idx, 2), **kwargs)
                                 for idx in np.ndindex(*batch)], batch, np)
    except np.linalg.LinAlgError as exc:  # SciPy's, as gpulinalg's (a subclass) on both engines
        if isinstance(exc, LinAlgError):
            raise
        raise LinAlgError(str(exc)) from exc
    if eigvals_only:
        return out
    w, v = out
    return EighResult(w, flip_signs(v, np))


def stack_counted(items, batch, xp):
    """Stack the per-matrix results of a batch (arrays, or ``(w, v)`` pairs); ``ValueError``
    when a subset by value found different numbers of eigenvalues in different matrices."""
    pairs = isinstance(items[0], tuple)
    counts = {int((it[0] if pairs else it).shape[-1]) for it in items}
    if len(counts) > 1:
        raise ValueError("subset_by_value found different numbers of eigenvalues in the "
                         f"matrices of the batch ({sorted(counts)}); the results cannot be "
                         "stacked: call per matrix, or use subset_by_index")
    if not pairs:
        return xp.stack(items).reshape(batch + items[0].shape)
    w = xp.stack([it[0] for it in items]).reshape(batch + items[0][0].shape)
    v = xp.stack([it[1] for it in items]).reshape(batch + items[0][1].shape)
    return w, v
