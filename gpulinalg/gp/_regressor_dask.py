"""``GaussianProcessRegressor.fit`` and ``predict`` with Dask training inputs: the kernel matrix
built tile by tile on the workers, then decomp's blocked Cholesky
(:mod:`gpulinalg.decomp.cholesky._cholesky_dask`).

``fit(est, X, y)`` sets the estimator's fitted attributes from a Dask ``X`` (NumPy or CuPy
chunks): ``X_train_`` (float64, one column of blocks, persisted), ``L_`` and ``alpha_``
(persisted Dask arrays, tiled as ``X_train_``'s rows), ``log_marginal_likelihood_value_``,
``jitter_`` (floats), ``kernel_``, ``y_train_``, ``n_features_in_``. It computes once, at its
end: one ``dask.persist`` of the factor, the dual coefficients and the likelihood. Tile
``(i, j)`` of ``k(X) + alpha I`` is one task on rows ``i`` and ``j`` of ``X`` (the kernel's
:class:`~._kernels_xp.KernelPlan` on the chunks' package; a kernel without a plan is evaluated
by scikit-learn on host copies of the two blocks); only the lower triangle of tiles is ever
computed. ``predict(est, X, return_std, return_cov)`` is lazy for a Dask ``X``.

Hyperparameters: the optimizer does not run on Dask (each of its steps would be a factorization
of the whole matrix plus ``K^-1`` for the gradient); ``fit`` raises ``ValueError`` unless
``optimizer=None`` or the kernel has no free hyperparameter. Fit them on a subsample and pass
``kernel=sub.kernel_, optimizer=None``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime.validation import namespace
from ..decomp._engines import cholesky_dask as _cholesky_dask
from ._kernels_xp import compile_kernel
from ._solve_dask import factor

__all__ = ["fit", "predict"]

_LOG_2PI = math.log(2 * math.pi)


def _host(a):
    return _arrays.to_host(a) if not isinstance(a, np.ndarray) else a


def _kernel_tile(xi, xj, shift, kernel, plan, noise, same):
    """``k(xi, xj)`` (``k(xi)`` with White noise and ``noise`` on the diagonal when ``same``),
    float64, in the package of ``xi``."""
    xp = namespace(xi)
    if plan is not None:
        k = plan.matrix(xi, None if same else xj, shift=shift)
    else:
        k = xp.asarray(np.asarray(kernel(_host(xi)) if same else kernel(_host(xi), _host(xj)),
                                  dtype=np.float64))
    if same:
        k = k.copy() if not k.flags.c_contiguous else k
        idx = xp.arange(k.shape[0])
        k[idx, idx] += xp.asarray(noise) if np.ndim(noise) else noise
    return k


def _centre(X):
    """``X``'s column means as a lazy one-chunk array: the centre of the plan's distance GEMMs
    (distances are translation invariant; centring limits cancellation, as on one GPU)."""
    return X.mean(axis=0).rechunk(-1)


def kernel_matrix(X: Any, kernel: Any, noise: Any, centre: Any = None) -> Any:
    """Lazy ``k(X) + diag(noise)`` of the Dask ``X`` (n, d), one column of blocks: tile
    ``(i, j)`` from row blocks ``i`` and ``j``; an upper tile is the transpose of its lower
    twin (computed only if asked for). ``centre``: a lazy (d,) one-chunk array, by default
    ``X``'s column means."""
    from ..decomp._engines import new_array, tokenize
    plan = compile_kernel(kernel, X.shape[1])
    sizes = X.chunks[0]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    centre = _centre(X) if centre is None else centre
    shift = (centre.name, 0)
    name = f"gpulinalg-gp-kernel-{tokenize(X, repr(kernel), noise, centre)}"
    dsk: dict = {}
    for i in range(len(sizes)):
        for j in range(len(sizes)):
            if i == j:
                part = noise[offsets[i]:offsets[i + 1]] if np.ndim(noise) else noise
                dsk[(name, i, j)] = (_kernel_tile, (X.name, i, 0), (X.name, j, 0), shift,
                                     kernel, plan, part, True)
            elif i > j:
                dsk[(name, i, j)] = (_kernel_tile, (X.name, i, 0), (X.name, j, 0), shift,
                                     kernel, plan, 0.0, False)
            else:
                dsk[(name, i, j)] = (_transpose, (name, j, i))
    meta = namespace(X._meta).empty((0, 0), dtype=np.float64)
    return new_array(name, dsk, [X, centre], (X.shape[0],) * 2, (sizes, sizes), meta)


def _transpose(a):
    return namespace(a).ascontiguousarray(a.T)


def _cross(Xq, X, kernel, centre):
    """Lazy ``k(Xq, X)`` (m, n): tiles of Xq's row blocks by X's."""
    from ..decomp._engines import new_array, tokenize
    plan = compile_kernel(kernel, X.shape[1])
    name = f"gpulinalg-gp-cross-{tokenize(Xq, X, repr(kernel), centre)}"
    dsk = {(name, i, j): (_kernel_tile, (Xq.name, i, 0), (X.name, j, 0), (centre.name, 0),
                          kernel, plan, 0.0, False)
           for i in range(Xq.numblocks[0]) for j in range(X.numblocks[0])}
    meta = namespace(X._meta).empty((0, 0), dtype=np.float64)
    return new_array(name, dsk, [Xq, X, centre], (Xq.shape[0], X.shape[0]),
                     (Xq.chunks[0], X.chunks[0]), meta)


def _as_chunks_of(a, like):
    """``a`` in the chunks' package of the Dask array ``like``: an in-memory array is moved
    there (NumPy targets or queries for CuPy training chunks); a Dask array of the other
    package raises ``TypeError`` (no chunk is converted silently)."""
    import dask.array as da
    kind = _arrays.kind_of(like._meta)
    if isinstance(a, da.Array):
        if _arrays.kind_of(a._meta) is not kind:
            raise TypeError(f"Dask arrays with chunks of different packages: {kind.value} and "
                            f"{_arrays.kind_of(a._meta).value}; convert one (map_blocks)")
        return a
    return _arrays.to_kind(a if _arrays.is_array(a) else np.asarray(a), kind)


def _small(v, like):
    """A one-chunk Dask array of the host vector ``v`` in ``like``'s chunks' package."""
    import dask.array as da
    return da.from_array(_as_chunks_of(np.atleast_1d(np.asarray(v, dtype=np.float64)), like),
                         chunks=-1, asarray=False)


def _prepared(X, name="X"):
    import dask.array as da
    if not isinstance(X, da.Array):
        raise TypeError(f"{name} must be a dask.array.Array here")
    if X.ndim != 2:
        raise ValueError(f"Expected 2D array, got {name} with shape {X.shape}")
    if any(np.isnan(c) for cs in X.chunks for c in cs):
        raise ValueError("chunk sizes must be known (call compute_chunk_sizes() first)")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be real numeric, got dtype {X.dtype}")
    return X.astype(np.float64).rechunk({1: -1})


def fit(est: Any, X: Any, y: Any) -> Any:
    """Fit ``est`` (a :class:`gpulinalg.gp.GaussianProcessRegressor`) on the Dask ``X`` and
    ``y`` (Dask or an array of ``X``'s chunks' package, or NumPy); returns ``est``."""
    import dask
    import dask.array as da
    from sklearn.base import clone
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel as C

    est.solver_ = est._check_params()
    est.kernel_ = C() * RBF() if est.kernel is None else clone(est.kernel)
    if est.optimizer is not None and est.kernel_.n_dims > 0:
        raise ValueError("GaussianProcessRegressor.fit with a Dask X does not optimize the "
                         "kernel's hyperparameters: pass optimizer=None (fit them on a "
                         "subsample first and pass kernel=that_fit.kernel_)")
    if not est.kernel_.requires_vector_input:
        raise ValueError("a Dask X needs a kernel on vectors (requires_vector_input)")
    X = _prepared(X)
    n = X.shape[0]
    if n == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape=(0, {X.shape[1]})) while a minimum "
                         "of 1 is required.")
    shape = tuple(y.shape) if hasattr(y, "shape") else np.shape(y)
    if len(shape) not in (1, 2) or shape[0] != n:
        raise ValueError(f"y must be (n,) or (n, t) with n = {n}, got shape {shape}")
    y = _as_chunks_of(y, X)
    if not isinstance(y, da.Array):
        y = da.from_array(y, chunks=(X.chunks[0],) + tuple(-1 for _ in shape[1:]),
                          asarray=False)
    if y.ndim not in (1, 2) or y.shape[0] != n:
        raise ValueError(f"y must be (n,) or (n, t) with n = {n}, got shape {y.shape}")
    y = y.astype(np.float64).rechunk({0: X.chunks[0]})
    seen = y.shape[1] if y.ndim > 1 else 1
    if est.n_targets is not None and seen != est.n_targets:
        raise ValueError("The number of targets seen in `y` is different from the parameter "
                         f"`n_targets`. Got {seen} != {est.n_targets}.")
    if est.normalize_y:
        mean, std = dask.compute(y.mean(axis=0), y.std(axis=0))
        mean, std = _host(mean), _host(std)
        std = np.where(std < 10 * np.finfo(std.dtype).eps, 1.0, std)  # scikit-learn's zeros
        y = (y - _small(mean, X)) / _small(std, X)
    else:
        mean, std = np.zeros(seen)[0 if y.ndim == 1 else slice(None)], \
            np.ones(seen)[0 if y.ndim == 1 else slice(None)]
    est._y_train_mean, est._y_train_std = mean, std
    noise = est._noise(n)
    K = kernel_matrix(X, est.kernel_, noise)
    L, jitter = factor(K, est.jitter)
    alpha = _cholesky_dask.cho_solve((L, True), y)
    logdet = _cholesky_dask.logdet_cholesky((L, True))
    t = seen
    lml = -0.5 * (y.reshape(n, t) * alpha.reshape(n, t)).sum() - 0.5 * t * logdet \
        - 0.5 * t * n * _LOG_2PI
    try:
        X, y, L, alpha, lml, jitter = dask.persist(X, y, L, alpha, lml, jitter)
        lml, jitter = dask.compute(lml, jitter)
    except np.linalg.LinAlgError as exc:  # NotPositiveDefiniteError: scikit-learn's words
        exc.args = (f"The kernel, {est.kernel_}, is not returning a positive definite matrix. "
                    "Try gradually increasing the 'alpha' parameter of your "
                    "GaussianProcessRegressor estimator.",) + exc.args
        raise
    est.X_train_, est.y_train_, est.L_, est.alpha_ = X, y, L, alpha
    est.log_marginal_likelihood_value_ = np.float64(_host(lml))
    est.jitter_ = float(_host(jitter))
    est.n_features_in_ = X.shape[1]
    est._device = None
    return est


def predict(est: Any, X: Any, return_std: bool = False, return_cov: bool = False, *,
            fitted: Any = None) -> Any:
    """Posterior mean (and standard deviation or covariance) at ``X``.

    Fitted by :func:`fit` (``est.L_`` a Dask array): lazy Dask arrays for a Dask ``X``; for
    another array, computed and returned in the package of the training chunks. Fitted in
    memory, or not fitted (the prior): a Dask ``X`` is predicted block by block of its rows by
    ``est.predict`` itself, lazily (``return_cov`` computes ``X`` and returns the covariance
    in memory). ``fitted`` is not read: the estimator passes ``est.L_`` there so that the
    dispatcher sees a Dask array when only the fit was on Dask.
    """
    import dask.array as da
    if return_std and return_cov:
        raise RuntimeError("At most one of return_std or return_cov can be requested.")
    if not isinstance(getattr(est, "L_", None), da.Array):
        return _blockwise(est, X, return_std, return_cov)
    lazy = isinstance(X, da.Array)
    X = _as_chunks_of(X, est.X_train_)
    if not lazy:
        X = da.from_array(X, chunks=(est.X_train_.chunks[0][0], -1), asarray=False)
    Xq = _prepared(X)
    if Xq.shape[1] != est.n_features_in_:
        raise ValueError(f"X has {Xq.shape[1]} features, but GaussianProcessRegressor is "
                         f"expecting {est.n_features_in_} features as input.")
    xp = namespace(est.L_._meta)
    scale, shift = _small(est._y_train_std, est.L_), _small(est._y_train_mean, est.L_)
    centre = _centre(est.X_train_)
    kq = _cross(Xq, est.X_train_, est.kernel_, centre)
    a = est.alpha_ if est.alpha_.ndim == 2 else est.alpha_[:, None]
    mean = (kq @ a) * scale + shift
    mean = mean[:, 0] if mean.shape[1] == 1 else mean
    out: Any = mean
    if return_std or return_cov:
        v = _cholesky_dask.solve_lower((est.L_, True), kq.T)
        if return_cov:
            kxx = kernel_matrix(Xq, est.kernel_, 0.0, centre)  # k(Xq): White noise on
            cov = (kxx - v.T @ v)[:, :, None] * (scale ** 2)
            out = (mean, cov[:, :, 0] if cov.shape[2] == 1 else cov)
        else:
            kd = Xq.map_blocks(_diag_block, est.kernel_, drop_axis=1, dtype=np.float64,
                               meta=xp.empty((0,), dtype=np.float64))
            var = da.maximum(kd - (v * v).sum(axis=0), 0.0)
            std = da.sqrt(var[:, None] * (scale ** 2))
            out = (mean, std[:, 0] if std.shape[1] == 1 else std)
    if lazy:
        return out
    import dask
    return dask.compute(*out) if isinstance(out, tuple) else out.compute()


def _diag_block(x, kernel):
    plan = compile_kernel(kernel, x.shape[1])
    if plan is not None:
        return plan.diag(x)
    return namespace(x).asarray(np.asarray(kernel.diag(_host(x)), dtype=np.float64))


def _blockwise(est, X, return_std, return_cov):
    """``est.predict`` (in memory, or the prior) over the row blocks of the Dask ``X``."""
    X = X.rechunk({1: -1})
    if return_cov:
        return est.predict(X.compute(), return_cov=True)
    probe = est.predict(np.zeros((1, X.shape[1])), return_std=return_std)
    t = (probe[0] if return_std else probe).shape[1:]
    width = (t[0] if t else 1) * (2 if return_std else 1)
    xp = namespace(X._meta)
    if return_std:
        out = X.map_blocks(_predict_block, est, True, chunks=(X.chunks[0], (width,)),
                           dtype=np.float64, meta=xp.empty((0, 0), dtype=np.float64))
        half = width // 2
        mean, std = out[:, :half], out[:, half:]
        return (mean, std) if t else (mean[:, 0], std[:, 0])
    if t:
        return X.map_blocks(_predict_block, est, False, chunks=(X.chunks[0], t),
                            dtype=np.float64, meta=xp.empty((0, 0), dtype=np.float64))
    return X.map_blocks(_predict_block, est, False, drop_axis=1, dtype=np.float64,
                        meta=xp.empty((0,), dtype=np.float64))


def _predict_block(x, est, std):
    """``est.predict`` of one row block: the mean, or mean and std side by side (2-D)."""
    if not std:
        return est.predict(x)
    mean, sd = est.predict(x, return_std=True)
    xp = namespace(mean)
    if mean.ndim == 1:
        mean, sd = mean[:, None], sd[:, None]
    return xp.concatenate([mean, sd], axis=1)
