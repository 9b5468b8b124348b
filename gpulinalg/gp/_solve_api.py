"""The front door of the exact-GP solve: :func:`exact_gp_solve` validates, then dispatches once
to the GPU or CPU function of :mod:`._engine_cuda` / :mod:`._engine_host`."""

from typing import Any

import numpy as np

from .._runtime import dispatch as _dispatch
from .._runtime import arrays as _arrays
from .._runtime.dispatch import Op, dispatch, shortcut
from .._runtime.errors import IllConditionedWarning, warn
from .._runtime.validation import as_array, check_finite, check_square, float_dtype, namespace
from .._runtime.validation import check_dask, is_dask
from .._runtime.gradients import differentiable
from . import _engine_cuda, _engine_host, _solve_dask
from . import _solve_grad  # noqa: F401  (registers the gradient rule)
from ._results import GPSolveResult
from ._solve_xp import check_jitter

__all__ = ["exact_gp_solve"]


@differentiable("gp.exact_gp_solve")
@_dispatch.front_door("gp.exact_gp_solve")
def exact_gp_solve(K: Any, y: Any, *,
                   jitter: str | float | None = "auto") -> GPSolveResult:
    """Solve an exact Gaussian process given its kernel matrix ``K`` (noise included) and ``y``.

    Factors ``K = L L^T`` (retrying with diagonal jitter when that fails), then returns
    ``alpha = K^-1 y``, ``L``, ``log|K|`` and the log marginal likelihood.

    Parameters
    ----------
    K : (n, n) array_like
        Symmetric positive definite kernel matrix (NumPy, CuPy or torch, or a Dask array tiled
        alike along both axes: see Notes). Not modified.
    y : (n,) or (n, t) array_like
        Targets; ``t`` columns are ``t`` independent outputs sharing ``K`` (a Dask array, or
        any array with a Dask ``K``).
    jitter : "auto", float or None, default "auto"
        ``"auto"``: when the Cholesky fails, retry with ``JITTER_START * eps * mean(diag(K))``
        on the diagonal, growing tenfold for up to ``JITTER_TRIES`` retries, with an
        :class:`~gpulinalg.IllConditionedWarning` at each retry. A number: add exactly that.
        ``None``: no jitter.

    Returns
    -------
    GPSolveResult
        ``(alpha, L, logdet, log_marginal_likelihood, jitter)``; arrays in ``K``'s package.

    Raises
    ------
    NotPositiveDefiniteError
        When no tried jitter makes ``K`` positive definite.
    ValueError
        Shapes that do not match, or NaN/Inf in ``K`` or ``y``.

    Notes
    -----
    Runs in float64 unless both ``K`` and ``y`` are float32; float32 is honoured with an
    :class:`~gpulinalg.IllConditionedWarning`, since kernel matrices are often too ill
    conditioned for single precision.

    **Dask arrays.** With a ``dask.array.Array`` ``K`` (or ``y``; the other is wrapped, tiled
    as it) the call returns at once, having computed nothing (``last_run().backend ==
    "dask"``): decomp's blocked Cholesky, solves and log-determinant build one lazy graph
    (``K`` must be tiled the same way along both axes; only its lower triangle is read).
    ``alpha`` and ``L`` are lazy Dask arrays; ``logdet`` and ``log_marginal_likelihood`` are
    lazy 0-d Dask arrays (``float(res.logdet)`` or ``dask.compute(*res)`` computes them);
    ``jitter`` is a float (a number adds exactly that to the diagonal tiles, ``None`` none).
    ``"auto"`` retries inside the graph: only a diagonal tile whose Cholesky fails is shifted
    (the same growing schedule) and only that task re-run, so the factor is of ``K + D``, ``D``
    diagonal and constant per tile, and ``jitter`` is a lazy 0-d array, the largest shift
    (docs/dask.md). A ``K`` no tried jitter fixes raises
    :class:`~gpulinalg.NotPositiveDefiniteError` when the result is computed. NaN/Inf are not
    checked (that would compute the graph).

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.gp import exact_gp_solve
    >>> x = np.linspace(0, 1, 20)
    >>> K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.1 ** 2) + 1e-2 * np.eye(20)
    >>> y = np.sin(6 * x)
    >>> res = exact_gp_solve(K, y)
    >>> bool(np.allclose(K @ res.alpha, y)), bool(np.allclose(res.L @ res.L.T, K))
    (True, True)
    >>> bool(np.isclose(res.logdet, np.linalg.slogdet(K)[1]))
    True
    """
    if is_dask(K, y):  # before any validation that would compute the graph
        return _dask_route(K, y, jitter)
    K = as_array(K, "K", min_ndim=2, max_ndim=2)
    y = as_array(y, "y", min_ndim=1, max_ndim=2)
    check_square(K, "K")
    if y.shape[0] != K.shape[0]:
        raise ValueError(f"y must have {K.shape[0]} rows to match K {tuple(K.shape)}, "
                         f"got shape {tuple(y.shape)}")
    check_finite(K, "K")
    check_finite(y, "y")
    dtype = _gp_dtype(K, y)
    check_jitter(jitter)  # validate before any work
    n, width = K.shape[0], (y.shape[1] if y.ndim == 2 else 1)
    if n == 0:
        xp = namespace(K)
        return shortcut("gp.exact_gp_solve", GPSolveResult(
            xp.zeros(y.shape, dtype=dtype), xp.zeros((0, 0), dtype=dtype), 0.0, 0.0, 0.0))
    # K as given (a view, any dtype): the engine makes its working copy once the dispatcher
    # has checked the memory, so an oversize K is refused before anything K-sized exists
    k, yc = _own_package(K), _as_dtype(y, dtype)
    itemsize = np.dtype(dtype).itemsize
    return dispatch(Op("gp.exact_gp_solve", _engine_cuda.exact_gp_solve,
                       _engine_host.exact_gp_solve, (k, yc), {"jitter": jitter},
                       nbytes=(2 * n * n + 2 * n * width) * itemsize, flops=n ** 3 / 3 + 2 * n * n,
                       like=K))


def _dask_route(K, y, jitter):
    """The checks a Dask ``K``/``y`` allow without computing them, then one dispatch to
    :mod:`._solve_dask` (recorded as backend ``"dask"``)."""
    K, y = (_dask_checked(a, name, ndim) for a, name, ndim in ((K, "K", (2,)), (y, "y", (1, 2))))
    check_square(K, "K")
    if y.shape[0] != K.shape[0]:
        raise ValueError(f"y must have {K.shape[0]} rows to match K {tuple(K.shape)}, "
                         f"got shape {tuple(y.shape)}")
    dtype = _gp_dtype(K, y)
    check_jitter(jitter)
    K, y = (a.astype(dtype) if is_dask(a) else _as_dtype(a, dtype) for a in (K, y))
    return dispatch(Op("gp.exact_gp_solve", _engine_cuda.exact_gp_solve,
                       _engine_host.exact_gp_solve, (K, y), {"jitter": jitter},
                       dask_fn=_solve_dask.exact_gp_solve))


def _dask_checked(a, name, ndim):
    if is_dask(a):
        check_dask(a, name, square=name == "K", ndim=ndim)
        return a
    return as_array(a, name, min_ndim=ndim[0], max_ndim=ndim[-1])


def _gp_dtype(*arrays):
    from .._runtime.validation import np_dtype
    dt = float_dtype(*[np_dtype(a) for a in arrays], allowed=(np.float32, np.float64))
    if dt == np.float32:
        warn("gpulinalg.gp: computing in float32 as asked; kernel matrices are often too ill "
             "conditioned for single precision (expect jitter or large errors); pass float64 "
             "arrays for float64", IllConditionedWarning)
    return dt


def _own_package(a):
    """``a`` as a NumPy or CuPy array (a torch tensor's memory, shared), dtype and layout kept."""
    if _arrays.kind_of(a) is _arrays.Kind.TORCH:
        return _arrays.to_kind(a, _arrays.Kind.NUMPY) if a.device.type == "cpu" else \
            _arrays.to_device(a)
    return a


def _as_dtype(a, dtype):
    """``a`` in ``dtype`` as a C-contiguous array of its own package (NumPy or CuPy)."""
    a = _own_package(a)
    return namespace(a).ascontiguousarray(a, dtype=dtype)
