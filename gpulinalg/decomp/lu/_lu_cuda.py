"""GPU engine of the LU family: cuSOLVER ``Xgetrf``/``Xgetrs`` per matrix (on stream lanes for
a stack), cuBLAS ``getrfBatched``/``getrsBatched`` for stacks of small square matrices (the
``"getrf"`` rows of :mod:`.._gpu._batched_plan`); the twin of :mod:`._lu_host`, same
signatures. CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.

Every route factors a column-major working copy (:func:`.._gpu._cusolver_cuda.fortran_batch`,
which also flags NaN or Inf for ``check_finite`` in the same pass), or, with ``overwrite_a``,
a column-major stack of the computation's dtype in place. ``solve`` and ``inv`` apply SciPy's
conditioning rule (:mod:`._lu_rules`) to a 1-norm estimate of ``A^-1`` made through the
factor's solves (:func:`._lu_xp.inv_norm1_estimate`; exact for ``inv``).
"""

import math
from typing import NamedTuple

import numpy as np

from ..._runtime.arrays import to_host
from ..._runtime.device import attribute
from ..._runtime.errors import NotPositiveDefiniteError, SingularMatrixError
from ..._runtime.errors import warn as _warn
from ..._runtime.records import note
from .._checks import broadcast_batch
from .._gpu._batched_cuda import fan, spread
from .._gpu._batched_plan import lanes, route
from .._gpu._blas_cuda import symv
from .._gpu._cusolver_cuda import Solver, fortran_batch
from .._gpu._finite_cuda import flag_nonfinite, raise_nonfinite
from ..cholesky import _cholesky_cuda, _cholesky_tensor_cuda
from ..triangular import _triangular_cuda
from ._lu_pivots import row_permutation
from ._lu_rules import ill_conditioned, judge_rcond, singular_error
from ._lu_xp import (assemble, det_from_factor, inv_norm1_estimate, slogdet_from_factor,
                     structured)

__all__ = ["factor", "solve", "solve_mixed", "lu_factor", "lu_solve", "lu", "det", "slogdet", "inv"]


class Factor(NamedTuple):
    """A factored stack: ``w`` ``(B, m, n)`` column-major matrices holding L and U; ``piv``
    ``(B, k)`` 1-based pivots (int32 on the batched route, int64 on ``Xgetrf``'s); ``codes``
    ``getrf``'s ``info`` per matrix (host); ``batched``: cuBLAS's batched route."""

    w: object
    piv: object
    codes: np.ndarray
    batched: bool
    #: ``(B, m)`` row permutations of the pivots on the device (:func:`_with_rows`), or None
    rows: object = None


def _batched(m, n, nb):
    return m == n and route("getrf", n, nb, fused=False) == "batched"


def _in_place(a, dtype):
    """``a`` as a ``(B, m, n)`` stack of column-major matrices (a view), or ``None``."""
    if a.dtype != dtype:
        return None
    m, n = a.shape[-2:]
    t = a.swapaxes(-1, -2)
    if not t.flags.c_contiguous:
        return None
    return t.reshape(-1, n, m).swapaxes(-1, -2)


def factor(a, dtype, overwrite=False, finite=False):
    """:class:`Factor` of the CuPy stack ``a`` (..., m, n); ``finite``: SciPy's
    ``check_finite`` of ``a``, read back with the ``info`` codes (one synchronization)."""
    import cupy
    m, n = a.shape[-2:]
    nb = math.prod(a.shape[:-2])
    info = cupy.zeros(nb + 1, dtype=np.int32)
    w = _in_place(a, dtype) if overwrite else None
    if w is None:
        w = fortran_batch(a, dtype, flag=info[nb:] if finite else None)
    elif finite:
        flag_nonfinite(a, info[nb:])
    batched = _batched(m, n, nb)
    if batched:
        piv = cupy.empty((nb, n), dtype=np.int32)
        with Solver(dtype, nb, info=info, params=False) as sv:
            sv.getrf_batched(w, piv)
            codes = sv.check("getrfBatched")
    else:
        piv = cupy.empty((nb, min(m, n)), dtype=np.int64)
        with Solver(dtype, nb, info=info) as sv:
            with fan(lanes("getrf", max(m, n), nb)) as fanned:
                ways = spread(sv, fanned, nb)
                for i in range(nb):
                    lane, stream = ways[i % len(ways)]
                    with stream:
                        lane.getrf(w[i], piv[i], i)
            codes = sv.check("getrf")
    if finite and codes[nb]:
        raise_nonfinite("a")
    return Factor(w, piv, codes[:nb], batched)


def _solve_stack(f, x, trans):
    """``x[i] <- op(A_i)^-1 x[i]`` in place for the ``(B, n, k)`` column-major stack ``x``
    (``len(x) == len(f.w)``): ``getrs``, or the two triangles on decomp's own triangular
    kernels where those take the solve (:func:`_by_triangles`)."""
    if f.batched:
        with Solver(f.w.dtype, 1, params=False) as sv:
            sv.getrs_batched(f.w, f.piv, x, trans)
            sv.done()
        return
    n, k = x.shape[-2:]
    if _triangles_route(n, k, f.w.dtype):
        f = _with_rows(f)
        left = [i for i in range(len(x)) if not _by_triangles(f, i, x[i], trans)]
    else:
        left = range(len(x))
    if not left:
        return
    with Solver(f.w.dtype, len(x)) as sv:
        for i in left:
            sv.getrs(f.w[i], f.piv[i], x[i], trans, i)
        sv.done()


def _triangles_route(n, k, dtype):
    """Whether decomp's own triangular kernels take an ``n x n`` solve of ``k`` right-hand
    sides (``getrs``'s cuBLAS trsm was 10x slower than them for few right-hand sides)."""
    return _triangular_cuda.own_route(n, 1, k, np.dtype(dtype)) in ("fused", "stream", "wide")


def _for_solves(f):
    """``f`` ready for repeated few-column solves: with its pivots' row permutations where
    decomp's triangular kernels take them (:func:`_triangles_route`), computed once."""
    if f.batched or not _triangles_route(f.w.shape[-1], 1, f.w.dtype):
        return f
    return _with_rows(f)


def _with_rows(f):
    """``f`` with the row permutations of its pivots (one read-back of the pivots)."""
    if f.rows is not None:
        return f
    import cupy
    return f._replace(rows=cupy.asarray(row_permutation(to_host(f.piv) - 1, f.w.shape[-2])))


def _by_triangles(f, i, x, trans):
    """``x <- op(A_i)^-1 x`` as ``P``, then the unit lower and the upper triangle of the
    packed factor, on the triangular engine; ``False`` (``x`` untouched) where ``U`` has a
    zero on its diagonal (``getrs`` then gives SciPy's inf / NaN)."""
    w, rows, dt = f.w[i], f.rows[i], f.w.dtype
    try:
        if trans == 0:  # A = P^T L U
            y = _triangular_cuda.solve_triangular(w, x[rows], 0, True, True, False, dt)
            x[...] = _triangular_cuda.solve_triangular(w, y, 0, False, False, False, dt)
        else:  # op(A) = op(U) op(L) P
            y = _triangular_cuda.solve_triangular(w, x, trans, False, False, False, dt)
            x[rows] = _triangular_cuda.solve_triangular(w, y, trans, True, True, False, dt)
    except SingularMatrixError:
        return False
    return True


def _solve_rhs(f, fbatch, b, trans, dtype):
    """``op(A)^-1 b`` for the factored stack ``f`` (batch shape ``fbatch``) and ``b`` ((n,) or
    (..., n, k); the batches broadcast); ``b`` is never written. One factored matrix and many
    right-hand sides on the looped route are solved as one ``n x (B k)`` system."""
    import cupy
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    batch = broadcast_batch(fbatch, b2.shape[:-2])
    n, k = b2.shape[-2:]
    nb = math.prod(batch)
    src = cupy.broadcast_to(b2, batch + (n, k)).reshape(nb, n, k)
    if len(f.w) == 1 and nb > 1 and not f.batched:
        x = cupy.empty((nb * k, n), dtype=dtype).T
        x[...] = src.transpose(1, 0, 2).reshape(n, nb * k)
        _solve_stack(f, x[None], trans)
        out = x.reshape(n, nb, k).transpose(1, 0, 2).reshape(batch + (n, k))
        return out[..., 0] if vec else out
    if len(f.w) != nb:  # broadcast the factors (a copy for the looped route)
        m = f.w.shape[-1]
        w = cupy.broadcast_to(f.w.reshape(fbatch + (m, m)), batch + (m, m)).reshape(nb, m, m)
        piv = cupy.ascontiguousarray(cupy.broadcast_to(
            f.piv.reshape(fbatch + f.piv.shape[-1:]), batch + f.piv.shape[-1:])).reshape(nb, -1)
        if not f.batched:
            w = fortran_batch(w, dtype)
        f = f._replace(w=w, piv=piv)
    x = cupy.empty((nb, k, n), dtype=dtype).transpose(0, 2, 1)
    x[...] = src
    _solve_stack(f, x, trans)
    out = x.reshape(batch + (n, k))
    return out[..., 0] if vec else out


def _raise_singular(f, batch):
    bad = np.flatnonzero(f.codes > 0)
    if bad.size:
        raise singular_error(bad.tolist(), batch)


def _norm1(a, transposed):
    """``||op(A_i)||_1`` per matrix (float64, ``(B,)``, on the device)."""
    import cupy
    return cupy.abs(a).sum(axis=-1 if transposed else -2).max(axis=-1) \
        .astype(np.float64).reshape(-1)


def _judge(step, anorm, batch, n, trans, dtype):
    """SciPy's rule (:func:`._lu_rules.judge_rcond`) on ``1 / (||op(A)||_1 est)`` per matrix
    of the batch ``batch``: ``anorm`` their norms (device), ``est`` the 1-norm estimate of
    ``op(A)^-1`` through ``step(y, trans)`` (the system's solve; ``y`` of ``batch + (n, k)``)
    by :func:`._lu_xp.inv_norm1_estimate`; one read-back."""
    import cupy
    nb = math.prod(batch)
    adjoint = 2 if np.dtype(dtype).kind == "c" else (0 if trans else 1)

    def through(x, adj):
        k = x.shape[-1]
        return step(x.reshape(batch + (n, k)), adjoint if adj else trans).reshape(nb, n, k)
    est = inv_norm1_estimate(through, nb, n, dtype, cupy)
    with np.errstate(divide="ignore", invalid="ignore"):
        judge_rcond(1.0 / to_host(anorm * est), dtype, batch)


def _triangle(a, kind):
    import cupy
    return cupy.tril(a) if kind == "lower triangular" else cupy.triu(a)


def solve(a, b, kind, lower, overwrite_a, overwrite_b, transposed, dtype, finite=False):
    """``a^-1 b`` (``a^T`` with ``transposed``) for the structure ``kind`` of
    :data:`._lu_rules.SOLVE_STRUCTURES`: ``"pos"`` by the Cholesky engine, the triangles by
    the triangular one, ``"diagonal"`` by a division, everything else (``None`` included: no
    structure detection on the GPU) by LU of the matrix SciPy's solver would read. SciPy's
    conditioning rule on every route (:func:`_judge`)."""
    import cupy
    if kind == "diagonal":
        return _diagonal(a, b, dtype, finite)
    if finite:  # all of a, as SciPy (one read-back)
        _triangular_cuda.check_finite_pair(a, b, ("a", "b"))
    trans, n = (1 if transposed else 0), a.shape[-1]
    if kind == "pos":
        anorm = _norm1(structured(a, "her", lower, cupy), False)
        c = _cholesky(a, lower, overwrite_a, dtype, False)

        def step(y, t):
            return _cholesky_cuda.cho_solve(c, lower, y, False, dtype, False, False)
    elif kind in ("upper triangular", "lower triangular"):
        anorm = _norm1(_triangle(a, kind), transposed)

        def step(y, t):
            return _triangular_cuda.solve_triangular(a, y, t, kind == "lower triangular",
                                                     False, False, dtype, False, False)
    else:
        a = structured(a, kind, lower, cupy)
        vec = b.ndim == 1
        batch = broadcast_batch(a.shape[:-2], () if vec else b.shape[:-2])
        if a.ndim > 2 and tuple(a.shape[:-2]) != batch:
            a = cupy.broadcast_to(a, batch + a.shape[-2:])
        anorm = _norm1(a, transposed)
        f = factor(a, dtype, overwrite_a, False)
        _raise_singular(f, tuple(a.shape[:-2]))
        f = _for_solves(f)  # the estimate's solves too

        def step(y, t):
            return _solve_rhs(f, tuple(a.shape[:-2]), y, t, dtype)
    x = step(b, trans)
    _judge(step, anorm, tuple(a.shape[:-2]), n, trans, dtype)
    return x


def solve_mixed(a, b, kind, lower, overwrite_a, overwrite_b, transposed, dtype, finite=False):
    """:func:`solve` with ``precision="mixed"``: a double-precision system of a structure of
    :data:`._refine_xp.MIXED_KINDS` factored in single precision (``Xgetrf``, or the Cholesky
    engine for "pos") and refined (:func:`._refine_xp.refined_solve`); anything else, or a
    refinement that cannot converge, by :func:`solve` itself."""
    import cupy

    from ._refine_xp import LOWER, mixed_applies, refined_solve, system

    def full():
        return solve(a, b, kind, lower, overwrite_a, overwrite_b, transposed, dtype, False)
    if finite:
        _triangular_cuda.check_finite_pair(a, b, ("a", "b"))
    if not mixed_applies(dtype, kind):
        return full()
    low = LOWER[np.dtype(dtype)]
    # one real SPD matrix is read by its named triangle: no mirrored copy of it is made
    one_triangle = kind == "pos" and a.ndim == 2 and np.dtype(dtype).kind == "f"
    if one_triangle:
        m, rhs, shape, hooks = _one_triangle(a.astype(dtype, copy=False),
                                             b.astype(dtype, copy=False), lower, low)
    else:
        m, rhs, shape = system(cupy, a.astype(dtype, copy=False), b.astype(dtype, copy=False),
                               kind, lower, transposed)
        hooks = {}
    nb, n = len(m), m.shape[-1]
    # one large real SPD matrix: the Cholesky factor's trailing updates on tensor cores (TF32)
    tensor = _cholesky_tensor_cuda if kind == "pos" and nb == 1 and \
        _cholesky_tensor_cuda.applies(n, low) else None
    if tensor is None and not single_pays():
        note(precision="full", mixed_fallback="on this GPU a single-precision factorization "
             "is no faster than a double-precision one (SingleToDoublePrecisionPerfRatio "
             f"{attribute('SingleToDoublePrecisionPerfRatio')}: its double-precision products "
             "run on tensor cores)")
        return full()

    if kind == "pos":
        def factor_low(x):
            if tensor is not None:
                w = x if one_triangle else fortran_batch(x, low)  # lowered() made a new copy
                return None if tensor.factor(w[0]) else w
            try:
                return _cholesky_cuda.cholesky(x, True, True, False, low, False)
            except NotPositiveDefiniteError:
                return None

        def solve_low(c, x, adjoint):  # a Hermitian system: its adjoint is itself
            return _cholesky_cuda.cho_solve(c, True, x, False, low, False, False)
    else:
        def factor_low(x):
            f = factor(x, low, True, False)
            return None if (f.codes > 0).any() else _for_solves(f)

        def solve_low(f, x, adjoint):
            trans = (2 if np.dtype(low).kind == "c" else 1) if adjoint else 0
            return _solve_rhs(f, (nb,), x, trans, low)
    if tensor is not None:
        note(factor="blocked Cholesky, trailing updates in TF32")
    return refined_solve(cupy, m, rhs, factor_low, solve_low, full, **hooks).reshape(shape)


def _one_triangle(a, b, lower, low):
    """``(A, B, shape, hooks)`` of :func:`._refine_xp.refined_solve` for one real symmetric
    matrix ``a`` given by its ``lower`` (else upper) triangle: the single-precision copy that
    the factor takes (column-major, the matrix in its lower triangle), the products and the
    norm by cuBLAS ``symv`` on that triangle of ``a`` itself."""
    import cupy
    c = cupy.ascontiguousarray(a)
    t = c.T  # column-major: its upper triangle is a's lower one
    n = c.shape[0]

    def lowered():
        if lower:  # a's lower triangle: cast, then the tiled transposing copy
            return fortran_batch(c.astype(low)[None], low)
        return t.astype(low)[None]  # a's upper triangle is t's lower one: a cast, no transpose

    def matvec(x):
        return symv(t, x[0], lower=not lower)[None]

    def norms():  # symmetric: ||A||_1 = ||A||_inf, the largest row sum of |A|
        top = symv(cupy.abs(c).T, cupy.ones((n, 1), dtype=c.dtype), lower=not lower).max()
        return top.reshape(1), top.reshape(1, 1)
    b2 = b[:, None] if b.ndim == 1 else b
    hooks = {"lowered": lowered, "matvec": matvec, "norms": norms}
    return c[None], b2[None], b.shape, hooks


def single_pays():
    """Whether the current GPU runs single precision markedly faster than double (its
    ``SingleToDoublePrecisionPerfRatio`` above 2, or unknown): else a single-precision
    ``getrf`` / ``potrf`` costs what the double-precision one does, and refining it can only
    lose."""
    ratio = attribute("SingleToDoublePrecisionPerfRatio")
    return ratio is None or ratio > 2


def _cholesky(a, lower, overwrite_a, dtype, finite):
    """The Cholesky factor for ``assume_a="pos"``; not positive definite raises
    :class:`gpulinalg.SingularMatrixError` (SciPy's ``LinAlgError`` there)."""
    try:
        return _cholesky_cuda.cholesky(a, lower, overwrite_a, False, dtype, finite)
    except NotPositiveDefiniteError as exc:
        raise SingularMatrixError(f"A singular matrix detected: {exc}") from exc


def _diagonal(a, b, dtype, finite, inverse=False):
    """``b / diag(a)`` (or the inverse of the diagonal of ``a``) with SciPy's rule on
    ``min|a_ii| / max|a_ii|`` (read back before dividing)."""
    import cupy
    if finite:
        _triangular_cuda.check_finite_pair(a, a if b is None else b, ("a", "b"))
    d = cupy.diagonal(a, axis1=-2, axis2=-1).astype(dtype)
    mag = cupy.abs(d)
    lo, hi = mag.min(axis=-1), mag.max(axis=-1)
    ratio = cupy.where(hi > 0, lo / cupy.where(hi > 0, hi, 1), 0).astype(np.float64)
    judge_rcond(to_host(ratio), dtype, tuple(a.shape[:-2]))
    if inverse:
        n = a.shape[-1]
        out = cupy.zeros(a.shape, dtype=dtype)
        idx = cupy.arange(n)
        out[..., idx, idx] = 1 / d
        return out
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    x = b2.astype(dtype) / d[..., :, None]
    return x[..., 0] if vec else x


def lu_factor(a, overwrite_a, dtype, finite=False):
    """``(lu, piv)`` as SciPy's ``lu_factor``: 0-based int32 pivots; an exactly zero pivot
    warns, as SciPy's."""
    f = factor(a, dtype, overwrite_a, finite)
    bad = np.flatnonzero(f.codes > 0)
    if bad.size:
        _warn(f"Diagonal number {int(f.codes[bad[0]])} is exactly zero. Singular matrix.",
              ill_conditioned())
    k = f.piv.shape[-1]
    piv = (f.piv - 1).astype(np.int32).reshape(tuple(a.shape[:-2]) + (k,))
    return f.w.reshape(a.shape), piv


def lu_solve(lu, piv, b, trans, overwrite_b, dtype, finite=False):
    """``op(A)^-1 b`` from SciPy's ``(lu, piv)``; the factor's and pivots' batches broadcast
    with ``b``'s. Pivots out of range raise ``ValueError`` (cuSOLVER would read out of
    bounds), checked with ``check_finite`` in one read-back."""
    import cupy
    n = lu.shape[-1]
    flags = cupy.zeros(3, dtype=np.int32)
    if finite:
        flag_nonfinite(lu, flags[0:1])
        flag_nonfinite(b, flags[1:2])
    flags[2:] = ((piv < 0) | (piv >= n)).any().astype(np.int32)
    host = flags.get()
    if host[0]:
        raise_nonfinite("lu")
    if host[1]:
        raise_nonfinite("b")
    if host[2]:
        raise ValueError(f"piv holds indices outside [0, {n}): not pivots of lu_factor")
    fbatch = broadcast_batch(tuple(lu.shape[:-2]), tuple(piv.shape[:-1]))
    nb = math.prod(fbatch)
    w = fortran_batch(cupy.broadcast_to(lu, fbatch + (n, n)), dtype)
    batched = _batched(n, n, nb)
    p = cupy.broadcast_to(piv, fbatch + (n,)).reshape(nb, n)
    p = (p + 1).astype(np.int32 if batched else np.int64)
    f = Factor(w, cupy.ascontiguousarray(p), np.zeros(nb, np.int32), batched)
    return _solve_rhs(f, fbatch, b, int(trans), dtype)


def lu(a, permute_l, overwrite_a, p_indices, dtype, finite=False):
    """SciPy's ``lu``: ``(P, L, U)`` or ``(PL, U)`` (:func:`._lu_xp.assemble`)."""
    f = factor(a, dtype, overwrite_a, finite)
    k = f.piv.shape[-1]
    piv = (f.piv - 1).reshape(tuple(a.shape[:-2]) + (k,))
    real = np.empty(0, dtype).real.dtype
    return assemble(f.w.reshape(a.shape), piv, permute_l, p_indices, real)


def det(a, overwrite_a, dtype, finite=False):
    """``det a`` (float64 or complex128, batch shape): the product of U's diagonal and the
    pivots' sign; zero for a singular matrix."""
    f = factor(a, dtype, overwrite_a, finite)
    piv = (f.piv - 1).astype(np.int64)
    return det_from_factor(f.w, piv).reshape(a.shape[:-2])


def slogdet(a, dtype):
    """NumPy's ``slogdet`` pair from the factor: ``(sign, logabsdet)``."""
    f = factor(a, dtype)
    sign, logabs = slogdet_from_factor(f.w, (f.piv - 1).astype(np.int64), dtype)
    return sign.reshape(a.shape[:-2]), logabs.reshape(a.shape[:-2])


def inv(a, kind, lower, overwrite_a, dtype, finite=False):
    """``a^-1`` for the structure ``kind`` of :data:`._lu_rules.INV_STRUCTURES`: ``"pos"``
    through Cholesky, triangles through the triangular engine, ``"diagonal"`` directly,
    everything else by LU and ``getrs`` on the identity, with SciPy's conditioning rule on
    the exact ``1 / (||A||_1 ||A^-1||_1)``."""
    import cupy
    n = a.shape[-1]
    eye = cupy.eye(n, dtype=dtype)
    if kind in ("pos", "upper triangular", "lower triangular"):
        if finite:
            _triangular_cuda.check_finite_pair(a, a, ("a", "a"))
        if kind == "pos":
            full = structured(a, "her", lower, cupy)
            c = _cholesky(a, lower, overwrite_a, dtype, False)
            x = _cholesky_cuda.cho_solve(c, lower, eye, False, dtype, False, False)
        else:
            full = _triangle(a, kind)
            x = _triangular_cuda.solve_triangular(a, eye, 0, kind == "lower triangular", False,
                                                  False, dtype, False, False)
        return _exact_rcond(full, x, dtype)
    if kind == "diagonal":
        return _diagonal(a, None, dtype, finite, inverse=True)
    if finite and kind in ("sym", "her"):  # all of a, as SciPy
        _triangular_cuda.check_finite_pair(a, a, ("a", "a"))
        finite = False
    a = structured(a, kind, lower, cupy)
    anorm = _norm1(a, False)
    f = factor(a, dtype, overwrite_a, finite)
    _raise_singular(f, tuple(a.shape[:-2]))
    x = cupy.zeros((len(f.w), n, n), dtype=dtype).transpose(0, 2, 1)
    x[:, cupy.arange(n), cupy.arange(n)] = 1
    _solve_stack(f, x, 0)
    return _exact_rcond(a, x.reshape(a.shape), dtype, anorm)


def _exact_rcond(a, x, dtype, anorm=None):
    """``x`` (the inverse of ``a``), after SciPy's rule on ``1 / (||A||_1 ||A^-1||_1)``."""
    anorm = _norm1(a, False) if anorm is None else anorm
    with np.errstate(divide="ignore", invalid="ignore"):
        rcond = 1.0 / to_host(anorm * _norm1(x, False))
    judge_rcond(rcond, dtype, tuple(a.shape[:-2]))
    return x
