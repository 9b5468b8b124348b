"""QR factorization, as ``scipy.linalg.qr``: validation and one dispatch to :mod:`._qr_cuda`
(cuSOLVER ``Xgeqrf`` and ``orgqr``) or :mod:`._qr_host` (SciPy)."""

from typing import Any, Literal

import numpy as np

from ..._runtime import arrays as _arrays
from ..._runtime import dispatch as _dispatch
from ..._runtime.errors import warn
from ..._runtime.budget import nbytes_of
from ..._runtime.gradients import differentiable
from . import _qr_host
from . import _qr_cuda, _tsqr_dask
from . import _qr_grad  # noqa: F401  (registers the gradient rule)
from .._checks import check_dask, empty_result, flag, flops_scale, is_dask, prepare
from .._gpu._cusolver_cuda import workspace_bytes
from .._results import QRResult

#: Why ``pivoting=True`` runs on the CPU (the reason :func:`gpulinalg.last_run` records).
PIVOTING_ON_CPU = "column-pivoted QR (LAPACK geqp3) has no cuSOLVER routine: ran on the CPU"

__all__ = ["qr"]

MODES = ("full", "r", "economic", "raw")


class _NotGiven:
    """The default of ``lwork``: SciPy 1.18 warns when ``lwork`` is passed at all, ``None``
    included, so passing it must be told apart from leaving it out."""

    def __repr__(self) -> str:
        return "<not given>"


NOT_GIVEN = _NotGiven()
_LWORK_WARNS: list = []  # [bool] once SciPy's version is read
#: NumPy's names, refused with a pointer to SciPy's (gpulinalg 0.1 took them).
_NUMPY_MODES = {"reduced": "economic", "complete": "full"}


@differentiable("decomp.qr")
@_dispatch.front_door("decomp.qr")
def qr(a: Any, overwrite_a: bool = False, lwork: int | None | _NotGiven = NOT_GIVEN,
       mode: Literal["full", "r", "economic", "raw"] = "full", pivoting: bool = False,
       check_finite: bool = True) -> tuple:
    """QR factorization ``a = Q @ R`` (``a[:, P] = Q @ R`` with pivoting), as SciPy's, of a
    matrix or a batch of matrices.

    Parameters
    ----------
    a : (..., M, N) array_like
    overwrite_a : bool, default False
        Allow the CPU engine to reuse ``a``'s memory (the GPU engine always factors a copy).
    lwork : int, optional
        LAPACK work array size (``None`` or ``-1``: the optimal size), passed to SciPy on the
        CPU; on the GPU cuSOLVER sizes its own workspace and ``lwork`` is only checked against
        LAPACK's minimum (``ValueError`` below it, on both backends). Deprecated by SciPy 1.18:
        with SciPy >= 1.18 installed, passing it at all (``None`` included) warns
        (``DeprecationWarning``) on both backends, as SciPy's ``qr`` does.
    mode : {"full", "r", "economic", "raw"}, default "full"
        ``full``: Q (..., M, M), R (..., M, N); ``economic``: Q (..., M, K), R (..., K, N)
        with ``K = min(M, N)``; ``r``: ``(R,)`` with R (..., M, N); ``raw``:
        ``((qr, tau), R)``, LAPACK's Householder reflectors and scalars (``qr`` (..., M, N),
        ``tau`` (..., K)) and R (..., K, N).
    pivoting : bool, default False
        Column pivoting (LAPACK ``geqp3``): ``P`` (..., N) int32 is appended to the result,
        ``|diag(R)|`` is non-increasing, and ``a[..., :, P] = Q @ R``.
    check_finite : bool, default True
        Raise ``ValueError`` if ``a`` holds NaN or Inf.

    Returns
    -------
    tuple
        ``QRResult(Q, R)``, ``(Q, R, P)``, ``(R,)``, ``(R, P)``, ``((qr, tau), R)`` or
        ``((qr, tau), R, P)``, as SciPy's; arrays in ``a``'s package; float32 in, float32 out;
        integers compute in float64.

    See Also
    --------
    scipy.linalg.qr : the same signature and results on the CPU.
    numpy.linalg.qr : NumPy's modes (``"reduced"``, ``"complete"``).

    Notes
    -----
    The GPU engine runs cuSOLVER ``Xgeqrf`` and forms Q with ``orgqr``/``ungqr``; the CPU
    engine runs LAPACK through SciPy. Both use LAPACK's Householder convention, so ``raw``
    results can be passed to LAPACK's ``ormqr`` on either side; signs of R's diagonal are
    not normalized. On the GPU a single tall matrix (at least twice as many rows as columns,
    at most 4096 columns; not a stack) in modes ``"economic"`` and ``"r"`` is factored by
    CholeskyQR2 (two Gram matrices, Cholesky factors and triangular solves: 1.2-10x faster
    than Householder QR on an H200), kept where a check shows it accurate to working
    precision (``cond(a)`` below about ``5e7`` in double precision, ``2e3`` in single), else
    Householder QR runs. R's diagonal is then real and positive, where Householder QR's
    signs are LAPACK's (Q and R otherwise agree up to those signs). :func:`gpulinalg.last_run`
    says which ran (``details["qr"]``: ``"cholesky_qr2"``, or ``"householder"`` after a
    rejected attempt).

    cuSOLVER has no column-pivoted QR: ``pivoting=True`` runs LAPACK ``geqp3`` on the CPU,
    whatever the input's package (CuPy or torch inputs are copied to the host and the results
    back to the input's device). :func:`gpulinalg.last_run` says so: backend ``"cpu"`` and the
    reason; under ``backend="gpu"`` it is a fallback, with a :class:`gpulinalg.FallbackWarning`.

    A Dask array (2-D, one column of blocks: a tall-and-skinny array chunked along its rows)
    gives lazy Dask arrays, computed by TSQR on the workers (docs/dask.md): ``mode="economic"``
    or ``"r"`` (``(R,)`` with R (K, N), not SciPy's zero-padded (M, N)); ``"full"`` on a tall
    array (``M > N``) raises ``ValueError``, since it would build an ``M x M`` Q: ask for
    ``mode="economic"``. ``"raw"``, ``pivoting``
    and ``lwork`` are not supported, and ``check_finite`` is not applied (it would compute
    the graph). ``R``'s diagonal is then real and non-negative.

    gpulinalg 0.1 followed NumPy (``mode="reduced"`` by default, ``mode="r"`` returning R
    alone with K rows); see docs/migration/decomp.md.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import qr
    >>> a = np.random.default_rng(0).standard_normal((6, 4))
    >>> q, r = qr(a)
    >>> q.shape, r.shape
    ((6, 6), (6, 4))
    >>> bool(np.allclose(q @ r, a)), bool(np.allclose(q.T @ q, np.eye(6)))
    (True, True)
    >>> q, r = qr(a, mode="economic")
    >>> q.shape, r.shape
    ((6, 4), (4, 4))
    >>> q, r, p = qr(a, mode="economic", pivoting=True)
    >>> bool(np.allclose(q @ r, a[:, p]))
    True
    """
    mode = _check_mode(mode)
    overwrite_a, pivoting = flag(overwrite_a, "overwrite_a"), flag(pivoting, "pivoting")
    lwork = _lwork(lwork)
    if is_dask(a):
        return _dask(a, mode, pivoting, lwork)
    # GPU input: the engine flags NaN and Inf in its own copy of a and reads the flag back
    # with its codes (one synchronization, at the end instead of before the launches)
    defer = bool(check_finite) and _arrays.on_gpu(a)
    a, dtype = prepare(a, check_finite=bool(check_finite) and not defer)
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = tuple(a.shape[:-2])
    if a.size == 0:
        return _dispatch.shortcut("decomp.qr", _empty(a, mode, pivoting, batch, m, n, dtype))
    q_cols = m if mode == "full" else k
    _check_lwork(lwork, n, q_cols if mode in ("full", "economic") else 0)
    nb = int(np.prod(batch, dtype=np.int64))
    arrays = nbytes_of((a.shape, dtype), (batch + (max(m, n), max(q_cols, n)), dtype),
                       (batch + (m, n), dtype))
    flops = nb * (4 * m * n * k - 2 * (m + n) * k * k + 4 * k ** 3 / 3) * flops_scale(dtype)
    return _dispatch.dispatch(_dispatch.Op(
        "decomp.qr", None if pivoting else _qr_cuda.qr, _qr_host.qr,
        (a, mode, bool(pivoting), _for_lapack(lwork), bool(overwrite_a), dtype, defer),
        flops=flops, host_nbytes=arrays + 2 * nbytes_of((a.shape, dtype)),  # LAPACK's copies
        nbytes=lambda: (arrays + workspace_bytes("geqrf", m, n, dtype)
                        + workspace_bytes("orgqr", m, n, dtype)),
        no_gpu_reason=PIVOTING_ON_CPU))


def _dask(a, mode, pivoting, lwork):
    """The Dask route: lazy checks, then TSQR through the dispatcher."""
    check_dask(a)
    m, n = (int(d) for d in a.shape)
    if pivoting or mode == "raw" or lwork not in (None, -1):
        raise ValueError("qr of a Dask array supports mode='economic' or 'r' only, without "
                         "pivoting, mode='raw' or lwork (see docs/dask.md)")
    if mode == "full" and m > n:
        raise ValueError(f"mode='full' would build an m x m Q ({m} x {m}) from a Dask array; "
                         "use mode='economic' (Q (m, n), R (n, n)) or mode='r'")
    if a.numblocks[1] != 1:
        raise ValueError("qr of a Dask array needs one column of blocks (a tall-and-skinny "
                         f"array chunked along its rows only); got chunks {a.chunksize} in "
                         f"{a.numblocks} blocks: rechunk with a.rechunk({{1: -1}})")
    return _dispatch.dispatch(_dispatch.Op("decomp.qr", _qr_cuda.qr, _qr_host.qr, (a, mode),
                                           dask_fn=_qr_dask))


def _qr_dask(a, mode):
    out = _tsqr_dask.qr(a, "r" if mode == "r" else "economic")
    return (out,) if mode == "r" else out


def _check_mode(mode):
    if mode == "qr":  # SciPy's undocumented alias of "full"
        return "full"
    if mode in MODES:
        return mode
    hint = (f" ({mode!r} is NumPy's name: use {_NUMPY_MODES[mode]!r})"
            if mode in _NUMPY_MODES else "")
    raise ValueError(f"Mode argument should be one of {list(MODES)}, got {mode!r}{hint}")


def _lwork(lwork):
    """``lwork`` as the engines take it (``None``: not given), warning as the installed SciPy
    does when it was passed."""
    if lwork is NOT_GIVEN:
        return None
    if not _LWORK_WARNS:
        from importlib.metadata import version
        _LWORK_WARNS.append(tuple(int(p) for p in version("scipy").split(".")[:2]) >= (1, 18))
    if _LWORK_WARNS[0]:
        warn("the lwork argument of qr is deprecated (as in SciPy 1.18): the GPU sizes its "
             "own workspace and LAPACK picks the optimal one", DeprecationWarning)
    return lwork


def _for_lapack(lwork):
    """The ``lwork`` the CPU engine hands to SciPy: none once SciPy deprecated it (it would
    warn a second time), else the caller's."""
    return None if _LWORK_WARNS and _LWORK_WARNS[0] else lwork


def _check_lwork(lwork, n, q_cols):
    """LAPACK's rule for ``lwork`` (``-1`` or ``None``: query), checked on both backends:
    ``geqrf`` needs ``lwork >= n``, ``orgqr`` ``lwork >=`` the columns of Q."""
    if lwork is None or lwork == -1:
        return
    need = max(n, q_cols, 1)
    if int(lwork) != lwork or lwork < need:
        raise ValueError(f"lwork must be None, -1 or an integer >= {need}, got {lwork!r}")


def _empty(a, mode, pivoting, batch, m, n, dtype):
    """SciPy's results for an empty ``a``: Q the identity in ``full`` mode."""
    k = min(m, n)
    econ = mode in ("economic", "raw")
    q, r = empty_result(a, (batch + (m, k if econ else m), dtype, not econ),
                        (batch + ((k, n) if econ else (m, n)), dtype))
    tail = (r,) if not pivoting else (r, _arange(a, batch, n))
    if mode == "r":
        return tail
    if mode == "raw":
        qr_raw, tau = empty_result(a, (batch + (m, n), dtype), (batch + (k,), dtype))
        return ((qr_raw, tau),) + tail
    return QRResult(q, r) if not pivoting else (q,) + tail


def _arange(a, batch, n):
    """The identity permutation ``arange(n)`` (int32) over ``batch``, in ``a``'s package."""
    kind = _arrays.kind_of(a) or _arrays.Kind.NUMPY
    return _arrays.to_kind(np.broadcast_to(np.arange(n, dtype=np.int32), batch + (n,)).copy(),
                           kind, a)
