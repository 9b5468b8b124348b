"""``GaussianProcessRegressor``: scikit-learn's exact GP regression, with the O(n^3) work and the
kernel matrices on the GPU.

Each of ``log_marginal_likelihood``, the final factorization of ``fit`` and ``predict`` is one
dispatch to the GPU and CPU functions of :mod:`._engine_cuda` / :mod:`._engine_host`; the
host-only pieces (the optimizer, ``normalize_y``, the prior, ``sample_y``'s draws) are in
:mod:`._regressor_host`.
"""

import numbers
from collections.abc import Callable
from operator import itemgetter
from typing import Any, Literal

import numpy as np
from sklearn.base import BaseEstimator, MultiOutputMixin, RegressorMixin, clone
from sklearn.gaussian_process.kernels import RBF, ConstantKernel as C, Kernel
from sklearn.utils import check_random_state

from .._runtime import dispatch as _dispatch
from .._runtime import arrays as _arrays
from .._runtime.dispatch import Op, dispatch, shortcut
from .._runtime.errors import OutOfMemoryError
from .._runtime.validation import is_dask
from . import _cg_api, _engine_cuda, _engine_host, _regressor_dask, _regressor_host
from ._cg_options import cg_options, resolve_solver
from ._kernels_xp import BLOCK_ELEMENTS, PREDICT_BLOCK_ELEMENTS, compile_kernel
from ._solve_xp import check_jitter

__all__ = ["GaussianProcessRegressor", "RESIDENT_MIN_N", "PRECISIONS"]

#: The values of ``GaussianProcessRegressor(precision=...)``.
PRECISIONS = ("auto", "float64", "mixed")

#: Training sets at least this large keep ``X_train_``, ``L_`` and ``alpha_`` on the GPU between
#: ``predict`` calls (when the dispatcher runs them there), instead of uploading them each time.
RESIDENT_MIN_N = 2048


class _Training:
    """The fitted model for ``predict``'s dispatch, one object that the dispatcher passes
    through unmoved: ``x`` (float64 training inputs for a kernel plan, else ``None``) and
    ``alpha`` on the host; the factor ``L`` on the host, or, when ``fit`` ran on the GPU and
    ``keep`` (a model large enough to stay), only in ``device`` (``(x, L, alpha)`` there) until
    ``L_`` is read. See ``keep`` and ``training`` in :mod:`._engine_host` and
    :mod:`._engine_cuda`. ``refine``: for a mixed-precision fit (float32 ``L``), the diagonal
    it added to ``k(X)`` (noise plus jitter, on the host), which predict's refined solves
    need; ``None`` otherwise. ``cg``: for a model fitted by the matrix-free solver (no
    factor), ``(noise, options)`` for predict's solves; ``None`` otherwise. ``precision``:
    the precision ``fit``'s engine ran at (``"float64"`` or ``"mixed"``), set by it; not
    pickled. ``love``: the matrix-free solver's cached LOVE factor
    (:class:`._love_xp.LoveFactor`), made by its first ``predict`` that needs it; not
    pickled."""

    __slots__ = ("x", "L", "alpha", "device", "keep", "refine", "cg", "precision", "love")

    def __init__(self, x, L, alpha, keep, refine=None, cg=None):
        self.x, self.L, self.alpha, self.device, self.keep = x, L, alpha, None, keep
        self.refine, self.cg, self.precision, self.love = refine, cg, None, None

    @property
    def host(self):
        """``(x, L, alpha)`` on the host (``L`` downloaded once if it is only on the GPU)."""
        if self.L is None and self.device is not None:
            self.L = _arrays.to_host(self.device[1])
        return self.x, self.L, self.alpha

    def __getstate__(self):  # the host arrays only (GPU copies are not pickled)
        return self.host, self.keep, self.refine, self.cg

    def __setstate__(self, state):
        (self.x, self.L, self.alpha), self.keep, *rest = state
        self.refine = rest[0] if rest else None
        self.cg = rest[1] if len(rest) > 1 else None
        self.device = self.precision = self.love = None


#: Rows of a block of the kernel matrix when an in-memory fit moves to the Dask cluster (its
#: chunks are NumPy's: the workers' CPUs run it).
CLUSTER_TILE = 4096


def _cluster_rung(est, X, exc):
    """The :func:`gpulinalg.distributed.cluster_info` of the active Dask client where the fit
    that ``exc`` refused can run there instead (float64 Cholesky, no hyperparameters to
    optimize, numeric ``X``), else ``None``; a refusal that only the optimizer stood in the
    way of says so in ``exc``."""
    from ..distributed import cluster_info
    if est.precision == "mixed" or est.solver_ == "cg":
        return None
    client = cluster_info()
    if client is None or not client["workers"]:
        return None
    if not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype.kind not in "biuf":
        return None
    if est.optimizer is not None and est.kernel_.n_dims > 0:
        exc.args = (f"{exc.args[0]} A Dask client is active, but a fit on the cluster does not "
                    "optimize the kernel's hyperparameters: fit them on a subsample and pass "
                    "kernel=that_fit.kernel_, optimizer=None.",) + exc.args[1:]
        return None
    return client


def _on_dask(op, dask_fn, args, kwargs):
    """The dispatcher's Dask route (an argument is a Dask array): no GPU or CPU engine runs
    here, the graph goes to the user's cluster (see :mod:`._regressor_dask`)."""
    return dispatch(Op(op, None, None, args, kwargs, dask_fn=dask_fn))


def _validate_data(est, *args, **kwargs):
    try:
        from sklearn.utils.validation import validate_data
    except ImportError:  # scikit-learn < 1.6
        return est._validate_data(*args, **kwargs)
    return validate_data(est, *args, **kwargs)


def _fit_cost(n, t, d, jitter, item=8):
    """``(nbytes, flops)`` of ``fit``'s final factorization on ``n`` points: the kernel matrix
    of ``item``-byte entries (4: mixed precision), factored in place (a copy more per retry of
    ``jitter="auto"``), and its row blocks."""
    block = min(n * n, BLOCK_ELEMENTS)
    copies = 2 if jitter == "auto" else 1
    refine = 0 if item == 8 else 3 * t  # mixed: the refinement's residual, step, solution
    nbytes = item * copies * n * n + 8 * (6 * block + n * (2 * t + d + 4 + refine))
    return nbytes, n ** 3 / 3 + 2 * n * n * t


def _lml_cost(n, t, p, eval_gradient, fallback):
    """``(nbytes, flops)`` of one log-marginal-likelihood evaluation on ``n`` points: one
    ``n x n`` buffer (``K``, factored and inverted in place) and row-block temporaries; the
    Cholesky, and with the gradient ``K^-1`` (``2 n^3 / 3`` by ``potri``). The GPU's faster
    ``K^-1`` (``trsm`` + ``gemm``) takes a second ``n x n`` buffer when the dispatcher found
    the headroom for it and uses ``potri`` in place when not, so the estimate counts the
    minimum."""
    block = min(n * n, BLOCK_ELEMENTS)
    nbytes = 8 * (n * n + 8 * block + 2 * n * t + (n * n * p if fallback else 0))
    flops = n ** 3 / 3 + 2 * n * n * t + (2 * n ** 3 / 3 if eval_gradient else 0)
    return nbytes, flops


class GaussianProcessRegressor(MultiOutputMixin, RegressorMixin, BaseEstimator):
    """Exact Gaussian-process regression (scikit-learn's API and kernels, on the GPU).

    A drop-in for :class:`sklearn.gaussian_process.GaussianProcessRegressor` (scikit-learn 1.9):
    every parameter of its constructor with the same default, then gpulinalg's own
    (``jitter``); the same methods and fitted attributes, the same results within
    floating-point tolerance. Kernel matrices and the log-marginal-likelihood gradient of
    ``RBF``, ``Matern`` (``nu`` 0.5, 1.5, 2.5, inf), ``RationalQuadratic``, ``WhiteKernel``,
    ``ConstantKernel``, ``DotProduct`` and their sums and products are computed on the GPU; any
    other kernel is evaluated by scikit-learn on the CPU. The Cholesky factorizations and solves
    go through :mod:`gpulinalg.decomp` and the dispatcher: a problem too large for the GPU's
    memory runs on the CPU with a :class:`~gpulinalg.FallbackWarning`. Computation is in float64,
    or, where float64 does not fit (``precision="auto"``), with a float32 factor refined to
    float64's accuracy.

    Parameters
    ----------
    kernel : sklearn Kernel, default None
        ``None``: ``ConstantKernel(1.0, "fixed") * RBF(1.0, "fixed")``, as in scikit-learn.
    alpha : float or (n_samples,) array, default 1e-10
        Added to the diagonal of the training kernel matrix.
    optimizer : "fmin_l_bfgs_b", callable or None, default "fmin_l_bfgs_b"
        Maximizes the log marginal likelihood over ``kernel.theta``; a callable is called as
        ``optimizer(obj_func, initial_theta, bounds=bounds) -> (theta_opt, func_min)``.
    n_restarts_optimizer : int, default 0
        Extra optimizer runs from log-uniform random starts within the bounds.
    normalize_y : bool, default False
        Scale targets to zero mean and unit variance before fitting.
    copy_X_train : bool, default True
        Keep copies of the training data in ``X_train_`` and ``y_train_``; ``False`` keeps
        references to the validated arrays (the caller's own when no conversion was needed).
    n_targets : int >= 1 or None, default None
        Number of target columns; ``fit`` checks ``y`` against it, and the prior (an unfitted
        model's ``predict`` and ``sample_y``) has that many outputs (``None``: one).
    random_state : int, RandomState or None, default None
        Draws the restarts' starting points.
    jitter : "auto", float >= 0 or None, default None
        gpulinalg's addition, for ``fit``'s final factorization only. ``None``: none; a kernel
        matrix that is not positive definite raises :class:`numpy.linalg.LinAlgError`, as in
        scikit-learn. ``"auto"``: retry with growing diagonal jitter (see
        :func:`gpulinalg.gp.exact_gp_solve`), with a warning at each retry. A number: add
        exactly that.
    precision : {"auto", "float64", "mixed"}, default "auto"
        gpulinalg's addition, for ``fit``'s final factorization and ``predict``. ``"auto"``:
        ``"float64"`` when its estimate fits the memory where the fit runs (the GPU's free
        memory under ``vram_headroom``; on the CPU, ``host_memory_share`` of the available
        host memory), else ``"mixed"`` when that fits, else (``optimizer=None`` or no free
        hyperparameter, and a Dask client active) a float64 fit on the Dask cluster with a
        :class:`~gpulinalg.FallbackWarning` (the fitted attributes then Dask arrays there),
        else :class:`~gpulinalg.OutOfMemoryError` (a ``MemoryError``) naming both estimates,
        the memory there is and the options, before anything of the size of the kernel
        matrix is allocated. The dispatcher makes the choice from the estimates it runs on (see
        :func:`gpulinalg.last_run`: the reason says why, ``details["precision"]`` which);
        ``precision_`` keeps it. A kernel gpulinalg does not evaluate itself, and
        ``solver="cg"``, always take ``"float64"``; Dask inputs too (no mixed path there).
        ``"mixed"``
        stores the kernel matrix and its Cholesky factor in float32 (half the memory: an
        exact GP on 100 000 points holds 40 GB instead of 80) and refines every solve with
        them in float64 against the kernel, recomputed block by block (predict's variances
        from the quadratic form ``k^T K^-1 k``, corrected to third order), so that ``alpha_``
        and the predictions match the float64 ones to about 1e-10 of their scale where the
        kernel matrix is conditioned well enough for float32 (an
        :class:`~gpulinalg.IllConditionedWarning` says when it is not). ``L_`` is then the
        float32 factor and ``log_marginal_likelihood_value_`` (with ``optimizer=None``) comes
        from it (about 1e-5 relative). Needs a kernel gpulinalg evaluates itself (see
        above); the optimizer's evaluations stay in float64. A memory option, not a speed
        one (at n = 100 000 on an H200: 37.9 s for fit and predict of 10 000 points
        against float64's 10.4 s). See :doc:`/gp`.
    solver : {"auto", "cholesky", "cg"}, default "auto"
        gpulinalg's addition. ``"cholesky"``: the exact factorization (all of the above).
        ``"cg"``: the matrix-free solver (first version): kernel products made tile by tile
        from the kernel (the ``n x n`` matrix never stored), preconditioned conjugate gradients
        over the targets and random probes at once, the log-determinant and the gradient's
        trace terms by stochastic Lanczos quadrature and probes; ``predict``'s mean from
        ``alpha_`` and its spread by conjugate-gradient solves. Needs a kernel gpulinalg
        evaluates itself; ``L_`` is then absent. ``"auto"``: the Cholesky path where its
        estimate fits (with ``precision="auto"``: float64, else mixed), else ``"cg"`` (a
        kernel it evaluates), else the ``OutOfMemoryError`` above; the dispatcher decides per
        call from the estimates, before leaving the GPU for the CPU, for ``fit``'s final step
        and each likelihood evaluation of the optimizer (:func:`gpulinalg.last_run`'s
        ``details["solver"]`` is ``"cg"`` where it took the matrix-free solver). The choice
        of ``fit``'s final step is ``solver_``. See :doc:`/gp`, "Matrix-free solver (first
        version)".
    cg_options : dict or None, default None
        Options of ``solver="cg"`` (see :class:`gpulinalg.gp.CGOptions`): ``tol`` (1e-6,
        relative residual of every right-hand side), ``max_iter`` (1000), ``precond_rank``
        (100, the pivoted-Cholesky preconditioner's rank), ``n_probes`` (32), ``seed`` (0,
        the probes' seed: the same probes at every evaluation), and for ``predict``'s
        standard deviations ``variance`` ("auto", "lanczos": a cached LOVE factor, "exact":
        conjugate-gradient solves), ``lanczos_rank`` (1024) and ``lanczos_tol`` (1e-4). Each
        run reports its iterations, final residuals, probes and rank in
        :func:`gpulinalg.last_run`'s ``details``.

    Attributes
    ----------
    X_train_, y_train_ : ndarray (or list of objects for ``X_train_``)
        Training data as validated (``y_train_`` normalized when ``normalize_y``); copies
        unless ``copy_X_train=False``.
    kernel_ : Kernel
        The kernel with the fitted hyperparameters.
    L_ : ndarray, shape (n_samples, n_samples)
        Lower Cholesky factor of ``k(X_train_) + alpha I (+ jitter_ I)``.
    alpha_ : ndarray, shape (n_samples,) or (n_samples, n_targets)
        Dual coefficients, ``K^-1 y_train_``.
    log_marginal_likelihood_value_ : numpy.float64
        Log marginal likelihood of ``kernel_.theta``.
    jitter_ : float
        Diagonal jitter the final factorization added on top of ``alpha`` (0.0 unless
        ``jitter`` asked for some).
    solver_ : str
        The solver that ran: ``"cholesky"`` or ``"cg"``.
    precision_ : str
        The precision ``fit``'s final factorization ran at, ``"float64"`` or ``"mixed"`` (what
        ``precision="auto"`` chose); ``predict`` follows it.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` had string column names (a pandas DataFrame).

    Notes
    -----
    Tolerances against scikit-learn (float64, well-conditioned problems, see the tests): log
    marginal likelihood to 1e-9 relative, its gradient to 1e-6 relative to its norm, predictive
    mean and standard deviation to 1e-7 relative to their scale, optimized ``theta`` to 1e-4
    absolute (L-BFGS-B stops where the gradient is small, so runs agree only that far). As in
    scikit-learn, :meth:`log_marginal_likelihood` returns ``-inf`` where the kernel matrix is
    not positive definite, which makes the optimizer step back, and ``fit`` raises
    :class:`numpy.linalg.LinAlgError` when the final kernel matrix is not positive definite;
    ``jitter="auto"`` makes that factorization retry with jitter instead (recorded in
    ``jitter_``). Where scikit-learn replaces a one-element ``alpha`` array by its element on
    the estimator during ``fit``, this class leaves its parameters as they were given.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    >>> from gpulinalg.gp import GaussianProcessRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 5, (40, 1))
    >>> y = np.sin(X[:, 0]) + 0.05 * rng.standard_normal(40)
    >>> gp = GaussianProcessRegressor(RBF() + WhiteKernel(1e-2), random_state=0).fit(X, y)
    >>> mean, std = gp.predict(X, return_std=True)
    >>> bool(np.abs(mean - y).max() < 0.2), bool((std > 0).all())
    (True, True)

    Several targets, checked against ``n_targets``; before ``fit`` the prior has that many:

    >>> Y = np.column_stack([y, 2 * y])
    >>> GaussianProcessRegressor(n_targets=2).predict(X[:3]).shape
    (3, 2)
    >>> two = GaussianProcessRegressor(RBF() + WhiteKernel(1e-2), n_targets=2).fit(X, Y)
    >>> two.predict(X[:3], return_std=True)[1].shape
    (3, 2)
    """

    def __init__(self, kernel: Kernel | None = None, *, alpha: float | Any = 1e-10,
                 optimizer: str | Callable | None = "fmin_l_bfgs_b",
                 n_restarts_optimizer: int = 0, normalize_y: bool = False,
                 copy_X_train: bool = True, n_targets: int | None = None,
                 random_state: int | np.random.RandomState | None = None,
                 jitter: str | float | None = None,
                 precision: Literal["auto", "float64", "mixed"] = "auto",
                 solver: Literal["auto", "cholesky", "cg"] = "auto",
                 cg_options: dict | None = None) -> None:
        self.kernel = kernel
        self.alpha = alpha
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.normalize_y = normalize_y
        self.copy_X_train = copy_X_train
        self.n_targets = n_targets
        self.random_state = random_state
        self.jitter = jitter
        self.precision = precision
        self.solver = solver
        self.cg_options = cg_options

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        return tags

    # -- fitting --------------------------------------------------------------------------

    def _check_params(self):
        if self.kernel is not None and not isinstance(self.kernel, Kernel):
            raise TypeError(f"kernel must be a scikit-learn Kernel or None, got {self.kernel!r}")
        if not (self.optimizer is None or callable(self.optimizer)
                or self.optimizer == "fmin_l_bfgs_b"):
            raise ValueError(f"Unknown optimizer {self.optimizer!r}.")
        n = self.n_restarts_optimizer
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
            raise ValueError(f"n_restarts_optimizer must be an int >= 0, got {n!r}")
        t = self.n_targets
        if t is not None and (not isinstance(t, numbers.Integral) or isinstance(t, bool)
                              or t < 1):
            raise ValueError(f"n_targets must be an int >= 1 or None, got {t!r}")
        for name in ("normalize_y", "copy_X_train"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        check_jitter(self.jitter)
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        solver = resolve_solver(self.solver)
        cg_options(self.cg_options)
        if solver == "cg" and self.precision == "mixed":
            raise ValueError("solver='cg' computes in float64 and keeps no factor: "
                             "precision must be 'float64' (or 'auto', which takes it), got "
                             f"{self.precision!r}")
        return solver

    def _noise(self, n):
        alpha = self.alpha
        if np.iterable(alpha):
            alpha = np.asarray(alpha, dtype=np.float64)
            if not np.all(np.isfinite(alpha)):  # named here, not as the kernel matrix's NaN
                raise ValueError("alpha must not contain infs or NaNs")
            if alpha.shape[0] == 1:
                alpha = float(alpha[0])
            elif alpha.shape != (n,):
                raise ValueError("alpha must be a scalar or an array with same number of "
                                 f"entries as y. ({alpha.shape[0]} != {n})")
        elif not 0 <= float(alpha) < np.inf:  # inf: not reported as the kernel matrix (a)
            raise ValueError(f"alpha must be finite and >= 0, got {alpha!r}")
        return alpha if np.iterable(alpha) else float(alpha)

    @_dispatch.front_door("gp.GaussianProcessRegressor.fit")
    def fit(self, X: Any, y: Any) -> "GaussianProcessRegressor":
        """Fit the GP: optimize the kernel's hyperparameters, then factor the kernel matrix.

        Parameters
        ----------
        X : (n_samples, n_features) array_like, or list of objects for non-vector kernels
        y : (n_samples,) or (n_samples, n_targets) array_like

        Returns
        -------
        self : GaussianProcessRegressor
        """
        if is_dask(X, y):  # kernel tiles and the blocked Cholesky on the user's cluster
            if resolve_solver(self.solver) == "cg":
                raise ValueError("solver='cg' is not available for Dask arrays yet")
            if self.precision == "mixed":
                raise ValueError("precision='mixed' is not available for Dask arrays: their "
                                 "kernel matrix is tiled over the cluster already")
            _on_dask("gp.GaussianProcessRegressor.fit", _regressor_dask.fit, (self, X, y), {})
            self.precision_ = "float64"
            return self
        self.solver_ = self._check_params()
        self.kernel_ = C() * RBF() if self.kernel is None else clone(self.kernel)
        self._rng = check_random_state(self.random_state)
        vector = self.kernel_.requires_vector_input
        X, y = _arrays.to_host(X) if _arrays.is_array(X) else X, _arrays.to_host(y) if \
            _arrays.is_array(y) else y
        X, y = _validate_data(self, X, y, multi_output=True, y_numeric=True,
                              ensure_2d=vector, dtype="numeric" if vector else None)
        seen = y.shape[1] if y.ndim > 1 else 1
        if self.n_targets is not None and seen != self.n_targets:
            raise ValueError("The number of targets seen in `y` is different from the parameter "
                             f"`n_targets`. Got {seen} != {self.n_targets}.")
        given = y  # the targets as given: a fit moved to the cluster normalizes its own
        y, self._y_train_mean, self._y_train_std = _regressor_host.normalized_targets(
            y, self.normalize_y)
        self._noise(y.shape[0])
        copy = np.copy if self.copy_X_train else (lambda a: a)
        self.X_train_, self.y_train_ = copy(X), copy(y)
        self._fitted: _Training | None = None
        try:
            if self.optimizer is not None and self.kernel_.n_dims > 0:
                self._optimize()
            res = self._factor()
        except OutOfMemoryError as exc:  # nothing started: the active Dask cluster, if any
            client = _cluster_rung(self, X, exc)
            if client is None:
                raise
            return self._fit_on_cluster(X, given, client, exc)
        if self.optimizer is None or self.kernel_.n_dims == 0:
            self.log_marginal_likelihood_value_ = np.float64(res.log_marginal_likelihood)
        self.alpha_, self.jitter_ = res.alpha, res.jitter
        return self

    def _fit_on_cluster(self, X, y, client, exc):
        """``fit`` of the in-memory ``X``, ``y`` on the active Dask cluster (``client``: its
        :func:`gpulinalg.distributed.cluster_info`), after ``exc`` refused it here: the
        Dask arrays of :mod:`._regressor_dask`, one row block per :data:`CLUSTER_TILE` rows."""
        import warnings

        import dask.array as da
        from .._runtime.errors import FallbackWarning
        from .._runtime.records import note
        n = X.shape[0]
        rows = -(-n // max(1, -(-n // CLUSTER_TILE)))
        why = (f"the in-memory fit was not started ({exc.where} memory: needed about "
               f"{exc.needed} B, {exc.allowed} B allowed); fitted on the active Dask cluster "
               f"({client['workers']} workers) in NumPy row blocks of {rows}")
        warnings.warn(f"gpulinalg: GaussianProcessRegressor.fit: {why}; the fitted "
                      "attributes are Dask arrays held there", FallbackWarning, stacklevel=3)

        def on_cluster(est, xd, yv):
            note(moved_to_dask=why)
            return _regressor_dask.fit(est, xd, yv)
        xd = da.from_array(np.asarray(X, dtype=np.float64), chunks=(rows, -1))
        _on_dask("gp.GaussianProcessRegressor.fit", on_cluster, (self, xd, y), {})
        self.precision_ = "float64"
        return self

    @property
    def L_(self) -> np.ndarray:
        """Lower Cholesky factor of the fitted kernel matrix, ``(n_samples, n_samples)``.

        A large model fitted on the GPU keeps its factor there for ``predict``; reading
        ``L_`` downloads it once (``n_samples**2 * 8`` bytes)."""
        fitted = self.__dict__.get("_fitted")
        if fitted is None:
            raise AttributeError("'GaussianProcessRegressor' object has no attribute 'L_'")
        if fitted.cg is not None:
            raise AttributeError("'GaussianProcessRegressor' fitted with solver='cg' has no "
                                 "Cholesky factor 'L_'")
        return fitted.host[1]

    @L_.setter
    def L_(self, value: np.ndarray) -> None:
        fitted = self.__dict__.get("_fitted")
        x, alpha = (fitted.x, fitted.alpha) if fitted is not None else (None, None)
        # a factor set here is used as it is: plain triangular solves, no refinement
        self._fitted = _Training(x, value, alpha, keep=value.shape[0] >= RESIDENT_MIN_N)

    def _targets(self):
        """``y_train_`` in float64, the engines' dtype (itself when it is float64 already)."""
        return np.asarray(self.y_train_, dtype=np.float64)

    def _optimize(self):
        def obj_func(theta, eval_gradient=True):
            if eval_gradient:
                lml, grad = self.log_marginal_likelihood(theta, eval_gradient=True,
                                                         clone_kernel=False)
                return -lml, -grad
            return -self.log_marginal_likelihood(theta, clone_kernel=False)

        bounds = self.kernel_.bounds
        optima = [self._constrained_optimization(obj_func, self.kernel_.theta, bounds)]
        if self.n_restarts_optimizer > 0:
            if not np.isfinite(bounds).all():
                raise ValueError("Multiple optimizer restarts (n_restarts_optimizer>0) "
                                 "requires that all bounds are finite.")
            for _ in range(self.n_restarts_optimizer):
                start = self._rng.uniform(bounds[:, 0], bounds[:, 1])
                optima.append(self._constrained_optimization(obj_func, start, bounds))
        values = list(map(itemgetter(1), optima))
        self.kernel_.theta = optima[int(np.argmin(values))][0]
        self.kernel_._check_bounds_params()
        self.log_marginal_likelihood_value_ = -np.float64(np.min(values))

    def _constrained_optimization(self, obj_func, initial_theta, bounds):
        if self.optimizer == "fmin_l_bfgs_b":
            return _regressor_host.minimize_lbfgsb(obj_func, initial_theta, bounds)
        if callable(self.optimizer):
            return self.optimizer(obj_func, initial_theta, bounds=bounds)
        raise ValueError(f"Unknown optimizer {self.optimizer}.")

    def _plan(self, kernel, n_theta=None):
        """``(plan, X in float64)`` when the kernel has a plan, else ``(None, None)``."""
        X = self.X_train_
        if not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype.kind not in "biuf":
            return None, None
        plan = compile_kernel(kernel, X.shape[1], n_theta)
        return (plan, np.asarray(X, dtype=np.float64)) if plan is not None else (None, None)

    def _factor(self):
        """One dispatch of ``fit``'s final factorization; the factor lands in ``_fitted``."""
        kernel, y = self.kernel_, self._targets()
        plan, x = self._plan(kernel)
        if self.solver_ == "cg":
            return self._factor_cg(plan, x, y)
        if self.precision == "mixed" and plan is None:
            raise ValueError(f"precision='mixed' needs a kernel that gpulinalg evaluates "
                             f"itself (RBF, Matern, RationalQuadratic, WhiteKernel, "
                             f"ConstantKernel, DotProduct, their sums and products, on "
                             f"numeric X); got {kernel}")
        k = None if plan is not None else np.asarray(kernel(self.X_train_), dtype=np.float64)
        n, t = y.shape[0], (y.shape[1] if y.ndim == 2 else 1)
        train = _Training(x, None, None, keep=n >= RESIDENT_MIN_N)
        noise = self._noise(n)

        def fit_op(precision):
            nbytes, flops = _fit_cost(n, t, 0 if x is None else x.shape[1], self.jitter,
                                      item=4 if precision == "mixed" else 8)
            return Op("gp.fit", _engine_cuda.fit, _engine_host.fit, (x, y, noise, k, train),
                      {"plan": plan, "jitter": self.jitter, "precision": precision},
                      nbytes=nbytes, flops=flops, like=y, details={"precision": precision})
        # "auto": float64, or mixed where float64 does not fit (the dispatcher decides)
        op = fit_op("mixed" if self.precision == "mixed" else "float64")
        if self.precision == "auto" and plan is not None:
            op = op._replace(lighter=fit_op("mixed"))
        cg = self._auto_cg(plan, y, with_jitter=True)
        if cg is not None:  # solver="auto": the matrix-free solver where no factor fits
            op = _cg_api.lightest(op, _cg_api.fit_op(x, y, cg[0], plan, cg[1]))
        try:
            res = dispatch(op)
        except np.linalg.LinAlgError as exc:  # scikit-learn's message first, then ours
            exc.args = (f"The kernel, {kernel}, is not returning a positive definite matrix. "
                        "Try gradually increasing the 'alpha' parameter of your "
                        "GaussianProcessRegressor estimator.",) + exc.args
            raise
        if train.precision is None:  # the matrix-free rung ran (its engine never sees train)
            return self._fitted_cg(res, x, *cg)
        train.alpha = res.alpha
        train.refine = noise + res.jitter if train.precision == "mixed" else None
        self._fitted, self.precision_ = train, train.precision
        return res

    def _factor_cg(self, plan, x, y):
        """``fit``'s final step on the matrix-free solver: ``alpha_`` and the likelihood by one
        dispatch."""
        if plan is None:
            raise _cg_api.needs_plan(self.kernel_)
        noise, options, jitter = self._cg_setup(y, with_jitter=True)
        return self._fitted_cg(_cg_api.fit(x, y, noise, plan, options), x, noise, options,
                               jitter)

    def _cg_setup(self, y, with_jitter):
        """``(noise, options, jitter)`` of the matrix-free solver; ``with_jitter`` (``fit``'s
        final step): a numeric ``jitter`` is added to the diagonal, ``"auto"`` adds none."""
        jitter = float(self.jitter) if with_jitter and isinstance(self.jitter, numbers.Real) \
            and not isinstance(self.jitter, bool) else 0.0
        return self._noise(y.shape[0]) + jitter, cg_options(self.cg_options), jitter

    def _auto_cg(self, plan, y, with_jitter):
        """:meth:`_cg_setup` where ``solver="auto"`` may take the matrix-free solver (a kernel
        it evaluates), else ``None``."""
        if self.solver != "auto" or plan is None:
            return None
        return self._cg_setup(y, with_jitter)

    def _fitted_cg(self, res, x, noise, options, jitter):
        self._fitted = _Training(x, None, res.alpha, keep=False, cg=(noise, options))
        self.solver_, self.precision_ = "cg", "float64"
        return res._replace(jitter=jitter)

    @_dispatch.front_door("gp.log_marginal_likelihood")
    def log_marginal_likelihood(self, theta: Any = None, eval_gradient: bool = False,
                                clone_kernel: bool = True) -> float | tuple[float, np.ndarray]:
        """Log marginal likelihood of ``theta`` on the training data (scikit-learn's semantics).

        Parameters
        ----------
        theta : (n_kernel_params,) array_like, optional
            Log-hyperparameters; ``None`` returns ``log_marginal_likelihood_value_``.
        eval_gradient : bool, default False
            Also return the gradient with respect to ``theta`` (needs ``theta``).
        clone_kernel : bool, default True
            ``False`` sets ``theta`` on ``kernel_`` itself.

        Returns
        -------
        log_likelihood : numpy.float64
        log_likelihood_gradient : (n_kernel_params,) ndarray, only with ``eval_gradient``
        """
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return shortcut("gp.log_marginal_likelihood", self.log_marginal_likelihood_value_,
                            reason="theta=None: the value fit stored")
        if clone_kernel:
            kernel = self.kernel_.clone_with_theta(theta)
        else:
            kernel = self.kernel_
            kernel.theta = theta
        n_theta = len(np.atleast_1d(theta))
        plan, x = self._plan(kernel, n_theta)
        if resolve_solver(self.solver) == "cg":
            if plan is None:
                raise _cg_api.needs_plan(kernel)
            y = self._targets()
            lml, grad = _cg_api.log_marginal_likelihood(
                x, y, self._noise(y.shape[0]), plan, eval_gradient, cg_options(self.cg_options))
            lml = np.float64(lml)
            return (lml, np.asarray(grad, dtype=np.float64)) if eval_gradient else lml
        k = kg = None
        if plan is None:
            k, kg = kernel(self.X_train_, eval_gradient=True) if eval_gradient else \
                (kernel(self.X_train_), None)
        y = self._targets()
        n, t = y.shape[0], (y.shape[1] if y.ndim == 2 else 1)
        nbytes, flops = _lml_cost(n, t, n_theta, eval_gradient, plan is None)
        op = Op("gp.log_marginal_likelihood", _engine_cuda.log_marginal_likelihood,
                _engine_host.log_marginal_likelihood, (x, y, self._noise(n), k, kg),
                {"plan": plan, "eval_gradient": eval_gradient}, nbytes=nbytes, flops=flops,
                like=y)
        cg = self._auto_cg(plan, y, with_jitter=False)
        if cg is not None:  # solver="auto": matrix-free where the Cholesky path does not fit
            op = op._replace(lighter=_cg_api.lml_op(x, y, cg[0], plan, eval_gradient, cg[1]))
        lml, grad = dispatch(op)
        lml = np.float64(lml)  # scikit-learn's type (a Python float would lose to float32 math)
        return (lml, np.asarray(grad, dtype=np.float64)) if eval_gradient else lml

    # -- prediction -----------------------------------------------------------------------

    def _training(self):
        """The fitted model (:class:`_Training`) for ``predict``'s dispatch. From
        ``RESIDENT_MIN_N`` points on it keeps the factor where ``fit`` left it on the GPU, or
        the copies the first GPU ``predict`` makes (saying so in :func:`gpulinalg.last_run`'s
        record), for the next calls."""
        return self._fitted

    @_dispatch.front_door("gp.GaussianProcessRegressor.predict")
    def predict(self, X: Any, return_std: bool = False,
                return_cov: bool = False) -> Any:
        """Posterior mean at ``X``, with its standard deviation or covariance if asked.

        Unfitted, predicts from the GP prior, as scikit-learn does.

        Parameters
        ----------
        X : (n_samples, n_features) array_like (NumPy, CuPy or torch), or list of objects
        return_std, return_cov : bool, default False
            At most one of them.

        Returns
        -------
        y_mean : (n_samples,) or (n_samples, n_targets) array, in ``X``'s package
        y_std : same shape as ``y_mean``, only with ``return_std``
        y_cov : (n_samples, n_samples) or (n_samples, n_samples, n_targets), only with
            ``return_cov``
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        fitted = self.__dict__.get("_fitted")
        factor = fitted.L if fitted is not None else None  # never a download from the GPU
        if is_dask(X, factor):
            return _on_dask("gp.predict", _regressor_dask.predict, (self, X),
                            {"return_std": return_std, "return_cov": return_cov,
                             "fitted": factor})
        like = X if _arrays.is_array(X) else None
        vector = self.kernel is None or self.kernel.requires_vector_input
        Xh = _arrays.to_host(X) if like is not None else X
        Xh = _validate_data(self, Xh, ensure_2d=vector, dtype="numeric" if vector else None,
                            reset=False)
        if not hasattr(self, "X_train_"):
            out = self._predict_prior(Xh, return_std, return_cov)
            if like is None:
                return out
            kind = _arrays.kind_of(like)
            return _arrays.convert_tree(out, lambda a: _arrays.to_kind(a, kind, like))
        mode = "cov" if return_cov else "std" if return_std else "mean"
        return self._predict_posterior(Xh, mode, like)

    def _predict_prior(self, X, return_std, return_cov):
        kernel = self.kernel if self.kernel is not None else \
            C(1.0, constant_value_bounds="fixed") * RBF(1.0, length_scale_bounds="fixed")
        return _regressor_host.prior(kernel, X, return_std, return_cov, self.n_targets)

    def _predict_posterior(self, X, mode, like):
        plan, x = self._plan(self.kernel_)
        xq = kq = kdiag = kqq = None
        if plan is not None:
            xq = np.asarray(X, dtype=np.float64)
        else:
            kq = np.asarray(self.kernel_(X, self.X_train_), dtype=np.float64)
            kdiag = np.asarray(self.kernel_.diag(X), dtype=np.float64) if mode == "std" else None
            kqq = np.asarray(self.kernel_(X), dtype=np.float64) if mode == "cov" else None
        train = self._training()
        if train.cg is not None:
            mean, extra = _cg_api.predict(np.asarray(X, dtype=np.float64), train,
                                          self._y_train_std, self._y_train_mean, plan, mode,
                                          *train.cg, like=like if like is not None else
                                          self.alpha_)
            return mean if mode == "mean" else (mean, extra)
        if train.x is None and x is not None:  # a factor set through L_
            train.x = x
        n, m = self.alpha_.shape[0], (X.shape[0] if hasattr(X, "shape") else len(X))
        t = self.alpha_.shape[1] if self.alpha_.ndim == 2 else 1
        rows = min(m, max(1, PREDICT_BLOCK_ELEMENTS // max(n, 1))) if mode != "cov" else m
        resident = train.device is not None  # the factor is on the GPU already
        item = 8 if train.refine is None else 4  # mixed: a float32 factor, 3 more blocks
        nbytes = (0 if resident else item * n * n) + 8 * (
            (4 if item == 8 else 7) * rows * n + m * (t + 2) + (m * m if mode == "cov" else 0))
        # A resident model's training arrays need no transfer: always worth the GPU when there.
        flops = None if train.keep else 2.0 * m * n * t + (n * n * m if mode != "mean" else 0)
        mean, extra = dispatch(Op(
            "gp.predict", _engine_cuda.predict, _engine_host.predict,
            (xq, train, np.atleast_1d(self._y_train_std), np.atleast_1d(self._y_train_mean),
             kq, kdiag, kqq),
            {"plan": plan, "mode": mode, "refine": train.refine}, nbytes=nbytes, flops=flops,
            like=like if like is not None else self.alpha_))
        return mean if mode == "mean" else (mean, extra)

    def sample_y(self, X: Any, n_samples: int = 1,
                 random_state: int | np.random.RandomState | None = 0) -> np.ndarray:
        """Draw samples from the GP (posterior once fitted, prior before) at ``X``.

        Parameters
        ----------
        X : (n_samples_X, n_features) array_like
        n_samples : int, default 1
        random_state : int, RandomState or None, default 0

        Returns
        -------
        y_samples : (n_samples_X, n_samples) or (n_samples_X, n_targets, n_samples) ndarray
        """
        rng = check_random_state(random_state)
        y_mean, y_cov = self.predict(_arrays.to_host(X) if _arrays.is_array(X) else X,
                                     return_cov=True)
        return _regressor_host.draw_samples(rng, y_mean, y_cov, n_samples)
