"""The GPU engine of gp: ``la`` for the bodies of :mod:`._solve_xp` and :mod:`._fit_xp`, and
the dispatcher's GPU functions of gp's four operations (:class:`._fit_xp.Operations` on it).

``la`` is this module: decomp's internal CuPy layer (:func:`cholesky`, :func:`cho_solve`,
:func:`logdet` of :mod:`gpulinalg.decomp.cholesky._cholesky_cuda`, :func:`solve_triangular` of
:mod:`gpulinalg.decomp.triangular._triangular_cuda`: CuPy arrays on the dispatcher's stream, no
second validation, dispatch or budget question), :func:`cho_inverse` (cuBLAS ``trsm`` + ``gemm``,
or ``potri``), :func:`keep` and :func:`training`. The CPU twin is :mod:`._engine_host`.

The four operations, given CuPy arrays, run inside
:class:`~gpulinalg._runtime.streams.op_stream`: under the dispatcher that is its stream already
(nothing to order); called directly (benchmarks, tests) it puts CuPy's work and the library
handles on one stream, so that a factorization never starts before the kernel matrix it reads
is written.
"""

import sys

import numpy as np

from .._runtime import arrays as _arrays
from .._runtime.dispatch import headroom_bytes, note
from .._runtime.streams import get_handle, op_stream
from ..decomp._engines import cho_solve_cuda as cho_solve
from ..decomp._engines import cholesky_cuda as cholesky
from ..decomp._engines import logdet_cuda as logdet
from ..decomp._engines import custom_kernels_enabled
from ..decomp._engines import gram_lower, tri_inverse, tri_inverse_scratch
from ..decomp._engines import solve_triangular_cuda as solve_triangular
from . import _cg_fused_cuda, _fused_cuda, _precond_xp
from ._cg_fused_cuda import fused_operator, product_dtype
from ._cg_stored_xp import StoredOperator
from ._cg_fit_xp import CGOperations
from ._fit_xp import Operations, mirror_lower
from ._fused_cuda import tril_copy
from ._kernels_xp import fused_form
from ._mixed_xp import Operator

__all__ = ["exact_gp_solve", "log_marginal_likelihood", "fit", "predict", "cholesky",
           "cho_solve", "solve_triangular", "logdet", "cho_inverse", "keep", "training",
           "cg_log_marginal_likelihood", "cg_fit", "cg_predict", "cg_operator",
           "pivoted_cholesky"]

_POTRI = {"f": "spotri", "d": "dpotri"}


def cho_inverse(L):
    """``K^-1`` (full, symmetric) from the lower Cholesky factor ``L`` of ``K`` (CuPy, float32
    or float64), on the current stream, no synchronization.

    Fast route, float64 with the headroom for a second ``n x n`` buffer and the merges'
    scratch: ``V = L^-1`` in that buffer by
    :func:`~gpulinalg.decomp._kernels._cholinv_cuda.tri_inverse` (the diagonal blocks of order 32 by
    one kernel, then doubling merges by strided-batched cuBLAS ``gemm``: ``2 n^3 / 3``
    flops, all in GEMMs), then ``K^-1 = V^T V`` by ``gemm`` in column panels written into
    ``L``'s memory (:func:`~gpulinalg.decomp._kernels._cholinv_cuda.gram_lower` with ``full``).
    Peak memory: the factor, one ``n x n`` buffer and a scratch under a quarter of one. When
    the dispatcher found less headroom than that beyond the run's estimate
    (:func:`~gpulinalg._runtime.dispatch.headroom_bytes`), or in float32, the memory-lean
    route: cuSOLVER's ``potri`` in ``L``'s own memory, then :func:`._fit_xp.mirror_lower`; the
    same where the hand-written kernels are off (``custom_kernels``)."""
    import cupy
    c = L if L.flags.f_contiguous else cupy.asfortranarray(L)
    n = c.shape[0]
    headroom = headroom_bytes()
    if c.dtype != np.float64 or not custom_kernels_enabled() or (headroom is not None and
                                 headroom < 8 * (n * n + tri_inverse_scratch(n))):
        return _potri(c)
    lf = c.T.reshape(-1)  # column-major memory of L, flat
    v = cupy.empty(n * n, dtype=np.float64)
    tril_copy(lf, n, v)
    tri_inverse(v, n, cupy.empty(tri_inverse_scratch(n), dtype=np.float64))
    gram_lower(v, n, lf, full=True)
    return c.T


def _potri(c):
    """``K^-1`` by cuSOLVER's ``potri`` (``trtri`` + ``lauum``) in ``c``'s own memory
    (column-major ``L``), mirrored (:func:`._fit_xp.mirror_lower`)."""
    import cupy
    from nvmath.bindings import cublas, cusolverDn
    n, name = c.shape[0], _POTRI[c.dtype.char]
    handle, lower = get_handle("cusolverDn"), int(cublas.FillMode.LOWER)
    lwork = getattr(cusolverDn, name + "_buffer_size")(handle, lower, n, c.data.ptr, n)
    work = cupy.empty(max(int(lwork), 1), dtype=c.dtype)
    info = cupy.empty(1, dtype=np.int32)
    getattr(cusolverDn, name)(handle, lower, n, c.data.ptr, n, work.data.ptr, int(lwork),
                              info.data.ptr)
    return mirror_lower(c).T


def cg_operator(plan, x, noise, tol, products="auto"):
    """The matrix-free solver's ``K v`` for solves to the relative residual ``tol``: with
    ``products`` "auto", the kernel matrix stored for the solve where the dispatcher's
    headroom holds it (:func:`_stored`); else the fused kernels
    (:class:`._cg_fused_cuda.FusedOperator`, float32 entries where ``tol`` allows) for a
    kernel of their form where the hand-written kernels are on (``custom_kernels``), else the
    library route, the kernel ``plan`` row block by row block
    (:class:`._mixed_xp.Operator`). The gradient's contraction takes the fused or library
    route either way."""
    library = Operator(plan, x, noise)
    op = fused_operator(plan, x, noise, tol, library) if custom_kernels_enabled() else None
    op = library if op is None else op
    stored = _stored(plan, x, noise, tol, op) if products == "auto" else None
    return op if stored is None else stored


#: Share of the dispatcher's headroom (the device memory beyond the run's estimate) that a
#: stored kernel matrix may take.
STORED_SHARE = 0.9


def _stored(plan, x, noise, tol, gradient):
    """A :class:`._cg_stored_xp.StoredOperator` of ``k(x)`` (White noise on its diagonal) in
    the products' arithmetic (:func:`._cg_fused_cuda.product_dtype`), or ``None`` where it
    would take more than :data:`STORED_SHARE` of the headroom (or outside a dispatch). Made
    by ``gl_gp_build`` for a kernel of the fused form where the hand-written kernels are on,
    else by the plan's row blocks; the gradient then by
    :class:`._cg_fused_cuda.StoredGradient` in its memory, else by ``gradient``'s own
    ``lml_gradient``."""
    dtype = product_dtype(tol)
    n = x.shape[0]
    headroom = headroom_bytes()
    if headroom is None or n * n * dtype.itemsize > STORED_SHARE * headroom:
        return None
    form = fused_form(plan, x.shape[1]) if custom_kernels_enabled() else None
    if form is None:
        return StoredOperator(plan.matrix(x, dtype=dtype), noise,
                              lambda left, right, pre, scale, k:
                              gradient.lml_gradient(left, right, pre, scale))
    k, _, _ = _fused_cuda.build(x, 0.0, form, dtype)
    return StoredOperator(k, noise, _cg_fused_cuda.StoredGradient(form, x))


def pivoted_cholesky(plan, x, rank, shift):
    """The preconditioner's pivoted Cholesky factor (:func:`._precond_xp.pivoted_cholesky`'s
    contract): two fused launches a step (:func:`._cg_fused_cuda.pivoted_cholesky`) for a
    kernel of their form on float64 points where the hand-written kernels are on
    (``custom_kernels``), else the library route, a kernel row from the plan and CuPy's
    update a step."""
    form = fused_form(plan, x.shape[1]) if custom_kernels_enabled() and \
        x.dtype == np.float64 else None
    if form is None:
        return _precond_xp.pivoted_cholesky(plan, x, rank, shift)
    return _cg_fused_cuda.pivoted_cholesky(form, x, rank, shift)


def keep(train, x, L, alpha):
    """Hand ``fit``'s factor to the ``train`` holder: with ``train.keep`` (a model large enough
    to stay) it stays on the GPU for ``predict``, and reaches the host only if ``L_`` is read;
    otherwise it is downloaded now (a small model)."""
    if train.keep:
        train.device = (x, L, alpha)
    else:
        train.L = _arrays.to_host(L)


def training(train):
    """The fitted ``(x, L, alpha)`` of predict's ``train`` holder on the GPU: uploaded here (on
    the operation's stream; the dispatcher leaves the holder alone) and kept in
    ``train.device`` for the next call when ``train.keep`` (a model large enough to stay)."""
    if train.device is not None:
        return train.device
    host = train.host
    note(uploaded_training_bytes=sum(0 if v is None else v.nbytes for v in host),
         kept_for_next_calls=bool(train.keep))
    arrays = tuple(None if v is None else _arrays.to_device(v) for v in host)
    if train.keep:
        train.device = arrays
    return arrays


_OPS = Operations(sys.modules[__name__])  # la: this module, read at call time


def _on_op_stream(fn):
    def run(*args, **kwargs):
        with op_stream():
            return fn(*args, **kwargs)
    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


def _log_marginal_likelihood(x, y, noise, k, k_grad, *, plan, eval_gradient):
    """The likelihood (and gradient): the fused evaluation (:mod:`._fused_cuda`, host results)
    for a gradient of a kernel of its form on float64 CuPy inputs, with the headroom for its
    second ``n x n`` buffer, where the hand-written kernels are on; else
    :func:`._fit_xp.lml_body` on this engine."""
    form = None
    if eval_gradient and plan is not None and _arrays.kind_of(x) is _arrays.Kind.CUPY \
            and custom_kernels_enabled() \
            and x.dtype == np.float64 and y.dtype == np.float64:
        form = fused_form(plan, x.shape[1])
        n = x.shape[0]
        headroom = headroom_bytes()
        if headroom is not None and headroom < 8 * (n * n + tri_inverse_scratch(n)):
            form = None
    if form is not None:
        return _fused_cuda.lml_grad(_SELF, x, y, noise, form)
    return _OPS.log_marginal_likelihood(x, y, noise, k, k_grad, plan=plan,
                                        eval_gradient=eval_gradient)


_SELF = sys.modules[__name__]
exact_gp_solve, log_marginal_likelihood, fit, predict = (_on_op_stream(f) for f in (
    _OPS.exact_gp_solve, _log_marginal_likelihood, _OPS.fit, _OPS.predict))
_CG = CGOperations(_SELF)  # solver="cg": the matrix-free operations, on the op's stream
cg_log_marginal_likelihood, cg_fit, cg_predict = (_on_op_stream(f) for f in (
    _CG.log_marginal_likelihood, _CG.fit, _CG.predict))
