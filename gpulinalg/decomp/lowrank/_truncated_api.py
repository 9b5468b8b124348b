"""``truncated_svd``: the top-k singular triplets, randomized (HMT), cuSOLVER ``Xgesvdr`` or
exact, for dense and sparse matrices, in or out of GPU memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._runtime import arrays as _arrays
from ..._runtime import dispatch as _dispatch
from ..._runtime import validation as _v
from ..._runtime.gradients import differentiable
from . import _randomized_dask, _truncated_cuda, _truncated_host
from . import _truncated_grad  # noqa: F401  (registers the gradient rule)
from .._checks import check_dask, is_dask
from ._ooc_source import HostMatrix
from .._results import SVDResult
from ._truncated_plan import (EXACT_MAX_DIM, EXACT_MIN_FRACTION, METHODS, LowRankPlan,
                              LowRankSVDResult, is_cupy_sparse, resolve_plan)

__all__ = ["truncated_svd", "LowRankSVDResult", "LowRankPlan", "resolve_plan",
           "EXACT_MAX_DIM", "EXACT_MIN_FRACTION", "METHODS"]


@differentiable("decomp.truncated_svd")
@_dispatch.front_door("decomp.truncated_svd")
def truncated_svd(a: Any, k: int, *, method: str = "auto", n_oversamples: int = 10,
                  n_iter: int | str = "auto", power_iteration_normalizer: str = "auto",
                  random_state: None | int | np.random.Generator | np.random.RandomState = None,
                  error_estimate: bool = False, out_of_core: bool | None = None,
                  progress: bool | None = None,
                  check_finite: bool = True) -> SVDResult | LowRankSVDResult:
    """The ``k`` largest singular values of ``a`` and their singular vectors.

    Parameters
    ----------
    a : (m, n) array_like, sparse matrix, or host matrix
        NumPy, CuPy or torch array; SciPy or CuPy sparse matrix (used through products only);
        or a host matrix too large for the GPU: ``np.memmap`` or any 2-D object with ``shape``,
        ``dtype`` and row slicing (h5py, zarr), streamed in row panels.
    k : int
        Number of singular triplets, ``0 <= k <= min(m, n)``.
    method : {"auto", "randomized", "gesvdr", "exact"}, default "auto"
        ``randomized``: Halko-Martinsson-Tropp with power iterations; ``gesvdr``: cuSOLVER's
        ``Xgesvdr`` (on the CPU the randomized algorithm runs instead); ``exact``: a full SVD,
        truncated. ``auto``: see :func:`resolve_plan`.
    n_oversamples : int, default 10
        Extra sketch columns ``p``; the sketch has ``min(k + p, min(m, n))`` columns.
    n_iter : int or "auto", default "auto"
        Power iterations (``auto``: 7 when ``k < 0.1 min(m, n)``, else 4).
    power_iteration_normalizer : {"auto", "CholQR", "QR", "LU", "none"}, default "auto"
        Normalization between power iterations (``auto``: ``CholQR``, a mixed-precision
        shifted Cholesky QR, on the GPU; ``LU`` with partial pivoting, as scikit-learn, on the
        CPU). The last basis is orthonormal: Cholesky QR checked at the end on the GPU,
        Householder QR otherwise.
    random_state : None, int, numpy.random.Generator or RandomState
        Seeds the Gaussian sketch; equal integers give the same sketch on CPU and GPU.
    error_estimate : bool, default False
        Also estimate ``||A - U diag(S) Vh||_2`` (three power steps on the residual, a few more
        passes over ``A``) and return a :class:`LowRankSVDResult`.
    out_of_core : bool or None, default None
        ``None``: stream a host matrix when it does not fit the GPU budget (and, on the CPU,
        when it is not an in-memory array); ``True``: always stream; ``False``: never.
    progress : bool or None, default None
        Progress bar (tqdm) for streamed runs; ``None``: for runs streaming 4 GiB or more.
    check_finite : bool, default True

    Returns
    -------
    SVDResult(U, S, Vh)
        ``U`` (m, k), ``S`` (k,) descending, ``Vh`` (k, n); the largest-magnitude entry of
        each row of ``Vh`` is real and positive. With ``error_estimate=True`` a
        :class:`LowRankSVDResult` with a fourth field ``error``.

    See Also
    --------
    gpulinalg.decomp.svd : the full SVD.
    gpulinalg.decomp.PCA : principal components (a centered truncated SVD).
    resolve_plan : how the ``"auto"`` choices resolve.

    Notes
    -----
    Signs are deterministic (the largest-magnitude entry of each row of ``Vh`` is real and
    positive), where ``scipy.sparse.linalg.svds`` leaves them to ARPACK/LOBPCG. With
    ``check_finite=False`` an input holding NaN or infinity raises a ValueError when the
    result would not be finite (never NaN singular values); ``k = 0`` and empty inputs
    return empty factors without running (``last_run().backend == "none"``; under
    ``backend="gpu"`` without a GPU they raise as a call with data would). A randomized
    GPU run syncs with the host once, for an ``l x l`` Rayleigh-Ritz step (``l = k + p``).
    Equal integer ``random_state`` values give the same sketch on the CPU and the GPU, so the
    two agree to rounding.

    A Dask array (2-D, chunked in any way) gives lazy Dask arrays (``error`` a lazy 0-d array):
    the randomized method on the workers (docs/dask.md), with ``method`` ``"auto"`` or
    ``"randomized"`` and ``power_iteration_normalizer`` ``"auto"``, ``"QR"`` or ``"none"``;
    other methods raise ``ValueError``. ``out_of_core``, ``progress`` and ``check_finite`` are
    not read (checking finiteness would compute the graph).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import truncated_svd
    >>> rng = np.random.default_rng(0)
    >>> u, _ = np.linalg.qr(rng.standard_normal((600, 40)))
    >>> v, _ = np.linalg.qr(rng.standard_normal((300, 40)))
    >>> s = 0.8 ** np.arange(40)
    >>> a = (u * s) @ v.T
    >>> U, S, Vh = truncated_svd(a, 5, method="randomized", random_state=0)
    >>> bool(np.allclose(S, s[:5], rtol=1e-10)), bool(np.allclose(U.T @ U, np.eye(5)))
    (True, True)
    >>> r = truncated_svd(a, 5, method="randomized", random_state=0, error_estimate=True)
    >>> bool(abs(r.error - s[5]) < 1e-3 * s[5])
    True
    """
    if is_dask(a):
        return _dask(a, k, method, n_oversamples, n_iter, power_iteration_normalizer,
                     random_state, error_estimate)
    a, kind, like = _classify(a)
    m, n = (int(x) for x in a.shape)
    dtype = _dtype_of(a)
    plan = resolve_plan((m, n), k, sparse=kind == "sparse", method=method,
                        n_oversamples=n_oversamples, n_iter=n_iter,
                        power_iteration_normalizer=power_iteration_normalizer,
                        random_state=random_state, dtype=dtype, error_estimate=bool(error_estimate),
                        out_of_core=out_of_core, progress=progress,
                        check_finite=bool(check_finite))
    # Host matrices are checked where they are read: on the device after the upload, panel by
    # panel when streamed, or by NumPy on the CPU (no extra pass over host memory).
    if check_finite and (kind != "host" or plan.k == 0):
        _v.check_finite(a.materialize() if kind == "host" else a.data if kind == "sparse" else a)
    if plan.k == 0 or m == 0 or n == 0:
        return _empty(m, n, plan, like)
    host = kind == "host"
    nbytes, flops = _estimate(m, n, plan, host)
    streamed = _truncated_cuda.truncated_svd_streamed
    gpu_fn = streamed if (host and out_of_core) else _truncated_cuda.truncated_svd
    return _dispatch.dispatch(_dispatch.Op(
        "decomp.truncated_svd", gpu_fn, _truncated_host.truncated_svd, (a, plan), nbytes=nbytes,
        flops=None if kind == "sparse" and is_cupy_sparse(a) else flops,
        oversize_fn=streamed if host and out_of_core is not False else None, like=like))


def _dask(a, k, method, n_oversamples, n_iter, normalizer, random_state, error_estimate):
    """The Dask route: lazy checks, then the randomized SVD on the workers."""
    check_dask(a)
    if method not in ("auto", "randomized"):
        raise ValueError(f"method={method!r} is not supported for Dask arrays: use "
                         "method='randomized' (or 'auto'), the algorithm that runs on a cluster")
    return _dispatch.dispatch(_dispatch.Op(
        "decomp.truncated_svd", _truncated_cuda.truncated_svd, _truncated_host.truncated_svd,
        (a, k), dict(n_oversamples=n_oversamples, n_iter=n_iter,
                     power_iteration_normalizer=normalizer, random_state=random_state,
                     error_estimate=bool(error_estimate)),
        dask_fn=_randomized_dask.randomized_svd))


def _classify(a):
    """``(a, kind, like)``: kind is "array" (device or host array), "sparse" or "host"."""
    if hasattr(a, "tocsr") and hasattr(a, "nnz"):
        if a.ndim != 2:
            raise ValueError(f"a must be 2-D, got shape {a.shape}")
        like = a.data if is_cupy_sparse(a) else None
        if a.dtype.kind not in "fc":
            a = a.astype(_v.float_dtype(a.dtype))
        return a, "sparse", like
    k = _arrays.kind_of(a)
    if k is None and hasattr(a, "shape") and hasattr(a, "dtype") and hasattr(a, "__getitem__") \
            and len(a.shape) == 2:
        return HostMatrix(a, _v.float_dtype(np.dtype(a.dtype))), "host", None
    a = _v.as_array(a, "a", min_ndim=2, max_ndim=2)
    if _arrays.on_gpu(a):
        return a, "array", None
    host = _arrays.to_host(a)
    return HostMatrix(host, _v.float_dtype(host.dtype)), "host", a


def _dtype_of(a):
    if isinstance(a, HostMatrix):
        return a.dtype
    return _v.float_dtype(_v.np_dtype(a))


def _estimate(m, n, plan, host):
    """``(bytes, flops)`` of the GPU run (arithmetic only: no library is asked)."""
    item = np.dtype(plan.dtype).itemsize
    l, small = plan.sketch, min(m, n)
    work = (m + n) * l * (3 * item + 16) + 4 * l * l * 16
    if plan.method == "exact":
        work = (m * n + (m + n) * small + small) * item * 2
        flops = 4.0 * m * n * small
    else:
        flops = 2.0 * m * n * l * (2 * plan.n_iter + 2)
    if plan.method == "gesvdr":
        work += 2 * m * n * item
    return int(work + (m * n * item if host else 0)), flops


def _empty(m, n, plan, like):
    """The empty-input result (``k == 0`` or an empty matrix), in the caller's package."""
    k = plan.k
    parts = [np.zeros((m, k), plan.dtype), np.zeros(k, plan.dtype.char.lower()),
             np.zeros((k, n), plan.dtype)]
    kind = _arrays.kind_of(like) or _arrays.Kind.NUMPY
    out = [_arrays.to_kind(x, kind, like) for x in parts]
    result = LowRankSVDResult(*out, 0.0) if plan.error_estimate else SVDResult(*out)
    reason = "k=0: nothing to compute" if k == 0 and m and n else \
        "empty input: nothing to compute"
    return _dispatch.shortcut("decomp.truncated_svd", result, reason)
