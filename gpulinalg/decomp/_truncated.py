"""``truncated_svd``: the top-k singular triplets, randomized (HMT), cuSOLVER ``Xgesvdr`` or
exact, for dense and sparse matrices, in or out of GPU memory."""

import dataclasses
from typing import Any, NamedTuple

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime import dispatch as _dispatch
from .._runtime import validation as _v
from . import _ooc
from ._randomized import LinearOperator, randomized_svd, residual_norm
from ._results import SVDResult
from ._sketch import NORMALIZERS, resolve_normalizer, seed_of, svd_flip

__all__ = ["truncated_svd", "LowRankSVDResult", "LowRankPlan", "resolve_plan",
           "EXACT_MAX_DIM", "EXACT_MIN_FRACTION", "METHODS"]

METHODS = ("auto", "randomized", "gesvdr", "exact")
#: ``method="auto"`` computes the full SVD when ``max(m, n) <= EXACT_MAX_DIM`` ...
EXACT_MAX_DIM = 500
#: ... or when ``k > EXACT_MIN_FRACTION * min(m, n)``; randomized otherwise (always for
#: sparse input).
EXACT_MIN_FRACTION = 0.25


class LowRankSVDResult(NamedTuple):
    """``SVDResult`` plus ``error``, an estimate of ``||A - U diag(S) Vh||_2``."""

    U: Any
    S: Any
    Vh: Any
    error: float


@dataclasses.dataclass(frozen=True)
class LowRankPlan:
    """How a call runs, as :func:`resolve_plan` decided it (also in ``last_run().details``)."""

    method: str
    k: int
    sketch: int
    n_iter: int
    normalizer: str
    seed: int
    dtype: Any
    error_estimate: bool = False
    out_of_core: Any = None
    progress: Any = None
    check_finite: bool = True


def resolve_plan(shape, k, *, sparse=False, method="auto", n_oversamples=10, n_iter="auto",
                 power_iteration_normalizer="auto", random_state=None, dtype=np.float64,
                 **extra):
    """Resolve every ``"auto"`` of :func:`truncated_svd` for an ``m x n`` matrix.

    * ``method="auto"``: ``"exact"`` when ``max(m, n) <= 500`` or ``k > 0.25 min(m, n)``
      (dense input), else ``"randomized"``.
    * ``n_iter="auto"``: 7 when ``k < 0.1 min(m, n)``, else 4 (scikit-learn's rule).
    * ``power_iteration_normalizer="auto"``: ``"CholQR"`` on the GPU, ``"LU"`` on the CPU
      (resolved where it runs).
    * sketch size ``l = min(k + n_oversamples, min(m, n))``.

    Examples
    --------
    >>> p = resolve_plan((20000, 2000), 32, random_state=0)
    >>> p.method, p.n_iter, p.sketch, p.normalizer
    ('randomized', 7, 42, 'auto')
    >>> resolve_plan((300, 200), 5).method
    'exact'
    """
    m, n = shape
    small = min(m, n)
    k = _check_k(k, small)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "auto":
        dense_exact = max(m, n) <= EXACT_MAX_DIM or k > EXACT_MIN_FRACTION * small
        method = "exact" if dense_exact and not sparse else "randomized"
    if isinstance(n_oversamples, bool) or not isinstance(n_oversamples, (int, np.integer)) \
            or n_oversamples < 0:
        raise ValueError(f"n_oversamples must be an int >= 0, got {n_oversamples!r}")
    if n_iter == "auto":
        n_iter = 7 if k < 0.1 * small else 4
    if isinstance(n_iter, bool) or not isinstance(n_iter, (int, np.integer)) or n_iter < 0:
        raise ValueError(f"n_iter must be 'auto' or an int >= 0, got {n_iter!r}")
    normalizer = power_iteration_normalizer
    if normalizer not in ("auto", *NORMALIZERS):
        raise ValueError(f"power_iteration_normalizer must be 'auto' or one of {NORMALIZERS}, "
                         f"got {power_iteration_normalizer!r}")
    return LowRankPlan(method, k, min(k + int(n_oversamples), small), int(n_iter), normalizer,
                       seed_of(random_state), np.dtype(dtype), **extra)


def _check_k(k, small):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    if not 0 <= k <= small:
        raise ValueError(f"k must be in [0, min(m, n)] = [0, {small}], got k={k}")
    return int(k)


def truncated_svd(a, k, *, method="auto", n_oversamples=10, n_iter="auto",
                  power_iteration_normalizer="auto", random_state=None, error_estimate=False,
                  out_of_core=None, progress=None, check_finite=True):
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
    stream = host and out_of_core is not False
    gpu_fn = _gpu_streamed if (host and out_of_core) else _gpu
    result = _dispatch.dispatch(
        "decomp.truncated_svd", gpu_fn, _cpu, (a, plan), nbytes=nbytes,
        flops=None if kind == "sparse" and _is_cupy_sparse(a) else flops,
        oversize_fn=_gpu_streamed if stream else None, like=like)
    return result


def _classify(a):
    """``(a, kind, like)``: kind is "array" (device or host array), "sparse" or "host"."""
    if hasattr(a, "tocsr") and hasattr(a, "nnz"):
        if a.ndim != 2:
            raise ValueError(f"a must be 2-D, got shape {a.shape}")
        like = a.data if _is_cupy_sparse(a) else None
        if a.dtype.kind not in "fc":
            a = a.astype(_v.float_dtype(a.dtype))
        return a, "sparse", like
    k = _arrays.kind_of(a)
    if k is None and hasattr(a, "shape") and hasattr(a, "dtype") and hasattr(a, "__getitem__") \
            and len(a.shape) == 2:
        return _ooc.HostMatrix(a, _v.float_dtype(np.dtype(a.dtype))), "host", None
    a = _v.as_array(a, "a", min_ndim=2, max_ndim=2)
    if _arrays.on_gpu(a):
        return a, "array", None
    host = _arrays.to_host(a)
    return _ooc.HostMatrix(host, _v.float_dtype(host.dtype)), "host", a


def _is_cupy_sparse(a):
    return type(a).__module__.startswith("cupyx")


def _dtype_of(a):
    if isinstance(a, _ooc.HostMatrix):
        return a.dtype
    return _v.float_dtype(_v._np_dtype(a))


def _estimate(m, n, plan, host):
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
    k = plan.k
    parts = [np.zeros((m, k), plan.dtype), np.zeros(k, plan.dtype.char.lower()),
             np.zeros((k, n), plan.dtype)]
    kind = _arrays.kind_of(like) or _arrays.Kind.NUMPY
    out = [_arrays.to_kind(x, kind, like) for x in parts]
    return LowRankSVDResult(*out, 0.0) if plan.error_estimate else SVDResult(*out)


def _finish(op, U, S, Vh, plan, info):
    _dispatch.note(**info)
    if plan.error_estimate:
        return LowRankSVDResult(U, S, Vh, residual_norm(op, U, S, Vh, seed=plan.seed + 1))
    return SVDResult(U, S, Vh)


def _exact(xp, a, plan):
    if xp is np:
        from scipy.linalg import svd
        u, s, vh = svd(a, full_matrices=False, check_finite=False)
    else:
        u, s, vh = xp.linalg.svd(a, full_matrices=False)
    U, Vh = svd_flip(xp, u[:, :plan.k], vh[:plan.k])
    return U, s[:plan.k], Vh


def _run(xp, a, plan):
    """The in-core computation on ``xp`` arrays (dense or sparse)."""
    op = LinearOperator(xp, a)
    method = plan.method
    if method in ("exact", "gesvdr") and op.sparse:
        a = a.toarray()
    # Xgesvdr needs at least one oversampling column: without room for it, the exact SVD
    if method == "exact" or (method == "gesvdr" and plan.sketch <= plan.k):
        U, S, Vh = _exact(xp, a, plan)
        return _finish(op, U, S, Vh, plan, {"method": "exact"})
    if method == "gesvdr" and xp is not np:
        from ._gesvdr import gesvdr
        U, S, Vh = gesvdr(a, plan.k, plan.sketch - plan.k, plan.n_iter)
        return _finish(op, U, S, Vh, plan, {"method": "gesvdr"})
    U, S, Vh, info = randomized_svd(op, plan.k, plan.sketch, plan.n_iter,
                                    resolve_normalizer(xp, plan.normalizer), plan.seed)
    return _finish(op, U, S, Vh, plan, {"method": "randomized", **info})


def _cpu(a, plan):
    if isinstance(a, _ooc.HostMatrix):
        if plan.out_of_core or (plan.out_of_core is None and not a.in_memory):
            return _streamed(_ooc.NumpyStreamer(a, check_finite=plan.check_finite), a, plan)
        a = a.materialize()
        if plan.check_finite:
            _v.check_finite(a)
    elif _is_cupy_sparse(a):
        a = a.get()
    return _run(np, a, plan)


def _gpu(a, plan):
    import cupy
    if isinstance(a, _ooc.HostMatrix):
        a = cupy.asarray(_contiguous(a.materialize()))
        if plan.check_finite:
            _v.check_finite(a)
    elif hasattr(a, "tocsr"):
        if not _is_cupy_sparse(a):
            import cupyx.scipy.sparse as cps
            a = cps.csr_matrix(a.tocsr())
    elif not (a.flags.c_contiguous or a.flags.f_contiguous):
        a = cupy.ascontiguousarray(a)
    return _run(cupy, a, plan)


def _contiguous(x):
    return x if x.flags.c_contiguous or x.flags.f_contiguous else np.ascontiguousarray(x)


def _gpu_streamed(a, plan):
    return _streamed(_ooc.CupyStreamer(a, check_finite=plan.check_finite), a, plan)


def _streamed(streamer, a, plan):
    """Out-of-core randomized SVD (any ``method`` other than exact runs the streamed HMT)."""
    U, S, Vh, info = _ooc.streamed_svd(streamer, plan.k, plan.sketch, plan.n_iter, plan.seed,
                                       progress=plan.progress)
    _dispatch.note(method="randomized-out-of-core", **info)
    if plan.error_estimate:
        err = _ooc.streamed_residual_norm(streamer, Vh, seed=plan.seed + 1)
        streamer.finish()
        return LowRankSVDResult(U, S, Vh, err)
    return SVDResult(U, S, Vh)
