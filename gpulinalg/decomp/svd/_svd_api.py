"""Full singular value decomposition: validation and one dispatch to :mod:`._svd_cuda`
(cuSOLVER ``Xgesvd``, ``Xgesvdp`` or ``gesvdj``, with a QR step first for tall or wide
matrices) or :mod:`._svd_host` (SciPy)."""

from typing import Any, Literal

import numpy as np

from ..._runtime import dispatch as _dispatch
from ..._runtime.arrays import on_gpu
from ..._runtime.budget import nbytes_of
from ..._runtime.gradients import differentiable
from . import _svd_host
from . import _svd_cuda
from . import _svd_grad  # noqa: F401  (registers the gradient rules)
from ..qr import _tsqr_dask
from .._checks import check_dask, empty_result, flag, flops_scale, is_dask, prepare, real_dtype
from .._gpu._cusolver_cuda import workspace_bytes
from .._results import SVDResult
from ._svd_drivers import resolve_driver

__all__ = ["svd"]

LAPACK_DRIVERS = ("gesdd", "gesvd")


@differentiable("decomp.svd")
@_dispatch.front_door("decomp.svd")
def svd(a: Any, full_matrices: bool = True, compute_uv: bool = True, overwrite_a: bool = False,
        check_finite: bool = True, lapack_driver: Literal["gesdd", "gesvd"] = "gesdd", *,
        driver: Literal["auto", "gesvd", "gesvdj", "gesvdp"] = "auto") -> SVDResult | Any:
    """Singular value decomposition ``a = U @ diag(S) @ Vh`` of a matrix or a batch, as SciPy's.

    Parameters
    ----------
    a : (..., M, N) array_like
    full_matrices : bool, default True
        ``True``: U is (..., M, M) and Vh (..., N, N); else (..., M, K) and (..., K, N),
        ``K = min(M, N)``.
    compute_uv : bool, default True
        ``False`` returns the singular values alone.
    overwrite_a : bool, default False
        Allow the CPU engine to reuse ``a``'s memory (the GPU engine always works on a copy).
    check_finite : bool, default True
        Raise ``ValueError`` if ``a`` holds NaN or Inf.
    lapack_driver : {"gesdd", "gesvd"}, default "gesdd"
        LAPACK routine of the CPU engine (divide and conquer, or QR iteration). On the GPU,
        ``"gesvd"`` with ``driver="auto"`` selects cuSOLVER's ``gesvd`` too (cuSOLVER has no
        divide-and-conquer SVD, so ``"gesdd"`` leaves the choice to ``driver``).
    driver : {"auto", "gesvd", "gesvdj", "gesvdp"}, default "auto"
        cuSOLVER kernel on the GPU (not read on the CPU): ``gesvd`` (QR iteration),
        ``gesvdj`` (Jacobi), ``gesvdp`` (polar decomposition: for well-conditioned matrices
        only, it is not backward stable when singular values approach zero; the perturbation
        it applies is recorded as ``h_err_sigma`` in :func:`gpulinalg.last_run`). ``auto``
        takes ``gesvdj`` when ``min(M, N) <= 32``; above, ``gesvdp`` with an a-posteriori
        check of backward error and orthogonality, recomputing with ``gesvd`` when the check
        fails (values-only calls use ``gesvd`` below ``min(M, N) = 256``; from there on
        the checked ``gesvdp`` computes the vectors too, and drops them: half the time of
        ``gesvd`` without vectors on an H200). Whatever the driver, a matrix with
        ``max(M, N) >= 1.5 min(M, N)`` is first reduced by QR and the kernel factors the
        small R.

    Returns
    -------
    SVDResult(U, S, Vh), or S alone when ``compute_uv=False``
        ``S`` is real, descending. Signs are deterministic: the largest-magnitude entry of each
        of the first K rows of ``Vh`` is real and positive (``svd_flip`` convention), on both
        backends.

    Raises
    ------
    gpulinalg.LinAlgError
        The SVD did not converge.

    See Also
    --------
    truncated_svd : the leading singular triplets only.
    scipy.linalg.svd : the LAPACK routines behind the CPU engine.

    Notes
    -----
    A deliberate difference from SciPy: the signs are deterministic (the ``svd_flip``
    convention of scikit-learn), so both engines return the same ``U`` and ``Vh`` for
    matrices with distinct singular values; SciPy returns whatever signs LAPACK produced.
    ``U @ diag(S) @ Vh`` and ``S`` are the same.

    A Dask array (2-D, one column of blocks: tall-and-skinny; or one row of blocks:
    short-and-fat) gives lazy Dask arrays, computed by TSQR on the workers (docs/dask.md);
    other chunkings raise ``ValueError``. ``full_matrices=True`` (the default) on a
    non-square Dask array raises ``ValueError``, since it would build an ``M x M`` (or
    ``N x N``) factor: pass ``full_matrices=False``. ``check_finite``, ``lapack_driver`` and
    ``driver`` are not read for Dask input (checking finiteness would compute the graph).

    gpulinalg 0.1 defaulted to
    ``full_matrices=False`` and took the GPU driver as the fourth positional argument; see
    docs/migration/decomp.md.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import svd
    >>> a = np.random.default_rng(0).standard_normal((8, 3))
    >>> u, s, vh = svd(a)
    >>> u.shape, s.shape, vh.shape
    ((8, 8), (3,), (3, 3))
    >>> bool(np.allclose(u[:, :3] * s @ vh, a)), bool(np.allclose(s, np.linalg.svd(a)[1]))
    (True, True)
    >>> svd(a, full_matrices=False).U.shape
    (8, 3)
    """
    if not isinstance(lapack_driver, str):
        raise TypeError(f"lapack_driver must be a string, got {type(lapack_driver).__name__}")
    if lapack_driver not in LAPACK_DRIVERS:
        raise ValueError(f'lapack_driver must be "gesdd" or "gesvd", not "{lapack_driver}"')
    if driver == "auto" and lapack_driver == "gesvd":
        driver = "gesvd"
    overwrite_a = flag(overwrite_a, "overwrite_a")
    if is_dask(a):
        return _dask(a, bool(full_matrices), bool(compute_uv))
    # GPU input: the engine checks finiteness (with the info codes of a small stack)
    defer = bool(check_finite) and on_gpu(a)
    a, dtype = prepare(a, check_finite=bool(check_finite) and not defer)
    m, n = a.shape[-2:]
    plan = resolve_driver(m, n, driver, compute_uv, full_matrices)
    batch = tuple(a.shape[:-2])
    if a.size == 0:
        return _dispatch.shortcut("decomp.svd",
                                  _empty(a, batch, m, n, full_matrices, compute_uv, dtype))
    nb = int(np.prod(batch, dtype=np.int64))
    big, k = max(m, n), min(m, n)
    u_cols = big if full_matrices else k
    arrays = nbytes_of((a.shape, dtype), (batch + (big, k), dtype), (batch + (big, u_cols), dtype),
                       (batch + (k, k), dtype), (batch + (k, k), dtype))
    flops = nb * (4 * big * k * k + 22 * k ** 3) * flops_scale(dtype)
    return _dispatch.dispatch(_dispatch.Op(
        "decomp.svd", _svd_cuda.svd, _svd_host.svd,
        (a, bool(full_matrices), bool(compute_uv), driver, dtype, lapack_driver, overwrite_a,
         defer),
        flops=flops, host_nbytes=arrays + nbytes_of((batch + (k, k), dtype)),  # gesdd's work
        nbytes=lambda: (arrays + workspace_bytes(plan.driver, k if plan.qr_first else big, k, dtype)
                        + workspace_bytes("geqrf", big, k, dtype))))


def _dask(a, full_matrices, compute_uv):
    """The Dask route: lazy checks, then the TSQR SVD through the dispatcher."""
    check_dask(a)
    m, n = (int(d) for d in a.shape)
    if full_matrices and compute_uv and m != n:
        raise ValueError(f"full_matrices=True would build a {max(m, n)} x {max(m, n)} factor "
                         "from a Dask array; use full_matrices=False (U (m, k), Vh (k, n), "
                         "k = min(m, n))")
    if a.numblocks[1] != 1 and a.numblocks[0] != 1:
        raise ValueError("svd of a Dask array needs one column of blocks (tall-and-skinny, "
                         "chunked along rows) or one row of blocks (short-and-fat); got chunks "
                         f"{a.chunksize} in {a.numblocks} blocks: rechunk with "
                         "a.rechunk({1: -1}), or use truncated_svd for the leading triplets of "
                         "an array chunked both ways")
    return _dispatch.dispatch(_dispatch.Op("decomp.svd", _svd_cuda.svd, _svd_host.svd,
                                           (a, False, compute_uv), dask_fn=_tsqr_dask.svd))


def _empty(a, batch, m, n, full, uv, dtype):
    s = (batch + (0,), real_dtype(dtype))
    if not uv:
        return empty_result(a, s)[0]
    if full:
        u, _, vh = empty_result(a, (batch + (m, m), dtype, True), s,
                                (batch + (n, n), dtype, True))
    else:
        u, _, vh = empty_result(a, (batch + (m, 0), dtype), s, (batch + (0, n), dtype))
    return SVDResult(u, empty_result(a, s)[0], vh)
