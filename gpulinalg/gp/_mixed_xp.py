"""Mixed precision for the largest exact GPs (``precision="mixed"``): the kernel matrix and its
Cholesky factor in float32, every solve with them refined to float64 accuracy.

An exact GP at n = 100 000 holds an 80 GB float64 kernel matrix; in float32 it takes 40 GB,
so the largest ``n`` that fits on one GPU grows by a factor of about 1.4. A float32 factor used
as it is moves the predictions by about ``kappa(K) eps32`` of their scale (1e-5 on the
benchmark's problem, where float64 agrees with scikit-learn to 1e-9). Here the float32 factor
is a preconditioner only: each solve ``K^-1 b`` (``fit``'s ``alpha``; ``K^-1 k(X, X*)`` for
``predict``'s spread) is refined by classical iterative refinement, with the residual
``b - K x`` in float64 and ``K x`` made from the kernel row block by row block
(:meth:`~._kernels_xp.KernelPlan.product`), never stored. Each step multiplies the error by
about ``kappa(K) eps32``; one or two steps reach the float64 solution's accuracy when
``kappa(K) eps32`` is well below 1, and when it is not the refinement stalls and says so
(:class:`~gpulinalg.IllConditionedWarning`).

predict's spread needs only the quadratic form ``k^T K^-1 k`` of each query point's
cross-kernel column ``k``, not the solve itself: :func:`spread` takes it from one float32
solve ``w``, one product for its residual ``r = k - K w`` and one float32 triangular solve
``L^-1 r`` (:func:`quadratic`), with an error of third order in the float32 solve's where a
refined solve's result is of first order. Where its own estimate of that error is above
float64's bar, ``w`` is refined one step and the form taken again (fifth order after two
products).

Written once for NumPy and CuPy, on the engine ``la`` of :mod:`._fit_xp`.
"""

import numpy as np

from .._runtime.errors import IllConditionedWarning, warn
from .._runtime.validation import namespace
from ._results import GPSolveResult
from ._solve_xp import cholesky_jitter, gaussian_lml

__all__ = ["LOW", "MAX_STEPS", "TOL", "ACCEPT", "Operator", "refined_solve", "quadratic",
           "spread", "mixed_solve"]

#: The dtype of the kernel matrix and its factor.
LOW = np.dtype(np.float32)
#: Most refinement steps of one solve.
MAX_STEPS = 8
#: Refinement stops once a step's correction is at most this fraction of the solution.
TOL = 1e-12
#: A refinement that stalls (a correction more than half the previous one) with its last
#: correction at most this fraction of the solution has reached float64's own accuracy for
#: this ``K``; above it, a warning says how far it got.
ACCEPT = 1e-9


class Operator:
    """``v -> (k(X) + diag(d)) v`` in float64 from the kernel ``plan``, made row block by row
    block (``d``: the noise ``alpha``, a number or one per point, plus the jitter that the
    factorization added)."""

    #: What ``last_run().details["cg_products"]`` says of the matrix-free solver's products.
    route = "library"

    def __init__(self, plan, x, diag):
        self.plan, self.x, self.shift = plan, x, x.mean(axis=0)
        self.diag = diag

    def __call__(self, v):
        out = self.plan.product(self.x, v, shift=self.shift)
        d = self.diag
        if getattr(d, "ndim", 0):  # one alpha per point: scales rows
            d = d.reshape((-1,) + (1,) * (v.ndim - 1))
        out += d * v
        return out

    def lml_gradient(self, left, right, pre, scale):
        """``1/2 sum_ij W_ij dK_ij/dlog theta`` (``theta``'s order) for the matrix-free
        likelihood's weights ``W = left right^T - scale P^-1`` (``pre``: the preconditioner
        ``P`` of :mod:`._precond_xp`), ``W``'s rows made block by block."""
        def w_rows(i0, i1):
            w = left[i0:i1] @ right.T
            w -= scale * pre.dense_rows(i0, i1)
            return w

        return 0.5 * self.plan.contract(self.x, w_rows, shift=self.shift)


def _to_low(b):
    """``(low, scale)``: ``b`` scaled per column into float32's range (a residual can be far
    below its solution's scale) and rounded into float32 as it is written (no float64 copy),
    and the per-column scale ``(1, ...)``."""
    xp = namespace(b)
    scale = xp.maximum(b.max(axis=0, keepdims=True), -b.min(axis=0, keepdims=True))
    scale = xp.where(scale > 0, scale, 1.0)
    low = xp.empty(b.shape, dtype=LOW)
    xp.divide(b, scale, out=low)
    return low, scale


def _solve_low(la, L, b):
    """``K^-1 b`` with the float32 factor ``L`` (:func:`_to_low` first); the result in ``b``'s
    dtype."""
    xp = namespace(b)
    if b.shape[0] == 0:
        return xp.zeros(b.shape, dtype=b.dtype)
    low, scale = _to_low(b)
    return la.cho_solve(L, True, low, True, LOW) * scale  # float32 * float64: float64


def refined_solve(la, L, apply, b):
    """``x = K^-1 b`` in ``b``'s dtype (float64) from the float32 factor ``L`` of ``K`` and
    ``apply(v) = K v`` in float64: one float32 solve, then refinement steps ``x += K^-1 (b -
    K x)`` until a correction is at most :data:`TOL` of ``x`` (one read-back per step).
    Returns ``(x, steps)``."""
    xp = namespace(b)
    x = _solve_low(la, L, b)
    previous, size, steps = None, 0.0, 0
    while steps < MAX_STEPS:
        r = apply(x)
        xp.subtract(b, r, out=r)  # the residual in the product's own memory
        d = _solve_low(la, L, r)
        del r
        x += d
        steps += 1
        top = float(xp.abs(x).max()) if x.size else 0.0
        size = float(xp.abs(d).max()) / top if top > 0 else 0.0
        if size <= TOL or (previous is not None and size > previous / 2):
            break
        previous = size
    if size > ACCEPT:
        _stalled("solve", steps, f"a last correction of {size:.1e} of the solution")
    return x, steps


def _stalled(what, steps, how_far):
    """The warning of a refinement that stopped above the bar."""
    warn(f"gpulinalg.gp: the mixed-precision {what} stopped after {steps} refinement steps "
         f"with {how_far}: the kernel matrix is too ill conditioned for a float32 factor "
         "(precision='float64' avoids this, at twice the memory)", IllConditionedWarning)


def quadratic(la, L, apply, k, w, full=False):
    """``(q, t, u, scale)``: ``q = k^T K^-1 k`` in float64 for the ``(n, b)`` columns ``k``, its
    diagonal ``(b,)`` or, ``full``, the whole ``(b, b)`` matrix (made symmetric), from an
    approximate solve ``w`` of ``K w = k``; ``t`` ``(b,)``, the diagonal of its last term, which
    measures how far ``w`` is off; ``u * scale = L^-1 r`` in float32 for the residual ``r``.

    With ``r = k - K w`` in float64 (``apply``) and ``e = K^-1 r = K^-1 k - w``,
    ``k_i^T K^-1 k_j = w_i^T (k_j + r_j) + r_i^T K^-1 r_j`` holds exactly for any ``w``. The
    first term is formed in float64; the last, of second order in ``e``, is taken as
    ``(L^-1 r_i)^T (L^-1 r_j)`` from the float32 factor ``L``, whose own error is of third
    order: about ``sqrt(t / q) t`` per column."""
    xp = namespace(k)
    r = apply(w)
    xp.subtract(k, r, out=r)  # the residual in the product's own memory
    low, scale = _to_low(r)
    u = la.solve_triangular(L, low, 0, True, False, True, LOW)
    del low
    r += k
    if full:
        third = (u.T @ u).astype(np.float64) * (scale.T * scale)
        q = w.T @ r
        q += third
        return 0.5 * (q + q.T), xp.diagonal(third).copy(), u, scale
    t = (u * u).sum(axis=0, dtype=np.float64) * scale[0] ** 2
    r *= w
    return r.sum(axis=0) + t, t, u, scale


def spread(la, L, apply, k, prior, full=False):
    """The posterior variance ``prior - k^T K^-1 k`` of the query points whose cross-kernel
    columns are ``k`` ``(n, b)`` (``prior``: ``k(x*)``'s diagonal ``(b,)``) or, ``full``, their
    covariance (``prior``: ``k(x*)``, ``(b, b)``), by :func:`quadratic` from ``w = M^-1 k``
    (the float32 factor). Where its error estimate is above :data:`ACCEPT` of a variance
    (plus :data:`TOL` of the quadratic form, float64's own), ``w`` takes one refinement step
    ``w += M^-1 r`` (the half ``L^-1 r`` is the estimate's own) and the form is taken again:
    after ``j`` products its error is about ``(kappa(K) eps32)^(2 j + 1)`` of it. A refinement
    that stalls above the bar warns."""
    xp = namespace(k)
    w = _solve_low(la, L, k)
    steps, previous = 0, None
    while True:
        q, t, u, scale = quadratic(la, L, apply, k, w, full)
        steps += 1
        qd = xp.diagonal(q) if full else q
        size = xp.abs(qd)
        relative = xp.sqrt(t / xp.where(size > 0, size, 1.0))  # of the error, per column
        var = (xp.diagonal(prior) if full else prior) - qd
        over = relative * t - ACCEPT * xp.abs(var) - TOL * size
        if not k.shape[1] or not bool((over > 0).any()):
            return prior - q
        worst = float((relative ** 3).max())  # the estimated error / q, its largest
        if steps >= MAX_STEPS or (previous is not None and worst > previous / 2):
            break
        previous = worst
        w += la.solve_triangular(L, u, 1, True, False, True, LOW) * scale
    _stalled("variances", steps, f"an estimated error of {worst:.1e} of k^T K^-1 k")
    return prior - q


def mixed_solve(la, k, x, y, noise, plan, *, jitter):
    """``fit``'s final factorization in mixed precision, after :func:`._fit_xp.fit_body` has
    built the kernel matrix ``k`` in float32 tiles (:data:`LOW`, the noise on its diagonal):
    ``k`` factored in place (the jitter schedule as in float64), ``alpha`` refined in float64
    against ``k(X) + diag(noise + jitter)``, ``log |K|`` from the float32 factor (summed in
    float64)."""
    L, used = cholesky_jitter(la, k, jitter, overwrite_k=True, symmetric=True)
    del k
    xp = namespace(L)
    alpha, _ = refined_solve(la, L, Operator(plan, x, noise + used), y)
    logdet = 2.0 * float(xp.log(L.diagonal().astype(np.float64)).sum())
    y2 = y.reshape(y.shape[0], -1)
    lml = gaussian_lml(y2, alpha.reshape(y2.shape), logdet)
    return GPSolveResult(alpha, L, logdet, lml, float(used))
