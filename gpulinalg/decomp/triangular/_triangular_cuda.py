"""GPU engine of the triangular solves: cuBLAS ``<t>trsm`` and ``<t>trsmBatched``.

A C-ordered triangular matrix read column-major is its transpose, so it is solved in place
with the transposed operation and the other triangle; no transposing copy of ``a`` is made
(except for ``trans="C"`` on a C-ordered complex matrix). Part of decomp's internal layer:
CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.
"""

import math

import numpy as np

from ..._runtime.arrays import to_host
from ..._runtime.kernels import INT32, INT64, POINTER, Launcher, kernel_source
from ..._runtime.streams import op_stream
from .._kernels import _fused_cuda, _policy_cuda, _stream_trsm_cuda, _wide_trsm_cuda
from .._checks import broadcast_batch, matrix_order, sub
from .._gpu import _batched_plan
from .._gpu._batched_plan import route
from .._gpu._cusolver_cuda import chain_buffers, fill_pointers, routines
from .._gpu._finite_cuda import flag_nonfinite, raise_nonfinite
from .._kernels._scalars_cuda import mapped_read_back
from ._triangular_xp import check_nonsingular, inv_norm1_estimate, judge, judge_bound

__all__ = ["solve_triangular", "fused_solve", "own_route", "check_conditioning",
           "rcond_estimate", "check_finite_pair", "rhs_copy", "finish_rhs", "stack_matrices",
           "trsm_batched"]


def solve_triangular(a, b, trans, lower, unit_diagonal, overwrite_b, dtype, check=False,
                     finite=False):
    """``op(a)^-1 b`` for CuPy ``a`` (..., n, n) and ``b`` ((n,) or (..., n, k)); ``trans``
    0, 1 or 2 (N, T, C). Raises :class:`gpulinalg.SingularMatrixError` on a zero diagonal
    entry unless ``unit_diagonal``. ``b`` is never written (a copy is solved in place).

    ``check``: the conditioning rule of :mod:`._triangular_xp`, after the solve, with the
    zero-diagonal check in the same single read-back (without ``check``, the zero check runs
    before the solve). ``finite``: SciPy's ``check_finite`` of ``a`` and ``b``, in that same
    read-back (``ValueError``; a solve with NaN or Inf is harmless, only its result is
    dropped).

    Runs on the caller's current stream: the fused routes launch their kernels there, and
    the cuBLAS route enters :class:`~gpulinalg._runtime.streams.op_stream` itself."""
    import cupy
    # m = op(a) is lower triangular (forward substitution with it), or m^H is (backward)
    forward = bool(lower) == (trans == 0)
    estimate = rcond_estimate(a, lower, unit_diagonal, dtype) if check else None
    x = fused_solve(a, b, dtype, (not lower, (trans == 2) == forward, 0 if forward else 1),
                    unit_diagonal, check, finite, ("a", "b"), squared=False, estimate=estimate)
    if x is not None:
        return x
    with op_stream():  # cuBLAS's handle is bound to the thread's stream
        if finite and not check:
            check_finite_pair(a, b, ("a", "b"))
        if not unit_diagonal and not check:
            check_nonsingular(a, cupy)
        x = _solve(a, b, trans, lower, unit_diagonal, dtype)
        if check:
            check_conditioning(a, b, x, unit_diagonal, finite=finite, estimate=estimate)
    return x


def fused_solve(a, b, dtype, how, unit, check, finite, names, squared, estimate=None):
    """The solve of a stack by :func:`._fused_cuda.trsm` (small matrices),
    :func:`._stream_trsm_cuda.trsm` (medium and large ones, few right-hand sides) or
    :func:`._wide_trsm_cuda.trsm` (one matrix, few right-hand sides): one launch,
    one read-back of its 3-word summary, none when nothing is to be checked; or ``None`` where
    the table of :mod:`._batched_plan` picks another route. ``how``: the kernel's
    ``(tr, cj, mode)``. Checks as :func:`solve_triangular`: ``check`` the conditioning rule
    (``squared``: of ``a^H a``), else only a zero on the diagonal (unless ``unit`` or ``mode``
    2: ``cho_solve`` without ``check`` checks nothing); ``finite``: NaN or Inf in ``a`` or
    ``b`` (``names``). The summary's flags say when something is wrong; only then is anything
    looked at again (the first zero on the diagonal, in ``a``'s own order).

    What a layout needs (route, views, strides, kernel) is worked out once per ``(shape,
    strides, dtype)`` of ``a`` and ``b`` and the options (:data:`_PLANS`): a repeat allocates
    the solution, launches, and reads the summary back (the wide kernel's from mapped host
    memory, :class:`._scalars_cuda.MappedReadBack`)."""
    import cupy
    if not _policy_cuda.enabled():
        return None  # the library routes
    key = (a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype, dtype, how, unit,
           a.data.device_id)  # a plan holds kernels compiled for its device
    plan = _PLANS.get(key)
    if plan is None or plan[0] is not cupy or plan[1] is not _batched_plan.TABLE["trsm"]:
        plan = _solve_plan(cupy, a, b, dtype, how, unit, squared)
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    if plan[2] is None:
        return None
    _, _, out_shape, swap, direct, launcher, words, solve, flag_first = plan
    read = check or finite or (not unit and how[2] != 2)
    out = cupy.empty(out_shape, dtype=dtype)
    if swap:
        out = out.swapaxes(-1, -2)
    dev, stream = a.data.device_id, cupy.cuda.get_current_stream().ptr
    summ, totals = _fused_cuda.summary(cupy, "trsm", dev, stream)
    if direct:
        if flag_first and finite:  # the streamed kernel reads the triangle only
            _fused_cuda.flag_before(a, summ)
        checks = _fused_cuda.checks(read, finite and not flag_first)
        if words:  # the wide kernel writes its summary into mapped host memory too
            ws = _wide_trsm_cuda.workspace(cupy, dev, words, stream)
            if read:
                totals = mapped_read_back(cupy, "wide", dev, stream)
                launcher.launch(stream, a, b, out, summ, checks, ws, totals.device,
                                totals.arm())
            else:
                launcher.launch(stream, a, b, out, summ, checks, ws, 0, 0)
        else:
            launcher.launch(stream, a, b, out, summ, checks)
    else:
        _solve_copies(cupy, solve, a, b, out, summ, dtype, how, unit, squared, read, finite)
    if not read:
        return out
    host = totals.get()  # the only synchronization of the call
    flags = int(host[0])
    if flags:
        if finite and flags & _fused_cuda.A_BAD:
            raise_nonfinite(names[0])
        if finite and flags & _fused_cuda.B_BAD:
            raise_nonfinite(names[1])
        if flags & _fused_cuda.ZERO_DIAGONAL:  # names the first one in a's own order
            check_nonsingular(a.astype(dtype, copy=False), cupy)
    if check:
        judge_bound(float(host.view(np.float64)[1]), dtype, squared, estimate)  # its bits
    return out


#: Layouts of the fused solves: key of :func:`fused_solve` -> ``(cupy module, table rows,
#: out shape or None (another route), swap, direct, launcher (a
#: :class:`~gpulinalg._runtime.kernels.Launcher` with the constant arguments), the wide
#: kernel's workspace words (0: another kernel), the kernel's trsm, whether check_finite of
#: all of ``a`` runs before the launch)``.
_PLANS: dict = {}
_MAX_PLANS = 256


def own_route(n, nb, k, dtype):
    """The route of the table for ``nb`` triangular solves of order ``n`` with ``k``
    right-hand sides, with the fits of decomp's own kernels (fused, streamed, wide; none
    where :func:`._policy_cuda.enabled` is false)."""
    if not _policy_cuda.enabled():
        return route("trsm", n, nb, fused=False, rhs=k, dtype=dtype)
    return route("trsm", n, nb, fused=_fused_cuda.fits(n, dtype), rhs=k, dtype=dtype,
                 stream=_stream_trsm_cuda.fits(n, k, dtype, _stream_trsm_cuda.shared_limit()),
                 wide=_wide_trsm_cuda.fits(n, k, dtype, _stream_trsm_cuda.shared_optin()))


def _solve_plan(cupy, a, b, dtype, how, unit, squared):
    """What :func:`fused_solve` keeps for a layout (see :data:`_PLANS`). ``direct``: ``a`` and
    ``b`` flatten to ``(B, n, n)`` / ``(B, n, k)`` views of ``dtype`` (broadcasts included), so
    a repeat passes them to the kernel as they are, with the strides kept here."""
    rows = _batched_plan.TABLE["trsm"]
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    n, k = b2.shape[-2:]
    batch = broadcast_batch(a.shape[:-2], b2.shape[:-2])
    nb = math.prod(batch)
    way = own_route(n, nb, k, dtype)
    if way not in ("fused", "stream", "wide"):
        return (cupy, rows, None)
    out_shape = batch + ((n,) if vec else (k, n))
    out = cupy.empty(out_shape, dtype=dtype)
    if not vec:
        out = out.swapaxes(-1, -2)
    x3 = out.reshape(nb, n, k)
    a3, b3 = _stack_of(cupy, a, batch, nb, dtype), _stack_of(cupy, b2, batch, nb, dtype)
    direct = a3.data.ptr == a.data.ptr and b3.data.ptr == b.data.ptr and a3.dtype == a.dtype \
        and b3.dtype == b.dtype and x3.data.ptr == out.data.ptr
    if way == "fused":
        kern, grid, block, strides = _fused_cuda.launch_args("gl_small_trsm", x3, n, nb, a3, b3,
                                                             x3)
        extra, solve, shared, words = (), _fused_cuda.trsm, 0, 0
    elif way == "stream":
        kern, grid, block, strides, kg, shared = _stream_trsm_cuda.launch_args(x3, n, nb, a3,
                                                                              b3, x3)
        extra, solve, words = (kg,), _stream_trsm_cuda.trsm, 0
    else:
        kern, grid, block, strides, shared = _wide_trsm_cuda.launch_args(x3, n, how[2], a3,
                                                                         b3, x3)
        extra, solve = (), _wide_trsm_cuda.trsm
        words = _wide_trsm_cuda.words(n, k, how[2], dtype)
    tr, cj, mode = how
    args = (POINTER, POINTER, POINTER, POINTER, np.int32(n), np.int32(k), *strides,
            np.int32(bool(tr)), np.int32(bool(cj)), np.int32(mode), np.int32(bool(unit)),
            np.int32(bool(squared)), *extra, INT32, *((POINTER, INT64, INT32) if words else ()))
    launcher = Launcher(kern, grid, block, args, shared)
    return (cupy, rows, out_shape, not vec, direct, launcher, words, solve, way == "stream")


def _solve_copies(cupy, solve, a, b, out, summ, dtype, how, unit, squared, read, finite):
    """The launch of :func:`fused_solve` where ``a`` or ``b`` needs a copy (another dtype,
    batch axes that do not merge): the copies made, the strides taken afresh; ``solve``:
    the ``trsm`` of the plan's kernel."""
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    n, k = b2.shape[-2:]
    batch = broadcast_batch(a.shape[:-2], b2.shape[:-2])
    nb = math.prod(batch)
    a3, b3 = _stack_of(cupy, a, batch, nb, dtype), _stack_of(cupy, b2, batch, nb, dtype)
    solve(a3, b3, out.reshape(nb, n, k), summ, *how, unit, squared, read, finite)


def _stack_of(cupy, x, batch, nb, dtype):
    """``x`` (..., p, q) broadcast to ``batch`` as a ``(nb, p, q)`` stack of ``dtype`` (a view
    where the strides allow: stride 0 for a broadcast matrix)."""
    if tuple(x.shape[:-2]) != batch:
        x = cupy.broadcast_to(x, batch + tuple(x.shape[-2:]))
    x = x.reshape((nb,) + tuple(x.shape[-2:]))
    return x if x.dtype == dtype else x.astype(dtype)


def check_finite_pair(a, b, names):
    """``ValueError`` naming the first of ``a``, ``b`` that holds NaN or Inf: two flag
    kernels into one buffer, one read-back."""
    import cupy
    flags = cupy.zeros(2, dtype=np.int32)
    flag_nonfinite(a, flags[0:1])
    flag_nonfinite(b, flags[1:2])
    host = flags.get()
    for name, bad in zip(names, host):
        if bad:
            raise_nonfinite(name)


def _solve(a, b, trans, lower, unit_diagonal, dtype):
    x, batch, vec = rhs_copy(a, b, dtype)
    n = a.shape[-1]
    if route("trsm", n, len(x), fused=False) == "batched":
        trsm_batched(stack_matrices(a, batch, dtype), x, trans, lower, unit_diagonal)
    else:
        for i, idx in enumerate(np.ndindex(*batch)):
            _trsm(sub(a, idx, 2).astype(dtype, copy=False), x[i], trans, lower, unit_diagonal)
    return finish_rhs(x, batch, vec)


def rhs_copy(a, b, dtype):
    """``(x, batch, vec)``: ``b`` broadcast over the batch of ``a`` and copied to a new
    ``(B, n, k)`` array of column-major matrices (a 1-D ``b`` is one column)."""
    import cupy
    vec = b.ndim == 1
    b2 = b[:, None] if vec else b
    batch = broadcast_batch(a.shape[:-2], b2.shape[:-2])
    n, k = b2.shape[-2:]
    nb = math.prod(batch)
    x = cupy.empty((nb, k, n), dtype=dtype).transpose(0, 2, 1)
    x[...] = cupy.broadcast_to(b2, batch + (n, k)).reshape(nb, n, k)
    return x, batch, vec


def finish_rhs(x, batch, vec):
    x = x.reshape(batch + x.shape[1:])
    return x[..., 0] if vec else x


def stack_matrices(a, batch, dtype):
    """``a`` broadcast to ``batch`` as a ``(B, n, n)`` array whose matrices are contiguous in
    ``a``'s own order (C or column-major), with a uniform stride; no copy when ``a`` already
    is one."""
    import cupy
    n = a.shape[-1]
    nb = math.prod(batch)
    order = matrix_order(a) or "F"
    if a.dtype == dtype and tuple(a.shape[:-2]) == tuple(batch):
        if order == "C" and a.flags.c_contiguous:
            return a.reshape(nb, n, n)
        t = a.swapaxes(-1, -2)
        if order == "F" and t.flags.c_contiguous:  # a column-major stack (cho_factor's lower)
            return t.reshape(nb, n, n).swapaxes(-1, -2)
    w = cupy.empty((nb, n, n), dtype=dtype)
    if order == "F":
        w = w.transpose(0, 2, 1)
    w[...] = cupy.broadcast_to(a, tuple(batch) + (n, n)).reshape(nb, n, n)
    return w


def _op(a, trans, lower):
    """``(a, trans, lower)`` for cuBLAS: a C-ordered ``a`` read column-major is ``a^T``, so
    N and T swap and so do the triangles; ``a^H`` of a C-ordered complex ``a`` needs a
    column-major copy."""
    import cupy
    order = matrix_order(a)
    if order is None or (order == "C" and trans == 2 and a.dtype.kind == "c"):
        a = cupy.asfortranarray(a) if a.ndim == 2 else _fortran_stack(a)
        order = "F"
    if order == "C":
        trans, lower = (1 if trans == 0 else 0), not lower
    return a, trans, lower


def _fortran_stack(a):
    import cupy
    w = cupy.empty((a.shape[0], a.shape[2], a.shape[1]), dtype=a.dtype).transpose(0, 2, 1)
    w[...] = a
    return w


def _cublas_args(a, trans, lower, unit_diagonal):
    from nvmath.bindings import cublas
    ops = (cublas.Operation.N, cublas.Operation.T, cublas.Operation.C)
    return (int(cublas.SideMode.LEFT),
            int(cublas.FillMode.LOWER if lower else cublas.FillMode.UPPER), int(ops[trans]),
            int(cublas.DiagType.UNIT if unit_diagonal else cublas.DiagType.NON_UNIT))


def _trsm(a, x, trans, lower, unit_diagonal):
    """``x <- op(a)^-1 x`` in place; ``x`` column-major."""
    from nvmath.bindings import cublas

    from ..._runtime.streams import get_handle
    a, trans, lower = _op(a, trans, lower)
    one = np.ones(1, dtype=a.dtype)
    n, k = x.shape
    getattr(cublas, routines(a.dtype).prefix + "trsm")(
        get_handle("cublas"), *_cublas_args(a, trans, lower, unit_diagonal),
        n, k, one.ctypes.data, a.data.ptr, max(n, 1), x.data.ptr, max(n, 1))


def trsm_batched(a, x, trans, lower, unit_diagonal):
    """``x[i] <- op(a[i])^-1 x[i]`` for a stack, in one ``<t>trsmBatched`` call; ``a`` from
    :func:`stack_matrices`, ``x`` from :func:`rhs_copy`."""
    from nvmath.bindings import cublas

    from ..._runtime import graphs
    from ..._runtime.streams import get_handle
    a, trans, lower = _op(a, trans, lower)
    one = np.ones(1, dtype=a.dtype)  # alpha, read on the host as the chain is issued
    nb, n, k = x.shape
    fn = getattr(cublas, routines(a.dtype).prefix + "trsm_batched")
    handle, args = get_handle("cublas"), _cublas_args(a, trans, lower, unit_diagonal)
    # its chain of launches (pointer offsets, blocked solves and updates) as one graph
    key = ("trsm_batched", a.data.device_id, a.dtype.char, n, k, nb, args, int(handle))
    chain = graphs.entry(key, lambda: chain_buffers(nb, ("a", "x"), info=False),
                         address=(int(a.data.ptr), int(x.data.ptr)))
    fill_pointers(chain.buffers, a, "a")
    fill_pointers(chain.buffers, x, "x")
    chain.launch(lambda b: fn(handle, *args, n, k, one.ctypes.data, int(b["a"].data.ptr),
                              max(n, 1), int(b["x"].data.ptr), max(n, 1), nb))


# -- the conditioning rule of ._triangular_xp: its reductions fused into two raw kernels ----------

_FIGURES_SOURCE = kernel_source(__package__, "tri_figures.cu")

_FIGURE_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
                 np.dtype(np.complex64): "complex<float>",
                 np.dtype(np.complex128): "complex<double>"}


#: Rows of the figures up to this length are reduced by one warp each (a block of 256
#: threads per row of 8 or 64 entries left most of a stack's blocks idle in barriers).
WARP_ROW_MAX = 512


def _reduce(src3, out, diag):
    """Launch the figures kernel on the ``(B, L, k)`` strided stack ``src3`` (reduce over L
    per (b, j)) into the float64 ``out``."""
    from ..._runtime.kernels import raw_kernel
    nb, length, k = src3.shape
    if nb * k == 0:
        return
    item = src3.itemsize
    kern = raw_kernel("gl_tri_figures", _FIGURES_SOURCE, {"T": _FIGURE_TYPES[src3.dtype]},
                      options=("--std=c++17",))
    sb, sl, sk = (st // item for st in src3.strides)
    rows = nb * k
    warp = length <= WARP_ROW_MAX  # short rows: a warp each, 8 to a block
    grid = (rows + 7) // 8 if warp else rows
    kern((grid,), (256,), (src3, out, np.int64(k), np.int64(length), np.int64(sb),
                           np.int64(sk), np.int64(sl), np.int32(diag), np.int64(rows),
                           np.int32(warp)))


def _stack3(x, n):
    """``x`` (..., n, k) as a ``(B, n, k)`` strided view (a copy only when its batch axes do
    not merge)."""
    return x.reshape((-1, n, x.shape[-1]))


def figures(a, b, x, unit_diagonal, finite=False, names=("a", "b")):
    """The figures of :func:`._triangular_xp.figures` for CuPy ``a``, ``b`` and ``x``: two or
    three launches of one reduction kernel into one buffer, one read-back (the generic
    version takes some thirty launches: most of a small solve's time). ``finite``: SciPy's
    ``check_finite`` of ``a`` and ``b`` (named ``names``) in the same read-back."""
    import cupy
    n = a.shape[-1]
    if b.dtype not in _FIGURE_TYPES:  # integer or half-precision b: the solve's dtype
        b = b.astype(x.dtype)
    b2 = b[:, None] if b.ndim == 1 else b
    x2 = x[..., None] if x.ndim == a.ndim - 1 else x
    k = b2.shape[-1]
    a_batch, b_batch, x_batch = tuple(a.shape[:-2]), tuple(b2.shape[:-2]), tuple(x2.shape[:-2])
    na = math.prod(a_batch)
    nbb = math.prod(b_batch)
    nx = math.prod(x_batch)
    size = 3 * na + nbb * k + nx * k
    # finite: one more slot, flagged by a kernel over all of ``a`` (``b``'s figures show
    # NaN or Inf by themselves: the maxima keep them)
    out = cupy.zeros(size + 1, dtype=np.float64) if finite else cupy.empty(size, np.float64)
    if finite:
        flag_nonfinite(a, out[size:])
    if not unit_diagonal:
        diag = cupy.diagonal(a, axis1=-2, axis2=-1).reshape(na, n)[:, :, None]
        if diag.dtype not in _FIGURE_TYPES:
            diag = diag.astype(x.dtype)
        _reduce(diag, out[:3 * na], True)
    _reduce(_stack3(b2, n), out[3 * na:3 * na + nbb * k], False)
    _reduce(_stack3(x2, n), out[3 * na + nbb * k:], False)
    host = out.get()  # the only synchronization of the call
    if finite and host[size]:
        raise_nonfinite(names[0])
    if finite and not np.isfinite(host[3 * na:3 * na + nbb * k]).all():
        raise_nonfinite(names[1])
    dstats = host[:3 * na].reshape(a_batch + (3,))
    if unit_diagonal:
        dstats = np.broadcast_to(np.array([1.0, 1.0, -1.0]), a_batch + (3,))
    scale = host[3 * na:3 * na + nbb * k].reshape(b_batch + (k,))
    xn = host[3 * na + nbb * k:size].reshape(x_batch + (k,))
    return dstats, xn, scale


def check_conditioning(a, b, x, unit_diagonal, squared=False, finite=False, names=("a", "b"),
                       estimate=None):
    """The conditioning rule of :mod:`._triangular_xp` after ``x = op(a)^-1 b`` on the GPU
    (``b`` is never written by the GPU solves): :func:`figures`, then its ``judge``
    (``estimate``: :func:`rcond_estimate`'s callable, run where the bound is unsure)."""
    judge(a, *figures(a, b, x, unit_diagonal, finite, names), x.dtype, squared, estimate)


def rcond_estimate(a, lower, unit_diagonal, dtype, squared=False):
    """A callable giving the reciprocal 1-norm condition number of the triangular stack ``a``
    (the smallest over it; squared for a Cholesky factor's ``a^H a``), the GPU's ``trcon``:
    ``||T||_1`` exactly and ``||T^-1||_1`` by :func:`._triangular_xp.inv_norm1_estimate`
    through this engine's own solves (three, of one or two columns), one read-back. The rule
    calls it only where the cheap bound is below ``sqrt(eps)``."""
    def estimate():
        import cupy
        n = a.shape[-1]
        nb = math.prod(a.shape[:-2])
        t = cupy.ascontiguousarray(a.reshape(nb, n, n), dtype=dtype)
        t = cupy.tril(t) if lower else cupy.triu(t)
        if unit_diagonal:
            idx = cupy.arange(n)
            t[:, idx, idx] = 1
        adjoint = 2 if np.dtype(dtype).kind == "c" else 1

        def solve(x, adj):
            return solve_triangular(t, x, adjoint if adj else 0, lower, unit_diagonal, False,
                                    dtype)
        with op_stream():
            inv = inv_norm1_estimate(solve, nb, n, dtype, cupy)
            norm = cupy.abs(t).sum(axis=-2).max(axis=-1)
            worst = float(to_host((1 / (norm * inv)).min()))
        return worst * worst if squared else worst
    return estimate
