"""GPU engine of Cholesky: ``Xpotrf`` / ``potrfBatched`` factors, ``Xpotrs`` and batched
triangular solves, and the log-determinant.

Layout: a C-ordered Hermitian matrix read column-major is its conjugate, so either triangle of
either layout can be factored in place by asking cuSOLVER for the matching triangle. The
lower-triangle kernel is the fast one, and the working copy is laid out for it (see
:func:`_work_copy`); solves read whichever layout the factor has.

Part of decomp's internal layer (``gp`` calls it): CuPy arrays in, on the dispatcher's stream;
no validation, no dispatch, no budget question. Failures raise
:class:`gpulinalg.NotPositiveDefiniteError` as the public functions do.
"""

import math
from typing import NamedTuple

import numpy as np

from ..._runtime.kernels import POINTER, Launcher, elementwise_kernel, kernel_source, raw_kernel
from ..._runtime.streams import op_stream
from .._kernels import _fused_cuda, _policy_cuda
from .._gpu import _transpose_cuda
from .._checks import batch_index, matrix_order, sub
from ._cholesky_xp import failure, logdet
from .._gpu._batched_cuda import fan, spread
from .._gpu._batched_plan import TABLE, lanes, route
from .._gpu._cusolver_cuda import Solver
from .._gpu._finite_cuda import FINITE_PREAMBLE, flag_nonfinite, raise_nonfinite
from ..triangular._triangular_cuda import (check_conditioning, check_finite_pair, finish_rhs,
                                           fused_solve, rcond_estimate, rhs_copy,
                                           stack_matrices, trsm_batched)
from ..._runtime.errors import NotPositiveDefiniteError

__all__ = ["cholesky", "cholesky_in_place", "cho_solve", "logdet", "own_route"]


def cholesky(a, lower, overwrite_a, clean, dtype, finite=False):
    """Cholesky factor of the CuPy stack ``a`` (..., n, n), laid out for the fast lower kernel.

    With ``overwrite_a`` the input is factored in place when it already has that layout, else
    a working copy is made. ``clean``: zero the other triangle (``cholesky``), else leave
    ``a``'s entries there (``cho_factor``). ``finite``: SciPy's ``check_finite`` of ``a``,
    read back with the ``info`` codes (:mod:`._finite_cuda`; one synchronization in all).
    """
    import cupy
    plan = None
    if not overwrite_a:  # a repeat of a layout: its plan (the route included) kept
        plan = _layout_plan(cupy, a, lower, clean, dtype)
        if plan.launcher is not None:
            return _fused_repeat(cupy, a, plan, lower, dtype, finite)
    batch = math.prod(a.shape[:-2])
    n = a.shape[-1]
    way = plan.way if plan is not None else own_route(n, batch, dtype)
    if way == "fused":
        return _fused_factor(a, lower, overwrite_a, clean, dtype, finite)
    info = cupy.zeros(batch + 1, dtype=np.int32)
    slot = info[batch:] if finite else None
    w, order, zeroed, flagged = _work_copy(a, dtype, lower, overwrite_a, clean, slot)
    if slot is not None and not flagged:  # before potrf, on its stream: a is still unwritten
        flag_nonfinite(a, slot)
    return _factor(a, w, order, zeroed, lower, clean, info, bool(finite))


def own_route(n, batch, dtype):
    """The route of the table for a Cholesky stack, with the fits of decomp's own kernels
    (none where :func:`._policy_cuda.enabled` is false)."""
    on = _policy_cuda.enabled()
    return route("potrf", n, batch, fused=on and _fused_cuda.fits(n, dtype, "potrf"),
                 dtype=dtype)


def _fused_factor(a, lower, overwrite_a, clean, dtype, finite):
    """:func:`cholesky` of a stack by one launch of the small matrices' fused kernel of
    :mod:`._fused_cuda`, one read-back of its 3-word summary. With ``overwrite_a`` a stack of
    ``dtype`` whose matrices do not overlap is factored in place (the kernel holds each matrix
    in registers; a failed matrix keeps the triangle that was read)."""
    import cupy
    n = a.shape[-1]
    nb = math.prod(a.shape[:-2])
    a3 = a.reshape(nb, n, n)
    in_place = overwrite_a and (
        _stack_view(a, "C") is not None or _stack_view(a, "F") is not None)
    if a3.dtype != dtype:
        a3 = w = a3.astype(dtype)  # a private copy: factored in place
    elif a3.dtype == dtype and in_place:
        w = a3
    else:
        a3 = a3.astype(dtype, copy=False)
        w = cupy.empty((nb, n, n), dtype=dtype)
        if lower:
            w = w.transpose(0, 2, 1)  # the layout of the other routes: cho_solve reads either
    summ, totals = _fused_cuda.summary(cupy, "potrf", a.data.device_id)
    _fused_cuda.potrf(a3, w, summ, lower, clean, NONFINITE)
    _fused_verdict(a, totals, lower, finite)
    return w.reshape(a.shape)


def _fused_verdict(a, totals, lower, finite):
    """Read the summary of a fused factorization back (the call's only synchronization) and
    raise for the first failed matrix, as :func:`_raise_failure` does from per-matrix codes."""
    host = totals.get()
    flags, minor, pivot = int(host[0]), int(host[1]), int(host[2])
    if finite and flags:
        raise_nonfinite("a")
    if minor != _fused_cuda.NONE or pivot != _fused_cuda.NONE:
        first = minor if minor != _fused_cuda.NONE else pivot
        entry, code = first >> 32, first & 0xFFFFFFFF
        _raise_failure(a, np.array([code]), lower, False, finite, entry)


#: What a layout of :func:`cholesky` needs, kept: ``(shape, strides, dtype, dtype, lower,
#: clean, device, kernels on) ->`` :class:`_Plan`.
_PLANS: dict = {}
_MAX_PLANS = 256


class _Plan(NamedTuple):
    """A layout's plan (:data:`_PLANS`): ``rows``, the table it was made under; ``launcher``,
    the fused or streamed kernel's :class:`~gpulinalg._runtime.kernels.Launcher` with its
    constant arguments (``None``: another route or another code path); ``flag_first``: the
    finiteness check runs before that launch; ``way``: the route of :func:`own_route`."""
    cupy: object
    rows: tuple
    launcher: object
    flag_first: bool
    way: str


def _layout_plan(cupy, a, lower, clean, dtype):
    """The kept :class:`_Plan` of ``a``'s layout, made at its first call."""
    key = (a.shape, a.strides, a.dtype, dtype, lower, clean, a.data.device_id,
           _policy_cuda.enabled())
    plan = _PLANS.get(key)
    if plan is None or plan.cupy is not cupy or plan.rows is not TABLE["potrf"]:
        plan = _factor_plan(cupy, a, lower, clean, dtype)
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _fused_repeat(cupy, a, plan, lower, dtype, finite):
    """:func:`_fused_factor` of a stack of ``dtype`` that is one ``(B, n, n)`` view, into a new
    factor (not in place), from its layout's ``plan``: one allocation, one launch, one
    read-back."""
    w = cupy.empty(a.shape, dtype=dtype)
    if lower:
        w = w.swapaxes(-1, -2)
    stream = cupy.cuda.get_current_stream().ptr
    summ, totals = _fused_cuda.summary(cupy, "potrf", a.data.device_id, stream)
    if plan.flag_first and finite:  # the streamed kernel reads the triangle only
        _fused_cuda.flag_before(a, summ)
    plan.launcher.launch(stream, a, w, summ)
    _fused_verdict(a, totals, lower, finite)
    return w


def _factor_plan(cupy, a, lower, clean, dtype):
    """What :func:`_layout_plan` keeps for a layout (a :class:`_Plan`)."""
    rows = TABLE["potrf"]
    n = a.shape[-1]
    nb = math.prod(a.shape[:-2])
    way = own_route(n, nb, dtype)
    if a.dtype != dtype or a.ndim < 3 or way not in ("fused", "stream"):
        return _Plan(cupy, rows, None, False, way)
    a3 = a.reshape(nb, n, n)
    if a3.data.ptr != a.data.ptr:  # not one view: the general path copies it
        return _Plan(cupy, rows, None, False, way)
    w = cupy.empty(a.shape, dtype=dtype)
    if lower:
        w = w.swapaxes(-1, -2)
    w3 = w.reshape(nb, n, n)
    kern, grid, block, strides = _fused_cuda.launch_args("gl_small_potrf", w3, n, nb, a3, w3)
    args = (POINTER, POINTER, POINTER, np.int32(n), np.int64(nb), *strides,
            np.int32(bool(lower)), np.int32(bool(clean)), np.int32(NONFINITE))
    return _Plan(cupy, rows, Launcher(kern, grid, block, args), way == "stream", way)


def _transposing_pair(a, w, lower):
    """``(src, dst)`` views of ``a`` and its working stack ``w`` (:func:`_new_work`) for
    :func:`._transpose_cuda.transpose_copy`, where ``a``'s matrices are contiguous in the
    other order than ``w``'s and the kernel takes them; else ``None``."""
    src = _stack_view(a, "C" if lower else "F")
    if src is None:
        return None
    pair = (src, w) if lower else (src.swapaxes(-1, -2), w.swapaxes(-1, -2))
    return pair if _transpose_cuda.applies(*pair) else None


def _new_work(cupy, batch, n, dtype, lower):
    """A new ``(batch, n, n)`` working stack laid out for the factorization: column-major
    (F) matrices for ``lower``, else C-ordered ones (see :func:`_work_copy`)."""
    w = cupy.empty((batch, n, n), dtype=dtype)
    return w.transpose(0, 2, 1) if lower else w


def _codes_buffer(a, finite):
    """``(info, flagged)``: zeroed int32 codes, one per matrix of ``a`` plus a flag slot for
    its finiteness check (launched now, before anything may overwrite ``a``)."""
    import cupy
    batch = math.prod(a.shape[:-2])
    info = cupy.zeros(batch + 1, dtype=np.int32)
    if finite:
        flag_nonfinite(a, info[batch:])
    return info, bool(finite)


def cholesky_in_place(a, lower, overwrite_a, clean, dtype, finite=False):
    """:func:`cholesky` without a working copy whenever ``a``'s memory allows (C or column-major
    stacks of ``dtype``), with the slower upper-triangle kernel when the layout asks for it.

    The dispatcher's route for ``overwrite_a=True`` jobs whose estimate (input plus a working
    copy) does not fit in device memory.
    """
    view = _in_place_view(a, dtype, lower) if overwrite_a else None
    n, nb = a.shape[-1], math.prod(a.shape[:-2])
    if view is None or own_route(n, nb, dtype) == "fused":
        return cholesky(a, lower, overwrite_a, clean, dtype, finite)
    info, flagged = _codes_buffer(a, finite)
    return _factor(a, *view, lower, clean, info, flagged)


def _factor(a, w, order, zeroed, lower, clean, info, flagged):
    fill_lower = lower if order == "F" else not lower  # C order: column-major conjugate
    nb = len(w)
    looped = route("potrf", a.shape[-1], nb, fused=False) != "batched"
    with Solver(w.dtype, nb, info=info, params=looped) as sv:
        if sv.params is None:
            sv.potrf_batched(w, fill_lower)
        else:  # per-matrix Xpotrf, on stream lanes for a stack
            with fan(lanes("potrf", a.shape[-1], nb)) as fanned:
                ways = spread(sv, fanned, nb)
                for i in range(nb):
                    lane, stream = ways[i % len(ways)]
                    with stream:
                        lane.potrf(w[i], fill_lower, i)
        mark_nonfinite(w, info)  # one kernel: the codes and the diagonal in one read-back
        codes = sv.check("potrf")  # the only synchronization of the call
    if flagged and codes[nb]:
        raise_nonfinite("a")
    codes = codes[:nb]
    if codes.max() > 0:  # one host reduction on success; the input is diagnosed on failure
        _raise_failure(a, codes, lower, _shares(a, w), flagged)
    if clean and not zeroed:  # potrf reads and writes only its own triangle
        _zero_triangle(w, lower)
    return w.reshape(a.shape)


def _raise_failure(a, codes, lower, overwritten, input_finite=False, offset=0):
    """Raise for the first failed matrix: a failed minor first, else a non-finite diagonal
    (``overwritten``: ``a`` was factored in place; ``input_finite``: it was checked finite;
    see :func:`._cholesky_xp.failure`). ``codes[i]`` is matrix ``offset + i``'s."""
    nonfinite = codes >= NONFINITE
    bad = np.flatnonzero((codes > 0) & ~nonfinite)
    if bad.size or nonfinite.any():
        at = int(bad[0] if bad.size else np.flatnonzero(nonfinite)[0])
        minor = int(codes[at]) if bad.size else int(codes[at]) - NONFINITE + 1
        entry = offset + at
        raise failure(minor, _entry(a, entry), lower, overwritten,
                      batch_index(entry, a.shape[:-2]), input_finite)


#: A per-matrix code at or above this marks a factor whose diagonal entry ``code - NONFINITE``
#: (0-based) is NaN or Inf while ``potrf`` reported success (``info`` codes stay below).
NONFINITE = 1 << 30

_CODES_SOURCE = FINITE_PREAMBLE + kernel_source(__package__, "potrf_codes.cu")

_CODE_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
               np.dtype(np.complex64): "complex<float>",
               np.dtype(np.complex128): "complex<double>"}


def mark_nonfinite(w, info):
    """Mark in ``info`` (int32, one per matrix, ``potrf``'s codes) every matrix of the factor
    stack ``w`` (B, n, n) with NaN or Inf on its diagonal: ``NONFINITE + j`` for the first
    such entry ``j``, where ``potrf`` reported success. One kernel, no synchronization."""
    nb, n = w.shape[0], w.shape[-1]
    if nb == 0 or n == 0:
        return
    item = w.itemsize
    kern = raw_kernel("gl_potrf_codes", _CODES_SOURCE, {"T": _CODE_TYPES[w.dtype]},
                      options=("--std=c++17",))
    kern((nb, (n + 1023) // 1024), (256,),
         (w, info, np.int64(n), np.int64(w.strides[0] // item),
          np.int64((w.strides[1] + w.strides[2]) // item), np.int32(NONFINITE)))


def _entry(a, flat):
    """Matrix ``flat`` of the stack ``a`` (..., n, n)."""
    return a.reshape((-1,) + a.shape[-2:])[flat] if a.ndim > 2 else a


def _shares(a, w):
    """Whether the working stack ``w`` is ``a`` itself (factored in place: views of ``a``
    start at its first element, new working copies elsewhere)."""
    return w.data.ptr == a.data.ptr


def _stack_view(a, order):
    """``a`` as a ``(B, n, n)`` view whose matrices are contiguous in ``order`` with a uniform
    stride, or ``None`` when its memory is not laid out that way."""
    n = a.shape[-1]
    batch = math.prod(a.shape[:-2])
    if order == "C":
        return a.reshape(batch, n, n) if a.flags.c_contiguous else None
    t = a.swapaxes(-1, -2)
    return t.reshape(batch, n, n).swapaxes(-1, -2) if t.flags.c_contiguous else None


def _in_place_view(a, dtype, lower):
    """``(w, order, False)`` for ``a`` itself, in the fast kernel's layout first, else the
    other one; ``None`` when ``a`` is neither (or of another dtype)."""
    if a.dtype != dtype:
        return None
    want = "F" if lower else "C"
    for order in (want, "F" if want == "C" else "C"):
        view = _stack_view(a, order)
        if view is not None:
            return view, order, False
    return None


def _work_copy(a, dtype, lower, overwrite, clean, slot=None):
    """``(w, order, zeroed, flagged)``: the ``(B, n, n)`` matrices to factor, contiguous in
    ``order``; ``zeroed``: the triangle the factorization leaves alone is zero already;
    ``flagged``: the copy also flagged NaN or Inf of ``a`` in ``slot`` (an int32 device slot,
    or ``None``), the finiteness check of :func:`._finite_cuda.flag_nonfinite` in the same
    kernel (else the caller launches that check).

    cuSOLVER's lower-triangle kernel is the fast one (about 2x the upper one on the H200), so
    ``w`` is laid out for it: column-major (F) for ``lower=True``, C order for ``lower=False``
    (read column-major, its lower triangle is the conjugate of ``a``'s upper one). That may
    take a transposing copy, made tile by tile (:mod:`._transpose_cuda`), which zeroes the
    other triangle on the way when ``clean``. With ``overwrite`` the input itself is used when
    it already has that layout (:func:`cholesky_in_place` also takes the other one).
    """
    import cupy
    want = "F" if lower else "C"
    if overwrite and a.dtype == dtype:
        view = _stack_view(a, want)
        if view is not None:
            return view, want, False, False
    n = a.shape[-1]
    batch = math.prod(a.shape[:-2])
    w = _new_work(cupy, batch, n, dtype, lower)
    if a.dtype == dtype:
        same = None if clean else _stack_view(a, want)
        if same is not None:  # one contiguous copy (C-ordered views when F)
            dst, src = (w, same) if want == "C" else (w.swapaxes(-1, -2), same.swapaxes(-1, -2))
            dst[...] = src
            return w, want, False, False
        # In the frame where a's matrices are contiguous along the last axis, w's are along
        # the middle one; "q > p" there is the triangle that stays (lower: above the diagonal).
        pair = _transposing_pair(a, w, lower)
        if pair is not None:
            _transpose_cuda.transpose_copy(*pair, zero_above=clean, flag=slot)
            return w, want, clean, slot is not None
    if clean:  # one kernel: the copy, zero in the triangle potrf leaves alone (and the flag)
        fused = slot is not None and a.dtype == dtype
        _copy_zero_triangle(a.reshape(batch, n, n), w, lower, slot if fused else None)
        return w, want, True, fused
    w[...] = a.reshape(batch, n, n)
    return w, want, False, False


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


def _copy_zero_triangle(src, w, lower, slot=None):
    """``w[...] = src`` for ``(B, n, n)`` stacks (any strides and dtypes), with the strict
    upper (``lower=True``) or lower triangle of each matrix zero instead: one kernel (a copy
    and :func:`_zero_triangle` were two, most of a small stack's device time). ``slot``
    (an int32 device slot, floating ``src`` only): set to 1 when ``src`` holds NaN or Inf
    (SciPy's ``check_finite`` in the same kernel: one launch less)."""
    w, lower, src = _contiguous(w, lower, src)
    name = _sized("gpulinalg_copy_zero", w)
    if slot is None:
        kernel = elementwise_kernel("S a, int64 n, bool lower", "T x", _COPY_BODY[name], name)
        kernel(src, w.shape[-1], lower, w)
    else:
        kernel = elementwise_kernel("S a, int64 n, bool lower", "T x, raw int32 flag",
                                    _COPY_FLAG_BODY[name], name + "_flag",
                                    preamble=FINITE_PREAMBLE)
        kernel(src, w.shape[-1], lower, w, slot)


#: The copy kernels' bodies: the zeroing kernel's, copying where it leaves an entry alone.
_COPY_BODY = {name.replace("zero_triangle", "copy_zero"): body.replace(
    "{ x = T(0); }", "{ x = T(0); } else { x = (T)a; }") for name, body in _ZERO_BODY.items()}
_COPY_FLAG_BODY = {name: "if (!gl_fin(a)) flag[0] = 1; " + body
                   for name, body in _COPY_BODY.items()}


def _zero_triangle(w, lower):
    """Zero the strict upper (``lower=True``) or lower triangle of each matrix, in place."""
    w, lower = _contiguous(w, lower)
    name = _sized("gpulinalg_zero_triangle", w)
    kernel = elementwise_kernel("int64 n, bool lower", "T x", _ZERO_BODY[name], name)
    kernel(w.shape[-1], lower, w)


def _contiguous(w, lower, *others):
    """``(w, lower, *others)`` of the triangle kernels, seen with the last two axes swapped
    (the triangle with them) where that makes ``w`` C-contiguous: a contiguous kernel was 4x
    faster at n = 32768."""
    if not w.flags.c_contiguous and w.swapaxes(-1, -2).flags.c_contiguous:
        return (w.swapaxes(-1, -2), not lower, *(x.swapaxes(-1, -2) for x in others))
    return (w, lower, *others)


def _sized(stem, w):
    """The triangle kernel ``stem`` with 32-bit index arithmetic where ``w`` allows it."""
    return stem + "32" if w.size < 2 ** 31 else stem


def cho_solve(c, lower, b, overwrite_b, dtype, check=False, finite=False):
    """``a^-1 b`` from the CuPy Cholesky factor ``c`` (..., n, n) of ``a`` (the ``lower``
    triangle is read); ``b`` (n,) or (..., n, k), batches broadcast. ``b`` is never written.

    ``check``: the conditioning rule of :mod:`._triangular_xp` after the solve (one
    read-back of its figures). ``finite``: SciPy's ``check_finite`` of ``c`` and ``b`` in
    that same read-back. Runs on the caller's current stream, as
    :func:`._triangular_cuda.solve_triangular` does."""
    # a = L L^H: solve with L then L^H; the upper factor U = L^H is read as L (conjugated)
    estimate = rcond_estimate(c, lower, False, dtype, squared=True) if check else None
    x = fused_solve(c, b, dtype, (not lower, not lower, 2), False, check, finite,
                    ("c", "b"), squared=True, estimate=estimate)
    if x is not None:
        return x
    with op_stream():  # the cuBLAS and cuSOLVER handles are bound to the thread's stream
        if finite and not check:
            check_finite_pair(c, b, ("c", "b"))
        x = _cho_solve(c, lower, b, dtype)
        if check:
            check_conditioning(c, b, x, False, squared=True, finite=finite, names=("c", "b"),
                               estimate=estimate)
    return x


def _cho_solve(c, lower, b, dtype):
    import cupy
    x, batch, vec = rhs_copy(c, b, dtype)
    if route("trsm", c.shape[-1], len(x), fused=False) == "batched":  # two batched solves
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
        sv.done()  # potrs reports argument errors only: no synchronization of its own
    return finish_rhs(x, batch, vec)


def tile_potrf(x, offset):
    """Dask tile task: lower Cholesky factor of the diagonal CuPy tile ``x`` (first row: row
    ``offset`` of the whole matrix); a failure names the leading minor of the whole matrix."""
    if x.shape[0] == 0:
        return x.copy()
    try:
        with op_stream():
            return cholesky(x, True, False, True, x.dtype)
    except NotPositiveDefiniteError as e:
        raise NotPositiveDefiniteError(offset + e.minor) from None
