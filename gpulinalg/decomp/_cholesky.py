"""Cholesky factorization, solves with the factor, and the log-determinant (``Xpotrf``,
``Xpotrs``).

Layout: a C-ordered Hermitian matrix read column-major is its conjugate, so either triangle of
either layout can be factored in place by asking cuSOLVER for the matching triangle. The
lower-triangle kernel is the fast one, and the working copy is laid out for it (see
:func:`_work_copy`); solves read whichever layout the factor has.
"""

import numpy as np

from .._runtime import dispatch as _dispatch
from .._runtime.budget import nbytes_of
from .._runtime.errors import NotPositiveDefiniteError
from . import _cpu, _transpose
from ._common import (batch_index, broadcast_batch, check_rhs, empty_result, flops_scale,
                      matrix_order, prepare, real_dtype, sub)
from ._cusolver import BATCHED_MAX_N, Solver, workspace_bytes
from ._triangular import finish_rhs, rhs_copy, stack_matrices, trsm_batched

__all__ = ["cholesky", "cho_factor", "cho_solve", "logdet_cholesky"]


def cholesky(a, lower=True, *, overwrite_a=False, check_finite=True):
    """Cholesky factor of a Hermitian positive-definite matrix (or a batch of them).

    Parameters
    ----------
    a : (..., n, n) array_like
        Only the triangle named by ``lower`` is read.
    lower : bool, default True
        Return the lower factor ``L`` (``a = L @ L^H``), else the upper ``U`` (``a = U^H @ U``).
    overwrite_a : bool, default False
        Allow the factorization to reuse ``a``'s memory.
    check_finite : bool, default True
        Raise ``ValueError`` if ``a`` holds NaN or Inf.

    Returns
    -------
    c : (..., n, n) array
        The factor; the other triangle is zero. Same package (NumPy/CuPy/torch) as ``a``.

    Raises
    ------
    gpulinalg.NotPositiveDefiniteError
        With ``.minor`` (1-based order of the failing leading minor) and ``.batch_index``.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import cholesky
    >>> a = np.array([[4.0, 2.0], [2.0, 3.0]])
    >>> L = cholesky(a)
    >>> bool(np.allclose(L @ L.T, a)), bool(np.allclose(L, np.tril(L)))
    (True, True)
    """
    return _factor("decomp.cholesky", a, lower, overwrite_a, check_finite, clean=True)


def cho_factor(a, lower=True, *, overwrite_a=False, check_finite=True):
    """Cholesky factor for :func:`cho_solve` and :func:`logdet_cholesky`, as SciPy's.

    Parameters
    ----------
    a : (..., n, n) array_like
    lower : bool, default True
    overwrite_a : bool, default False
    check_finite : bool, default True

    Returns
    -------
    c : (..., n, n) array
        The factor in the triangle named by ``lower``; the other triangle keeps ``a``'s
        entries (as in SciPy: do not rely on them).
    lower : bool

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import cho_factor, cho_solve, logdet_cholesky
    >>> a = np.array([[4.0, 2.0], [2.0, 3.0]])
    >>> cf = cho_factor(a)
    >>> x = cho_solve(cf, np.array([1.0, 2.0]))
    >>> bool(np.allclose(a @ x, [1.0, 2.0]))
    True
    >>> bool(np.isclose(logdet_cholesky(cf), np.log(np.linalg.det(a))))
    True
    """
    c = _factor("decomp.cho_factor", a, lower, overwrite_a, check_finite, clean=False)
    return c, bool(lower)


def _factor(op, a, lower, overwrite_a, check_finite, clean):
    a, dtype = prepare(a, square=True, check_finite=check_finite)
    n = a.shape[-1]
    if a.size == 0:
        return empty_result(a, (tuple(a.shape), dtype))[0]
    batch = int(np.prod(a.shape[:-2], dtype=np.int64))
    nbytes = 2 * nbytes_of((a.shape, dtype)) + workspace_bytes("potrf", n, n, dtype)
    flops = batch * n ** 3 / 3 * flops_scale(dtype)
    return _dispatch.dispatch(op, _gpu_factor, _cpu.cholesky,
                              (a, bool(lower), bool(overwrite_a), clean, dtype),
                              nbytes=nbytes, flops=flops)


def _stack_view(a, order):
    """``a`` as a ``(B, n, n)`` view whose matrices are contiguous in ``order`` with a uniform
    stride, or ``None`` when its memory is not laid out that way."""
    n = a.shape[-1]
    batch = int(np.prod(a.shape[:-2], dtype=np.int64))
    if order == "C":
        return a.reshape(batch, n, n) if a.flags.c_contiguous else None
    t = a.swapaxes(-1, -2)
    return t.reshape(batch, n, n).swapaxes(-1, -2) if t.flags.c_contiguous else None


def _work_copy(a, dtype, lower, overwrite, clean):
    """``(w, order, zeroed)``: the ``(B, n, n)`` matrices to factor, contiguous in ``order``;
    ``zeroed``: the triangle the factorization leaves alone is zero already.

    cuSOLVER's lower-triangle kernel is the fast one (about 2x the upper one on the H200), so
    ``w`` is laid out for it: column-major (F) for ``lower=True``, C order for ``lower=False``
    (read column-major, its lower triangle is the conjugate of ``a``'s upper one). That may
    take a transposing copy, made tile by tile (:mod:`._transpose`), which zeroes the other
    triangle on the way when ``clean``. With ``overwrite_a`` the input itself is used when it
    already has that layout, or when the copy does not fit in device memory (then with the
    slower upper-triangle kernel).
    """
    import cupy

    from .._runtime import budget
    want = "F" if lower else "C"
    if overwrite and a.dtype == dtype:
        for order in (want, "F" if want == "C" else "C"):
            view = _stack_view(a, order)
            if view is not None and (order == want or not budget.fits(a.nbytes)[0]):
                return view, order, False
    n = a.shape[-1]
    batch = int(np.prod(a.shape[:-2], dtype=np.int64))
    w = cupy.empty((batch, n, n), dtype=dtype)
    if want == "F":
        w = w.transpose(0, 2, 1)
    if a.dtype == dtype:
        same = _stack_view(a, want)
        if same is not None:  # one contiguous copy (C-ordered views of both when F)
            dst, src = (w, same) if want == "C" else (w.swapaxes(-1, -2), same.swapaxes(-1, -2))
            dst[...] = src
            return w, want, False
        # In the frame where a's matrices are contiguous along the last axis, w's are along
        # the middle one; "q > p" there is the triangle that stays (lower: above the diagonal).
        src = _stack_view(a, "C" if want == "F" else "F")
        if src is not None:
            pair = (src, w) if want == "F" else (src.swapaxes(-1, -2), w.swapaxes(-1, -2))
            if _transpose.applies(*pair):
                _transpose.transpose_copy(*pair, zero_above=clean)
                return w, want, clean
    w[...] = a.reshape(batch, n, n)
    return w, want, False


def _gpu_factor(a, lower, overwrite_a, clean, dtype):
    import cupy
    w, order, zeroed = _work_copy(a, dtype, lower, overwrite_a, clean)
    fill_lower = lower if order == "F" else not lower  # C order: column-major conjugate
    with Solver(dtype, len(w)) as sv:
        if len(w) > 1 and a.shape[-1] <= BATCHED_MAX_N:
            sv.potrf_batched(w, fill_lower)
        else:
            for i in range(len(w)):
                sv.potrf(w[i], fill_lower, i)
        diag = cupy.diagonal(w, axis1=-2, axis2=-1)
        finite = cupy.isfinite(diag).all(axis=-1)  # fetched with the info codes
        codes, finite = sv.check("potrf", also=finite)
    batch_shape = a.shape[:-2]
    bad = np.flatnonzero(codes > 0)
    if bad.size:
        raise NotPositiveDefiniteError(codes[bad[0]], batch_index(bad[0], batch_shape))
    if not finite.all():  # NaN input with check_finite=False: no silent NaN factor
        entry = int(np.flatnonzero(finite == 0)[0])
        minor = int(cupy.flatnonzero(~cupy.isfinite(diag[entry]))[0]) + 1
        raise NotPositiveDefiniteError(minor, batch_index(entry, batch_shape))
    if clean and not zeroed:  # potrf reads and writes only its own triangle
        _zero_triangle(w, lower)
    return w.reshape(a.shape)


_ZERO_KERNELS = {}

# 32-bit index arithmetic when the array allows it: 64-bit division per element cost ~8 ms on
# a 32768^2 factor on the H200, several times the 32-bit version.
_ZERO_BODY = {
    "gpulinalg_zero_triangle32":
        "unsigned int k = (unsigned int)i, nn = (unsigned int)n;"
        " unsigned int r = (k / nn) % nn, c = k % nn;"
        " if (lower ? c > r : c < r) { x = T(0); }",
    "gpulinalg_zero_triangle":
        "long long r = (i / n) % n, c = i % n;"
        " if (lower ? c > r : c < r) { x = T(0); }",
}


def _zero_triangle(w, lower):
    """Zero the strict upper (``lower=True``) or lower triangle of each matrix, in place."""
    import cupy
    if not w.flags.c_contiguous and w.swapaxes(-1, -2).flags.c_contiguous:
        w, lower = w.swapaxes(-1, -2), not lower  # a contiguous kernel: 4x faster at n=32768
    name = "gpulinalg_zero_triangle32" if w.size < 2 ** 31 else "gpulinalg_zero_triangle"
    kernel = _ZERO_KERNELS.get(name)
    if kernel is None:
        kernel = _ZERO_KERNELS[name] = cupy.ElementwiseKernel(
            "int64 n, bool lower", "T x", _ZERO_BODY[name], name)
    kernel(w.shape[-1], lower, w)


def cho_solve(c_and_lower, b, *, overwrite_b=False, check_finite=True):
    """Solve ``a @ x = b`` given the Cholesky factor of ``a`` from :func:`cho_factor`.

    Parameters
    ----------
    c_and_lower : tuple of ((..., n, n) array, bool)
        The output of :func:`cho_factor`.
    b : (n,) or (..., n, k) array_like
        A 1-D ``b`` is one right-hand side for every matrix; otherwise the batch dimensions
        of ``c`` and ``b`` broadcast (SciPy's rule).
    overwrite_b : bool, default False
    check_finite : bool, default True

    Returns
    -------
    x : array of ``b``'s shape (with the broadcast batch)

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import cho_factor, cho_solve
    >>> a = np.array([[4.0, 2.0], [2.0, 3.0]]); b = np.eye(2)
    >>> bool(np.allclose(cho_solve(cho_factor(a), b), np.linalg.inv(a)))
    True
    """
    c, lower = _pair(c_and_lower)
    c, dtype_c = prepare(c, "c", square=True, check_finite=check_finite)
    b, dtype_b = prepare(b, "b", min_ndim=1, check_finite=check_finite)
    dtype = np.result_type(dtype_c, dtype_b)
    check_rhs(c, b)
    vec = b.ndim == 1
    batch = broadcast_batch(c.shape[:-2], b.shape[:-2] if not vec else ())
    shape = batch + ((c.shape[-1],) if vec else tuple(b.shape[-2:]))
    if c.shape[-1] == 0 or 0 in shape:
        return empty_result(b, (shape, dtype))[0]
    nb = int(np.prod(batch, dtype=np.int64))
    nbytes = nbytes_of((c.shape, dtype), (b.shape, dtype), (shape, dtype))
    flops = 2 * nb * c.shape[-1] ** 2 * (1 if vec else b.shape[-1]) * flops_scale(dtype)
    return _dispatch.dispatch("decomp.cho_solve", _gpu_cho_solve, _cpu.cho_solve,
                              (c, bool(lower), b, bool(overwrite_b), dtype),
                              nbytes=nbytes, flops=flops, like=b)


def _pair(c_and_lower):
    if not isinstance(c_and_lower, (tuple, list)) or len(c_and_lower) != 2:
        raise TypeError("c_and_lower must be the pair (c, lower) returned by cho_factor, "
                        f"got {type(c_and_lower).__name__}")
    return c_and_lower


def _gpu_cho_solve(c, lower, b, overwrite_b, dtype):
    import cupy
    x, batch, vec = rhs_copy(c, b, dtype)
    if len(x) > 1 and c.shape[-1] <= BATCHED_MAX_N:  # two batched triangular solves
        cw = stack_matrices(c, batch, dtype)
        for trans in ((0, 2) if lower else (2, 0)):
            trsm_batched(cw, x, trans, lower, False)
        return finish_rhs(x, batch, vec)
    conj = np.dtype(dtype).kind == "c"
    with Solver(dtype, len(x)) as sv:
        keep = []
        for i, idx in enumerate(np.ndindex(*batch)):
            ci = sub(c, idx, 2).astype(dtype, copy=False)
            order = matrix_order(ci)
            if order is None:
                ci, order = cupy.asfortranarray(ci), "F"
            flip = order == "C"  # read column-major, a C-ordered factor is the conjugate
            if flip and conj:
                cupy.conj(x[i], out=x[i])
            sv.potrs(ci, lower if not flip else not lower, x[i], i)
            if flip and conj:
                cupy.conj(x[i], out=x[i])
            keep.append(ci)
        sv.check("potrs")
    return finish_rhs(x, batch, vec)


def logdet_cholesky(c_and_lower):
    """``log |det a|`` from the Cholesky factor of ``a``: ``2 * sum(log(diag(c)))``.

    Parameters
    ----------
    c_and_lower : tuple of ((..., n, n) array, bool)
        The output of :func:`cho_factor` (or ``(cholesky(a), True)``).

    Returns
    -------
    logdet : float, or (...) array for a batch
        In the real dtype of ``c`` and ``c``'s package.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import cho_factor, logdet_cholesky
    >>> a = np.stack([np.eye(3) * 2, np.eye(3) * 3])
    >>> bool(np.allclose(logdet_cholesky(cho_factor(a)), [3 * np.log(2), 3 * np.log(3)]))
    True
    """
    c, _lower = _pair(c_and_lower)
    c, dtype = prepare(c, "c", square=True, check_finite=False)
    if c.shape[-1] == 0:
        res = empty_result(c, (tuple(c.shape[:-2]), real_dtype(dtype)))[0]
    else:
        res = _dispatch.dispatch("decomp.logdet_cholesky", _cpu.logdet, _cpu.logdet,
                                 (c, dtype), nbytes=nbytes_of((c.shape, dtype)),
                                 flops=c.shape[-1])
    return res[()] if isinstance(res, np.ndarray) else res
