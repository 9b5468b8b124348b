"""GPU engine of the symmetric/Hermitian eigenproblems: cuSOLVER ``Xsyevd`` (all eigenpairs),
``Xsyevdx`` (a subset by index or value), ``<t>sygvd`` / ``<t>sygvdx`` (generalized problems,
``he`` for complex), and ``<t>syevjBatched`` for stacks of matrices up to 32 x 32.

CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.
"""

import math

import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime.errors import LinAlgError
from ..._runtime.validation import check_finite
from .._checks import broadcast_batch, real_dtype
from .._gpu._cusolver_cuda import fortran_batch
from .._gpu._eigen_cuda import SYEVJ_BATCHED_MAX, EigenSolver
from .._results import EighResult
from ._eigh_xp import flip_signs

__all__ = ["eigh", "route"]


def route(n, nb, generalized, subset):
    """The cuSOLVER routine of a call: ``syevjBatched`` for a stack (two or more) of
    standard problems of order at most 32 (one launch for the stack), else one call per
    matrix of ``syevd``, ``syevdx`` (subsets), ``sygvd`` or ``sygvdx``."""
    if generalized:
        return "sygvdx" if subset else "sygvd"
    if subset:
        return "syevdx"
    return "syevjBatched" if nb > 1 and n <= SYEVJ_BATCHED_MAX else "syevd"


def eigh(a, b, lower, eigvals_only, itype, index, value, driver, dtype, overwrite_a=False,
         overwrite_b=False, finite=False):
    """Eigenvalues (ascending) and eigenvectors (deterministic signs) of the CuPy stack ``a``
    (..., n, n), generalized with ``b``; ``driver``, ``overwrite_a`` and ``overwrite_b`` are
    not read (cuSOLVER has one routine per problem; it works on column-major copies)."""
    import cupy
    if finite:  # up front: no eigensolver meets NaN or Inf
        check_finite(a, "a")
        if b is not None:
            check_finite(b, "b")
    n = a.shape[-1]
    batch = broadcast_batch(a.shape[:-2], () if b is None else b.shape[:-2])
    nb = math.prod(batch)
    way = route(n, nb, b is not None, index is not None or value is not None)
    _dispatch.note(routine=way)
    w = fortran_batch(cupy.broadcast_to(a, batch + (n, n)), dtype)
    vals = cupy.empty((nb, n), dtype=real_dtype(dtype))
    vectors = not eigvals_only
    if way == "syevjBatched":
        with EigenSolver(dtype, nb, params=False) as sv:
            sv.syevj_batched(w, vals, vectors, lower)
            codes = sv.check("eigh (syevjBatched)")
        counts = [n] * nb
    else:
        bw = None if b is None else fortran_batch(cupy.broadcast_to(b, batch + (n, n)), dtype)
        value = _finite_bounds(value, dtype)
        with EigenSolver(dtype, nb) as sv:
            counts = [_one(sv, way, i, w[i], None if bw is None else bw[i], vals[i], itype,
                           vectors, lower, index, value) for i in range(nb)]
            codes = sv.check(f"eigh ({way})")
    _raise_failure(codes, n, way, vectors)
    k = _common_count(counts)
    vals = vals[:, :k].reshape(batch + (k,))
    if eigvals_only:
        return vals
    return EighResult(vals, flip_signs(w[:, :, :k].reshape(batch + (n, k)), cupy))


def _one(sv, way, i, w, bw, vals, itype, vectors, lower, index, value):
    """One matrix through ``way``; the number of eigenpairs found."""
    if way == "syevd":
        sv.syevd(w, vals, vectors, lower, i)
        return w.shape[0]
    if way == "syevdx":
        return sv.syevdx(w, vals, vectors, lower, index, value, i)
    if way == "sygvd":
        sv.sygvd(w, bw, vals, itype, vectors, lower, i)
        return w.shape[0]
    return sv.sygvdx(w, bw, vals, itype, vectors, lower, index, value, i)


def _finite_bounds(value, dtype):
    """``(vl, vu]`` with infinite ends replaced by the largest finite numbers of the type."""
    if value is None:
        return None
    big = float(np.finfo(real_dtype(dtype)).max)
    return tuple(min(max(float(x), -big), big) for x in value)


def _common_count(counts):
    if len(set(counts)) > 1:
        raise ValueError("subset_by_value found different numbers of eigenvalues in the "
                         f"matrices of the batch ({sorted(set(counts))}); the results cannot "
                         "be stacked: call per matrix, or use subset_by_index")
    return counts[0] if counts else 0


def _raise_failure(codes, n, way, vectors):
    """SciPy's ``LinAlgError`` for a positive ``info`` code (the first in the batch)."""
    bad = np.flatnonzero(codes > 0)
    if not bad.size:
        return
    info, at = int(codes[bad[0]]), int(bad[0])
    where = f" (batch entry {at})" if len(codes) > 1 else ""
    if way.startswith("sygv") and info > n:
        raise LinAlgError(f"The leading minor of order {info - n} of B is not positive "
                          "definite. The factorization of B could not be completed and no "
                          f"eigenvalues or eigenvectors were computed{where}.")
    raise LinAlgError(f"eigh ({way}) did not converge{where}: info={info}")
