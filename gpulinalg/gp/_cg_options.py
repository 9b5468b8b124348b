"""The options of the matrix-free solver (``GaussianProcessRegressor(solver="cg",
cg_options=...)``): one frozen, validated record, and the rule that resolves ``solver="auto"``.
No array computation here."""

import dataclasses
import numbers
from typing import Any

__all__ = ["CGOptions", "SOLVERS", "VARIANCES", "PRODUCTS", "cg_options", "resolve_solver"]

#: The values of ``GaussianProcessRegressor(solver=...)``.
SOLVERS = ("auto", "cholesky", "cg")
#: The values of ``CGOptions.variance``.
VARIANCES = ("auto", "lanczos", "exact")
#: The values of ``CGOptions.products``.
PRODUCTS = ("auto", "matrix-free")


@dataclasses.dataclass(frozen=True)
class CGOptions:
    """Tolerances and sizes of the matrix-free solver.

    Attributes
    ----------
    tol : float, default 1e-6
        Conjugate gradients stop once every right-hand side's residual is at most ``tol``
        times its norm (``||b - K x|| <= tol ||b||``), the targets and the probes alike: the
        solves of ``fit``'s ``alpha_`` and of ``predict``.
    lml_tol : float, default 1e-2
        The same for the likelihood's evaluations (``log_marginal_likelihood(theta)`` and
        every step of the hyperparameter optimizer): their error is the stochastic
        quadrature's (``n_probes``, ``precond_rank``), which a tighter tolerance does not
        lower. At least 1e-4, the GPU's kernel products take float32 arithmetic (float64
        sums across tiles); below it, float64.
    max_iter : int, default 1000
        Most iterations (one kernel-matrix product each); reaching it warns
        (:class:`~gpulinalg.IllConditionedWarning`).
    precond_rank : int, default 100
        Rank of the pivoted-Cholesky preconditioner (0: none; it stops earlier where the
        kernel's own rank is exhausted).
    n_probes : int, default 32
        Random probe vectors of the stochastic Lanczos quadrature (log-determinant) and of the
        trace terms of the gradient.
    seed : int, default 0
        Seed of the probes: the same vectors at every evaluation, so that the optimizer sees
        one smooth objective; also of the Lanczos process's starting block.
    variance : {"auto", "lanczos", "exact"}, default "auto"
        How ``predict(return_std=True)`` gets ``k(X*, X) K^-1 k(X, X*)``. ``"exact"``:
        conjugate-gradient solves, one column per query point. ``"lanczos"``: LOVE (Pleiss et
        al. 2018): a rank-``r`` factor ``K^-1 ~ R R^T`` by block Lanczos, built at the first
        ``predict`` that needs it and cached on the fitted model (a refit drops it), then one
        product with ``R`` per query block; its rank grows until the standard deviations of
        32 of that first call's query points are within ``lanczos_tol`` of their exact
        values, and where ``lanczos_rank`` is reached first it warns
        (:class:`~gpulinalg.ResidualWarning`). ``"auto"``: the factor once it is cached, or
        from 1000 query points on (below, the exact solves cost less than building it);
        where it fails its check, exact solves for this and later calls. ``return_cov``
        always takes exact solves.
    lanczos_rank : int, default 1024
        Largest rank of the Lanczos factor (``n x r`` numbers are kept on the model).
    lanczos_tol : float, default 1e-4
        The factor's check: the largest difference of standard deviation at the check points,
        in the kernel's units (``normalize_y``'s scale is applied after).
    products : {"auto", "matrix-free"}, default "auto"
        How the kernel-matrix products ``K v`` are made on the GPU. ``"auto"``: where the
        device's free memory (beyond what the run itself needs) holds the kernel matrix in
        the products' arithmetic (float32 where the solve's tolerance is at least 1e-4,
        ``4 n^2`` bytes; else float64, ``8 n^2``), it is made once per solve and every
        product is one matrix product (cuBLAS GEMM); elsewhere, and with
        ``"matrix-free"``, every product makes the entries anew and stores none.
        ``last_run().details["cg_products"]`` says which ran. The CPU's products are always
        matrix-free.

    Examples
    --------
    >>> CGOptions(tol=1e-8).tol
    1e-08
    >>> CGOptions(n_probes=0)
    Traceback (most recent call last):
    ...
    ValueError: cg_options['n_probes'] must be an int >= 1, got 0
    >>> CGOptions(variance="love")
    Traceback (most recent call last):
    ...
    ValueError: cg_options['variance'] must be one of ('auto', 'lanczos', 'exact'), got 'love'
    """

    tol: float = 1e-6
    lml_tol: float = 1e-2
    max_iter: int = 1000
    precond_rank: int = 100
    n_probes: int = 32
    seed: int = 0
    variance: str = "auto"
    lanczos_rank: int = 1024
    lanczos_tol: float = 1e-4
    products: str = "auto"

    def __post_init__(self):
        for name in ("tol", "lml_tol", "lanczos_tol"):
            tol = getattr(self, name)
            if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 < tol < 1:
                raise ValueError(f"cg_options[{name!r}] must be a number in (0, 1), got {tol!r}")
        for name, allowed in (("variance", VARIANCES), ("products", PRODUCTS)):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise ValueError(f"cg_options[{name!r}] must be one of {allowed}, got "
                                 f"{value!r}")
        for name, low in (("max_iter", 1), ("precond_rank", 0), ("n_probes", 1), ("seed", 0),
                          ("lanczos_rank", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
                raise ValueError(f"cg_options[{name!r}] must be an int >= {low}, got {value!r}")


def cg_options(options: Any) -> CGOptions:
    """The :class:`CGOptions` of a ``cg_options`` parameter (``None``, a dict or a
    :class:`CGOptions`); unknown keys raise ``ValueError`` naming the known ones.

    >>> cg_options({"precond_rank": 20}).precond_rank
    20
    >>> cg_options({"rank": 20})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown cg_options key(s) ['rank']; known: ['lanczos_rank', 'lanczos_tol', ...]
    """
    if options is None:
        return CGOptions()
    if isinstance(options, CGOptions):
        return options
    if not isinstance(options, dict):
        raise TypeError(f"cg_options must be a dict or None, got {options!r}")
    known = {f.name for f in dataclasses.fields(CGOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown cg_options key(s) {unknown}; known: {sorted(known)}")
    return CGOptions(**options)


def resolve_solver(solver: str) -> str:
    """``"cholesky"`` or ``"cg"`` for the ``solver`` parameter.

    ``"auto"`` is the Cholesky path everywhere for now: it will pick ``"cg"`` past the
    Cholesky path's memory once the matrix-free GPU path is measured (issue 43).

    >>> resolve_solver("auto"), resolve_solver("cg")
    ('cholesky', 'cg')
    """
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    return "cholesky" if solver == "auto" else solver
