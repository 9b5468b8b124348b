"""Mixed-precision solves for any array module: a double-precision system factored in single
precision and refined to double-precision accuracy (LAPACK's ``?sgesv`` / ``?sposv``
algorithm), which first asks the single-precision factor's condition estimate whether
refinement can converge at all.

The engines hand in their own pieces: the single-precision factorization and its solves, and
the double-precision solve that answers when refinement cannot.
"""

import math

import numpy as np

from ..._runtime.arrays import to_host
from ..._runtime.records import note
from .._checks import broadcast_batch
from ._lu_xp import inv_norm1_estimate, structured

__all__ = ["refined_solve", "mixed_applies", "system", "MIXED_KINDS", "LOWER", "CONTRACTION",
           "ITERATIONS", "SHRINK"]

#: Structures that :func:`refined_solve` takes (LU; "pos": Cholesky); the others solve at
#: their own cost (triangles, diagonals, bands) in full precision.
MIXED_KINDS = (None, "gen", "sym", "her", "pos")

#: The single precision of each double-precision dtype.
LOWER = {np.dtype(np.float64): np.dtype(np.float32),
         np.dtype(np.complex128): np.dtype(np.complex64)}
#: Largest ``cond_1(A) * u`` (``u`` the factor's unit roundoff) that is refined: each step
#: then shrinks the error about tenfold, so a few steps reach double precision.
CONTRACTION = 0.1
#: Refinement steps at most (LAPACK's ``ITERMAX``).
ITERATIONS = 30
#: Least shrinkage of the residual per step: a slower refinement costs more steps than the
#: double-precision solve it replaces (a TF32 factor's steps contract less than a float32 one's).
SHRINK = 0.25


def refined_solve(xp, a, b, factor, solve_low, solve_full, *, lowered=None, matvec=None,
                  norms=None):
    """``a^-1 b`` for the double-precision stack ``a`` ``(B, n, n)`` and ``b`` ``(B, n, k)``.

    ``factor(a_low)``: the single-precision factor of ``a`` cast down, or ``None`` where it
    failed (a zero pivot, not positive definite, overflow); ``solve_low(f, x, adjoint)``:
    ``A^-1 x`` (``A^-H x``) through that factor for a single-precision ``(B, n, m)`` ``x``;
    ``solve_full()``: the double-precision solve of the whole system. The double-precision
    answer is taken when the factor fails, when ``cond_1(A) u`` is above :data:`CONTRACTION`
    by the factor's own estimate (three single-precision solves; ``u`` single precision's
    unit roundoff), or when a refinement step leaves more than :data:`SHRINK` of the last
    residual (a factor with TF32 products refines more slowly than a float32 one);
    ``last_run().details`` says which precision answered, why,
    the condition estimate, the steps and the residual history.

    An engine that reads ``a`` its own way (one triangle of a symmetric matrix) hands in
    ``lowered()`` (the single-precision matrix ``factor`` takes), ``matvec(x)`` (``a @ x``) and
    ``norms()`` (``(||A_i||_1 (B,), ||A_i||_inf (B, 1))``); by default they are read from
    ``a``.

    Every step is LAPACK's: ``r = b - A x`` in double precision, ``x += A_low^-1 r``; it stops
    when every column has ``||r||_inf <= ||x||_inf ||A||_inf eps sqrt(n)``.

    >>> a = np.array([[[4.0, 1.0], [2.0, 3.0]]]); b = np.array([[[1.0], [2.0]]])
    >>> x = refined_solve(np, a, b, lambda m: np.linalg.inv(m),
    ...                   lambda f, x, adj: (f.conj().swapaxes(-1, -2) if adj else f) @ x,
    ...                   lambda: np.linalg.solve(a, b))
    >>> bool(np.allclose(a @ x, b, rtol=0, atol=1e-15))
    True
    """
    low = LOWER[np.dtype(a.dtype)]
    nb, n, _ = a.shape
    # out of single precision's range: the factor fails or its estimate is not finite
    with np.errstate(over="ignore", invalid="ignore"):
        f = factor(a.astype(low) if lowered is None else lowered())
        if f is None:
            return _full(solve_full, "the single-precision factor failed (a zero pivot, not "
                         "positive definite, or out of its range)")
        norm1, norm_inf = _norms(xp, a) if norms is None else norms()
        est = inv_norm1_estimate(lambda x, adjoint: solve_low(f, x, adjoint), nb, n, low, xp)
        cond = float(np.max(to_host(norm1 * est))) if nb else 0.0
    unit = float(np.finfo(low).eps) / 2
    if not math.isfinite(cond) or cond * unit > CONTRACTION:
        return _full(solve_full, f"condition estimate {cond:.3g}: refinement from single "
                     f"precision cannot converge (needs cond * {unit:.2g} <= {CONTRACTION})",
                     condition_estimate=cond)
    eps = float(np.finfo(a.dtype).eps)
    x = solve_low(f, b.astype(low), False).astype(a.dtype)
    history: list[float] = []
    for step in range(ITERATIONS):
        r = b - (a @ x if matvec is None else matvec(x))
        rn = xp.abs(r).max(axis=-2)
        xn = xp.abs(x).max(axis=-2)
        done, ratio = _judge(xp, rn, xn, norm_inf, eps * math.sqrt(n))
        history.append(ratio)
        if done:
            note(precision="mixed", condition_estimate=cond, refinement_steps=step,
                 residual_history=history)
            return x
        if not math.isfinite(ratio) or (step >= 1 and ratio > SHRINK * history[-2]):
            break  # too slow to pay for itself: the double-precision solve answers
        x = x + solve_low(f, r.astype(low), False).astype(a.dtype)
    return _full(solve_full, f"refinement stopped converging after {len(history)} steps",
                 condition_estimate=cond, residual_history=history)


def mixed_applies(dtype, kind):
    """Whether a system of ``dtype`` and structure ``kind`` is refined from single precision
    (else it solves in its own, and the record says why)."""
    if np.dtype(dtype) in LOWER and kind in MIXED_KINDS:
        return True
    note(precision="full", mixed_fallback=f"{np.dtype(dtype)} {kind or 'general'} systems "
         "solve in their own precision")
    return False


def system(xp, a, b, kind, lower, transposed):
    """``(A, B, shape)``: the ``(B, n, n)`` matrices the solver reads (a named triangle
    mirrored; ``a^T`` for ``transposed``) and the ``(B, n, k)`` right-hand sides, broadcast;
    ``shape`` the solution's shape (SciPy's rules for a 1-D ``b``)."""
    m = structured(a, "her" if kind == "pos" else kind, lower, xp)
    if transposed:
        m = m.swapaxes(-1, -2)
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    n, k = b2.shape[-2:]
    batch = broadcast_batch(tuple(m.shape[:-2]), tuple(b2.shape[:-2]))
    shape = batch + ((n,) if vec else (n, k))
    nb = math.prod(batch)
    m3 = xp.broadcast_to(m, batch + (n, n)).reshape(nb, n, n)
    b3 = xp.broadcast_to(b2, batch + (n, k)).reshape(nb, n, k)
    return m3, b3, shape


def _norms(xp, a):
    """``(||A_i||_1 (B,), ||A_i||_inf (B, 1))``: one pass over ``|a|`` for both."""
    mags = xp.abs(a)
    return mags.sum(axis=-2).max(axis=-1), mags.sum(axis=-1).max(axis=-1)[:, None]


def _judge(xp, rn, xn, norm_inf, tol):
    """(``True`` when every column converged, the largest ``||r|| / (||x|| ||A||)``): one
    read-back."""
    scale = xn * norm_inf
    figures = xp.stack([(rn - scale * tol).max(), (rn / xp.where(scale > 0, scale, 1)).max()])
    worst, ratio = (float(v) for v in to_host(figures))
    return bool(worst <= 0), ratio


def _full(solve_full, why, **details):
    note(precision="full", mixed_fallback=why, **details)
    return solve_full()
