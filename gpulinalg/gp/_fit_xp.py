"""The bodies of the regressor's operations (log marginal likelihood and its gradient, the
final factorization of ``fit``, ``predict``), written once for any array module.

The dispatcher's GPU function (:mod:`._engine_cuda`) runs them on CuPy arrays and its CPU
function (:mod:`._engine_host`) on NumPy arrays, each passing its linear-algebra engine ``la``:
decomp's internal layer (``cholesky``, ``cho_solve``, ``solve_triangular``, ``logdet``, arrays
already on the right device) and ``cho_inverse`` (``K^-1`` in its Cholesky factor's memory: on
the GPU ``L^-1`` by ``trsm`` then one ``gemm``, on the CPU ``potri`` and :func:`mirror_lower`).
Kernel matrices
come from a :class:`~._kernels_xp.KernelPlan` when the kernel has one, else they arrive
precomputed by scikit-learn (``k``, ``k_grad``).
"""

import math

from .._runtime.errors import LinAlgError, warn
from .._runtime.validation import namespace
from . import _mixed_xp
from ._kernels_xp import BLOCK_ELEMENTS, PREDICT_BLOCK_ELEMENTS
from ._solve_xp import solve_body, symmetric_view

__all__ = ["lml_body", "fit_body", "predict_body", "mirror_lower", "Operations"]


def _kernel_matrix(x, k, noise, plan, *, lazy=False, dtype=None):
    """``k(x) + diag(noise)`` (our own array, safe to overwrite), checked for NaN/Inf; stored
    in ``dtype`` (a plan's only; default ``x``'s).

    With ``lazy``, returns ``(matrix, bad)`` instead, ``bad`` a 0-d boolean array for
    :func:`_raise_if_bad` to read later (no device synchronization now). The check runs in row
    blocks of the plan's ``block_elements``, so that it needs no ``n x n`` boolean temporary.
    """
    if plan is not None:
        k = plan.matrix(x, dtype=dtype)
    elif not k.flags.c_contiguous:
        k = namespace(k).ascontiguousarray(k)
    bad = _nonfinite(k, plan.block_elements if plan is not None else BLOCK_ELEMENTS)
    if not lazy:
        _raise_if_bad(bad)
    k.reshape(-1)[::k.shape[0] + 1] += noise
    return (k, bad) if lazy else k


def _nonfinite(k, block_elements):
    """Whether ``k`` holds NaN or Inf, as a 0-d boolean array, read in row blocks."""
    xp, n = namespace(k), k.shape[0]
    step = max(1, block_elements // max(k.shape[1], 1))
    bad = None
    for i0 in range(0, n, step):  # per row first: spreads the reduction over the GPU
        part = ~xp.isfinite(k[i0:i0 + step]).all(axis=1).all()
        bad = part if bad is None else bad | part
    return bad if bad is not None else xp.zeros((), dtype=bool)


def _raise_if_bad(bad):
    if bool(bad):
        raise ValueError("the kernel matrix contains NaN or Inf; check the kernel's "
                         "hyperparameters and the training inputs")


def _contract_fallback(w_rows, k_grad):
    """``sum_ij W_ij k_grad_ijp`` in row blocks, for a gradient tensor from scikit-learn."""
    xp = namespace(k_grad)
    n, p = k_grad.shape[0], k_grad.shape[2]
    total = xp.zeros(p, dtype=k_grad.dtype)
    step = max(1, BLOCK_ELEMENTS // max(n * max(p, 1), 1))
    for i0 in range(0, n, step):
        i1 = min(i0 + step, n)
        total += w_rows(i0, i1).reshape(-1) @ k_grad[i0:i1].reshape(-1, p)
    return total


def lml_body(la, x, y, noise, k, k_grad, *, plan, eval_gradient):
    """Log marginal likelihood (and gradient in log-hyperparameters) of a GP on ``(x, y)``.

    One kernel matrix, one Cholesky in place, ``alpha`` by ``cho_solve``; with the gradient,
    ``K^-1`` in the factor's memory (``la.cho_inverse``: on the GPU ``L^-1`` by cuBLAS ``trsm``
    in a second ``n x n`` buffer, then ``L^-T L^-1`` by ``gemm``; on the CPU, or without
    headroom for that buffer, LAPACK/cuSOLVER ``potri`` with its lower triangle mirrored) and
    ``g = 1/2 sum(W * dK/dtheta)``, ``W = alpha alpha^T - K^-1`` made row block by row block in
    ``K^-1``'s own rows and contracted against the kernel's derivatives
    (:meth:`~._kernels_xp.KernelPlan.contract`): no gradient tensor. Like scikit-learn, a kernel
    matrix that is not positive definite gives ``-inf`` (and a zero gradient) so that the
    optimizer steps back, rather than jitter. The likelihood stays a 0-d array of the inputs'
    package (no device synchronization for it).
    """
    n_theta = plan.n_theta if plan is not None else (k_grad.shape[2] if eval_gradient else 0)
    K, bad = _kernel_matrix(x, k, noise, plan, lazy=True)
    xp = namespace(K)
    try:  # NaN or Inf in K always fails the factorization (NaN reaches the diagonal)
        # cho_factor in place (other triangle kept): K is ours and symmetric
        L = la.cholesky(symmetric_view(K), True, True, False, K.dtype)
    except LinAlgError:  # not positive definite, or a factorization that overflowed
        _raise_if_bad(bad)
        return -math.inf, (xp.zeros(n_theta, dtype=K.dtype) if eval_gradient else None)
    del K
    y2 = y.reshape(y.shape[0], -1)
    n, t = y2.shape
    a = la.cho_solve(L, True, y2, False, L.dtype)
    lml = (-0.5 * (y2 * a).sum() - 0.5 * t * la.logdet(L, L.dtype)
           - 0.5 * t * n * math.log(2.0 * math.pi))
    if not eval_gradient:
        _raise_if_bad(bad)  # for a factorization that a NaN did not stop, should one ever
        return lml, None
    kinv = la.cho_inverse(L)  # in L's (K's) memory: the factor is not needed any more
    del L

    def w_rows(i0, i1):  # rows of W, made in place in rows of K^-1 (each read once)
        w = kinv[i0:i1]
        w *= -t
        w += a[i0:i1] @ a.T
        return w

    grad = plan.contract(x, w_rows) if plan is not None else _contract_fallback(w_rows, k_grad)
    _raise_if_bad(bad)
    return lml, 0.5 * grad


def mirror_lower(c, tile=None):
    """Copy the lower triangle of the square ``c`` onto its upper triangle, in place, in
    diagonal tiles of ``tile`` (default: the largest with ``tile^2 <= BLOCK_ELEMENTS``) and
    the panels beside them; returns ``c``, now symmetric. Used after ``potri``, which writes
    only the lower triangle of ``K^-1``."""
    xp, n = namespace(c), c.shape[0]
    tile = tile or max(1, math.isqrt(BLOCK_ELEMENTS))
    for j0 in range(0, n, tile):
        j1 = min(j0 + tile, n)
        d = c[j0:j1, j0:j1]
        d[...] = xp.where(xp.tri(j1 - j0, dtype=bool), d, d.T)  # a new array, then copied
        if j1 < n:
            c[j0:j1, j1:] = c[j1:, j0:j1].T
    return c


def fit_body(la, x, y, noise, k, train, *, plan, jitter, precision="float64"):
    """``fit``'s final factorization: one kernel matrix, one Cholesky in place, ``alpha_`` by
    ``cho_solve`` and the log marginal likelihood; no gradient, no inverse. ``precision``
    "mixed" (a kernel ``plan`` only): the matrix and its factor in float32, ``alpha_`` refined
    in float64 (:func:`._mixed_xp.mixed_solve`).

    The factor goes to ``la.keep(train, x, L, alpha)`` (kept on the device for ``predict``, or
    handed to the host), so the result's ``L`` is ``None``; ``train.precision`` says which
    precision ran."""
    train.precision = precision
    if precision == "mixed":
        K = _kernel_matrix(x, None, noise, plan, dtype=_mixed_xp.LOW)
        res = _mixed_xp.mixed_solve(la, K, x, y, noise, plan, jitter=jitter)
    else:
        K = _kernel_matrix(x, k, noise, plan)
        res = solve_body(la, K, y, jitter=jitter, symmetric=True)
    la.keep(train, x, res.L, res.alpha)
    return res._replace(L=None)


def _query_rows(m, n, plan):
    """Row blocks of ``m`` query points against ``n`` training points for ``predict``."""
    elements = plan.predict_elements if plan is not None else PREDICT_BLOCK_ELEMENTS
    step = max(1, elements // max(n, 1))
    return [(i, min(i + step, m)) for i in range(0, m, step)]


def predict_body(la, xq, x, L, a, scale, shift, kq, kdiag, kqq, *, plan, mode, refine=None,
                 spread=None):
    """Posterior mean and, for ``mode`` "std" or "cov", its standard deviation or covariance.

    Follows scikit-learn's ``GaussianProcessRegressor.predict`` (undoing ``normalize_y`` and
    squeezing single-output shapes), in row blocks of the query points for "mean" and "std":
    per block the cross-kernel ``K(X*, X)``, the mean ``K(X*, X) alpha`` and, for the spread,
    one triangular solve ``V = L^-1 K(X, X*)`` (``L^-1`` is never formed).

    ``refine`` (a mixed-precision fit's float32 ``L``): the diagonal that the fit added to
    ``k(X)`` (noise plus jitter); the spread then comes from ``K(X*, X) K^-1 K(X, X*)`` to
    float64's accuracy (:func:`._mixed_xp.spread`).

    ``spread`` (instead of ``L``, which may then be ``None``): ``spread(kT, prior, full)``
    gives ``prior - kT^T K^-1 kT`` (``full``) or its diagonal from ``prior``'s diagonal, for
    a block ``kT = K(X, X*)``; the matrix-free solver's (:mod:`._cg_fit_xp`).
    """
    xp = namespace(a)
    if refine is not None:
        op = _mixed_xp.Operator(plan, x, refine if not hasattr(refine, "shape")
                                else xp.asarray(refine))

        def spread(kT, prior, full=False):
            return _mixed_xp.spread(la, L, op, kT, prior, full=full)
    m, center = (xq.shape[0] if xq is not None else kq.shape[0]), None
    if plan is not None:
        center = x.mean(axis=0)
    means, variances, vs = [], [], []
    for i0, i1 in (_query_rows(m, a.shape[0], plan) if mode != "cov" else [(0, m)]):
        kt = plan.matrix(xq[i0:i1], x, shift=center) if plan is not None else kq[i0:i1]
        means.append(kt @ a)
        if mode == "mean":
            continue
        if spread is not None:
            if mode == "cov":
                vs.append(kt)
            else:
                variances.append(spread(kt.T, plan.diag(xq[i0:i1])))
            continue
        v = la.solve_triangular(L, kt.T, 0, True, False, False, L.dtype)
        if mode == "cov":
            vs.append(v)
            continue
        kd = plan.diag(xq[i0:i1]) if plan is not None else kdiag[i0:i1]
        variances.append(kd - (v * v).sum(axis=0))
    mean = scale * xp.concatenate(means) + shift
    if mean.ndim > 1 and mean.shape[1] == 1:
        mean = mean[:, 0]
    if mode == "mean":
        return mean, None
    if mode == "cov":
        kxx = plan.matrix(xq, shift=center) if plan is not None else kqq
        if spread is not None:
            cov = spread(vs[0].T, kxx, full=True)
        else:
            v = vs[0]
            cov = kxx - v.T @ v
        cov = (cov[:, :, None] * (scale ** 2)[None, None, :])
        return mean, (cov[:, :, 0] if cov.shape[2] == 1 else cov)
    var = xp.concatenate(variances)
    negative = var < 0
    if bool(negative.any()):
        warn("Predicted variances smaller than 0. Setting those variances to 0.", UserWarning)
        var[negative] = 0.0
    var = var[:, None] * (scale ** 2)[None, :]
    return mean, xp.sqrt(var[:, 0] if var.shape[1] == 1 else var)


class Operations:
    """gp's four operations on one linear-algebra engine ``la``: the dispatcher's GPU functions
    (``la`` = :mod:`._engine_cuda`) or CPU functions (``la`` = :mod:`._engine_host`), with the
    same signatures. ``la.training(train)`` gives predict the fitted ``(x, L, alpha)`` on its
    device."""

    def __init__(self, la):
        self.la = la

    def exact_gp_solve(self, k, y, *, jitter):
        return solve_body(self.la, k, y, jitter=jitter, overwrite_k=False)

    def log_marginal_likelihood(self, x, y, noise, k, k_grad, *, plan, eval_gradient):
        return lml_body(self.la, x, y, noise, k, k_grad, plan=plan, eval_gradient=eval_gradient)

    def fit(self, x, y, noise, k, train, *, plan, jitter, precision="float64"):
        return fit_body(self.la, x, y, noise, k, train, plan=plan, jitter=jitter,
                        precision=precision)

    def predict(self, xq, train, scale, shift, kq, kdiag, kqq, *, plan, mode, refine=None):
        x, L, a = self.la.training(train)
        return predict_body(self.la, xq, x, L, a, scale, shift, kq, kdiag, kqq, plan=plan,
                            mode=mode, refine=refine)
