"""CPU engine of the LU family: SciPy's own ``solve``, ``lu_factor``, ``lu_solve``, ``lu``,
``det`` and ``inv`` (batched in SciPy >= 1.16; looped here where the installed SciPy is not)
and NumPy's ``slogdet``; the twin of :mod:`._lu_cuda`, same signatures. SciPy's
``LinAlgError`` for a singular matrix becomes :class:`gpulinalg.SingularMatrixError` (caught by
type); its ``LinAlgWarning`` passes as it is. ``overwrite_*`` never writes a read-only array."""

import numpy as np

from ..._runtime.errors import SingularMatrixError
from ..._runtime.validation import check_finite
from .._checks import over_batch, writable
from ._lu_rules import ill_conditioned

__all__ = ["solve", "solve_mixed", "lu_factor", "lu_solve", "lu", "det", "slogdet", "inv"]

_SCIPY_NAMES = {None: None, "gen": "gen", "diagonal": "diagonal", "tridiagonal": "tridiagonal",
                "banded": "banded", "upper triangular": "upper triangular",
                "lower triangular": "lower triangular", "pos": "pos", "sym": "sym",
                "her": "her"}


def _finite(finite, *pairs):
    if finite:
        for x, name in pairs:
            check_finite(x, name)


def _ours(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with SciPy's ``LinAlgError`` raised as
    :class:`gpulinalg.SingularMatrixError` (its message kept)."""
    try:
        return fn(*args, **kwargs)
    except SingularMatrixError:
        raise
    except np.linalg.LinAlgError as exc:
        raise SingularMatrixError(str(exc)) from exc


def solve(a, b, kind, lower, overwrite_a, overwrite_b, transposed, dtype, finite=False):
    """SciPy's ``solve`` of structure ``kind`` (``None``: SciPy detects it)."""
    import scipy.linalg
    _finite(finite, (a, "a"), (b, "b"))
    a, b = np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)
    return _ours(scipy.linalg.solve, a, b, lower=bool(lower),
                 overwrite_a=writable(a, overwrite_a), overwrite_b=writable(b, overwrite_b),
                 check_finite=False, assume_a=_SCIPY_NAMES[kind], transposed=bool(transposed))


def solve_mixed(a, b, kind, lower, overwrite_a, overwrite_b, transposed, dtype, finite=False):
    """:func:`solve` with ``precision="mixed"``: a double-precision system of a structure of
    :data:`._refine_xp.MIXED_KINDS` factored in single precision by LAPACK (``getrf`` or
    ``potrf``) and refined (:func:`._refine_xp.refined_solve`); anything else, or a refinement
    that cannot converge, by :func:`solve` itself."""
    from scipy.linalg import get_lapack_funcs

    from ._refine_xp import LOWER, mixed_applies, refined_solve, system

    def full():
        return solve(a, b, kind, lower, overwrite_a, overwrite_b, transposed, dtype, False)
    _finite(finite, (a, "a"), (b, "b"))
    if not mixed_applies(dtype, kind):
        return full()
    a, b = np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)
    m, rhs, shape = system(np, a, b, kind, lower, transposed)
    pos = kind == "pos"
    names = ("potrf", "potrs") if pos else ("getrf", "getrs")
    fac, sol = get_lapack_funcs(names, dtype=LOWER[np.dtype(dtype)])

    def factor(low):
        out = []
        for one in low:
            *f, info = fac(one, lower=True) if pos else fac(one)
            if info != 0:
                return None
            out.append(f)
        return out

    def solve_low(f, x, adjoint):
        trans = (2 if x.dtype.kind == "c" else 1) if adjoint else 0
        return np.stack([(sol(f[i][0], x[i], lower=True) if pos else
                          sol(f[i][0], f[i][1], x[i], trans=trans))[0] for i in range(len(f))])
    return refined_solve(np, m, rhs, factor, solve_low, full).reshape(shape)


def lu_factor(a, overwrite_a, dtype, finite=False):
    """SciPy's ``lu_factor`` over the batch: ``(lu, piv)``, 0-based int32 pivots; a zero pivot
    warns (SciPy's ``LinAlgWarning``, here :func:`._lu_rules.ill_conditioned`'s class)."""
    from scipy.linalg import get_lapack_funcs
    from ..._runtime.errors import warn
    _finite(finite, (a, "a"))
    a = np.asarray(a, dtype=dtype)
    getrf, = get_lapack_funcs(("getrf",), (a,))
    singular = []

    def one(m):
        lu, piv, info = getrf(m, overwrite_a=a.ndim == 2 and writable(a, overwrite_a))
        if info < 0:
            raise ValueError(f"illegal value in {-info}th argument of internal getrf "
                             "(lu_factor)")
        if info > 0:
            singular.append(int(info))
        return lu, piv
    lu, piv = over_batch(one, a)
    if singular:
        warn(f"Diagonal number {singular[0]} is exactly zero. Singular matrix.",
             ill_conditioned())
    return lu, piv


def lu_solve(lu, piv, b, trans, overwrite_b, dtype, finite=False):
    """SciPy's ``lu_solve`` over the broadcast batch of ``lu``, ``piv`` and ``b``."""
    from scipy.linalg import get_lapack_funcs
    _finite(finite, (lu, "lu"), (b, "b"))
    lu, b = np.asarray(lu, dtype=dtype), np.asarray(b, dtype=dtype)
    piv = np.asarray(piv, dtype=np.int32)
    getrs, = get_lapack_funcs(("getrs",), (lu, b))
    if lu.ndim == 2 and b.ndim <= 2:
        x, info = getrs(lu, piv, b, trans=trans, overwrite_b=writable(b, overwrite_b))
        return x
    vec = b.ndim == 1
    b2 = b[..., None] if vec else b
    batch = np.broadcast_shapes(lu.shape[:-2], piv.shape[:-1], b2.shape[:-2])
    lu_b = np.broadcast_to(lu, batch + lu.shape[-2:])
    piv_b = np.broadcast_to(piv, batch + piv.shape[-1:])
    b_b = np.broadcast_to(b2, batch + b2.shape[-2:])
    out = np.empty(batch + b2.shape[-2:], dtype=dtype)
    for idx in np.ndindex(*batch):
        out[idx] = getrs(lu_b[idx], piv_b[idx], b_b[idx], trans=trans)[0]
    return out[..., 0] if vec else out


def lu(a, permute_l, overwrite_a, p_indices, dtype, finite=False):
    """SciPy's ``lu``: ``(P, L, U)`` or ``(PL, U)``."""
    import scipy.linalg
    _finite(finite, (a, "a"))
    a = np.asarray(a, dtype=dtype)
    return scipy.linalg.lu(a, permute_l=bool(permute_l), overwrite_a=writable(a, overwrite_a),
                           check_finite=False, p_indices=bool(p_indices))


def det(a, overwrite_a, dtype, finite=False):
    """SciPy's ``det`` (float64 or complex128, zero for a singular matrix)."""
    import scipy.linalg
    _finite(finite, (a, "a"))
    a = np.asarray(a, dtype=dtype)
    return np.asarray(scipy.linalg.det(a, overwrite_a=writable(a, overwrite_a),
                                       check_finite=False))


def slogdet(a, dtype):
    """NumPy's ``slogdet``: ``(sign, logabsdet)``."""
    sign, logabs = np.linalg.slogdet(np.asarray(a, dtype=dtype))
    return np.asarray(sign), np.asarray(logabs)


def inv(a, kind, lower, overwrite_a, dtype, finite=False):
    """SciPy's ``inv`` of structure ``kind``."""
    import scipy.linalg
    _finite(finite, (a, "a"))
    a = np.asarray(a, dtype=dtype)
    return _ours(scipy.linalg.inv, a, overwrite_a=writable(a, overwrite_a), check_finite=False,
                 assume_a=_SCIPY_NAMES[kind], lower=bool(lower))
