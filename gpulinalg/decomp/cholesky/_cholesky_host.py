"""CPU engine of Cholesky: LAPACK ``potrf``/``potrs`` through SciPy, looped over batches; the twin
of :mod:`._cholesky_cuda`. With the other families' ``_host`` modules this is decomp's internal
layer: no validation, no dispatch (``gp`` calls it through :mod:`gpulinalg.decomp._engines`)."""

import numpy as np

from ..._runtime.errors import NotPositiveDefiniteError
from ..._runtime.validation import check_finite
from .._checks import batched_solve, writable
from ..triangular._triangular_host import trcon
from ..triangular._triangular_xp import check_conditioning_host, rhs_scale_host
from ._cholesky_xp import check_potrf, logdet

__all__ = ["cholesky", "cho_solve", "logdet", "tile_potrf", "TWO_THREAD_LIMIT"]

#: Largest order that OpenBLAS's ``potrf`` factors on exactly two threads without crashing: its
#: two-thread path (``dpotrf_L_parallel``) segfaults at order 20000 (OpenBLAS 0.3.30, in both
#: SciPy's and NumPy's wheels; OpenBLAS issue 2562), not at one thread or at 16384.
TWO_THREAD_LIMIT = 16384


def _potrf_threads(n):
    """A context in which OpenBLAS's ``potrf`` of order ``n`` runs on one thread where it would
    run on exactly two past :data:`TWO_THREAD_LIMIT` (through threadpoolctl, which scikit-learn
    installs); a null context otherwise."""
    import contextlib
    if n <= TWO_THREAD_LIMIT:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    if not any(p.get("internal_api") == "openblas" and p.get("num_threads") == 2
               for p in threadpool_info()):
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def cholesky(a, lower, overwrite_a, clean, dtype, finite=False):
    """LAPACK ``potrf`` of each matrix of ``a``; raises as :func:`._cholesky_xp.check_potrf`.
    ``finite``: SciPy's ``check_finite`` of ``a`` (left to the engine by the api for GPU
    input, which reaches this engine only on a fallback)."""
    from scipy.linalg import get_lapack_funcs
    if finite:
        check_finite(a, "a")
    a = np.asarray(a, dtype=dtype)
    if a.ndim == 2:
        potrf, = get_lapack_funcs(("potrf",), (a,))
        with _potrf_threads(a.shape[-1]):
            c, info = potrf(a, lower=lower, overwrite_a=writable(a, overwrite_a), clean=clean)
        check_potrf(info, c, a, lower, np.may_share_memory(c, a), None, np, finite)
        return c
    out = a if writable(a, overwrite_a) else np.empty_like(a)
    batch = a.shape[:-2]
    with _potrf_threads(a.shape[-1]):
        for flat, idx in enumerate(np.ndindex(*batch)):
            potrf, = get_lapack_funcs(("potrf",), (a[idx],))
            c, info = potrf(a[idx], lower=lower, overwrite_a=False, clean=clean)
            check_potrf(info, c, a[idx], lower, False, (flat, batch), np, finite)
            out[idx] = c
    return out


def cho_solve(c, lower, b, overwrite_b, dtype, check=False, finite=False):
    """LAPACK ``potrs`` with the factor ``c``; with ``check``, the conditioning rule of
    :func:`._triangular_xp.check_conditioning` (``a = c^H c`` squares ``c``'s bound);
    ``finite``: SciPy's ``check_finite`` of ``c`` and ``b``."""
    from scipy.linalg import get_lapack_funcs
    if finite:
        check_finite(c, "c")
        check_finite(b, "b")
    c, b = np.asarray(c, dtype=dtype), np.asarray(b, dtype=dtype)
    scale = rhs_scale_host(b) if check else None  # before overwrite_b may destroy b
    if c.ndim == 2 and b.ndim <= 2:
        potrs, = get_lapack_funcs(("potrs",), (c, b))
        x, info = potrs(c, b, lower=lower, overwrite_b=writable(b, overwrite_b))
    else:
        x = batched_solve(lambda cc, bb: cho_solve(cc, lower, bb, False, dtype), c, b)
    if check:
        check_conditioning_host(c, scale, x, False, squared=True,
                           estimate=lambda: trcon(c, lower, False, 0, squared=True))
    return x


def tile_potrf(x, offset):
    """Dask tile task: lower Cholesky factor of the diagonal tile ``x`` whose first row is row
    ``offset`` of the whole matrix; a failure names the leading minor of the whole matrix."""
    from scipy.linalg import get_lapack_funcs
    if x.shape[0] == 0:
        return x.copy()
    potrf, = get_lapack_funcs(("potrf",), (x,))
    c, info = potrf(x, lower=True, overwrite_a=False, clean=True)
    if info < 0:
        raise ValueError(f"potrf rejected argument {-info}")
    bad = np.flatnonzero(~np.isfinite(np.diagonal(c)))
    if info > 0 or bad.size:  # NaN on the diagonal: never hand back a silent NaN factor
        raise NotPositiveDefiniteError(offset + (info if info > 0 else int(bad[0]) + 1))
    return c
