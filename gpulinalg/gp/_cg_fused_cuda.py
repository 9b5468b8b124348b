"""The matrix-free solver's fused GPU kernels (``gp_product.cu``) for kernels
``c * s(r) + w I`` (:class:`._kernels_xp.Fused`: ``s`` an RBF or Matern 0.5/1.5/2.5 leaf,
isotropic or ARD): :class:`FusedOperator` is the ``K v`` of the conjugate gradients and the
gradient's contraction, with every kernel entry made in registers and used at once (the
``n x n`` matrix is never stored, not even a row block of it).

* ``gl_gp_product``: ``K v`` for up to :data:`MAX_COLUMNS` right-hand sides per launch (more are
  taken in launches of that many);
* ``gl_gp_factor_contract``: ``sum_ij W_ij dK_ij/dlog theta`` for ``W = A B^T`` of ``n x m``
  factors, the gradient's weight matrix of :mod:`._cg_fit_xp` (its diagonal part is added
  here);
* ``gl_gp_weight_contract`` (``gp_contract.cu``): the same sums from ``W`` made whole by a GEMM
  in a stored kernel matrix's memory (:class:`StoredGradient`);
* ``gl_gp_pivot_select`` and ``gl_gp_pivot_row`` (``gp_pivot.cu``): one step of the
  preconditioner's pivoted Cholesky factorization (:func:`pivoted_cholesky`) in two launches,
  the pivot kept on the device, in float64.

The entries' arithmetic (:func:`product_dtype`) is float32 when the solves' tolerance allows it
and float64 below :data:`FLOAT32_TOL`; within a tile of columns the sums are in that
arithmetic, across tiles in float64. The library route, the same products by kernel-matrix row
blocks (:class:`._mixed_xp.Operator` on :class:`._kernels_xp.KernelPlan`), runs where the
hand-written kernels are off (``custom_kernels``) or the kernel has another form.
"""

import numpy as np

from .._runtime.kernels import kernel_source, raw_kernel
from ._fused_cuda import CONTRACT_SOURCE, kernel_options
from ._kernels_xp import fused_form

__all__ = ["FusedOperator", "StoredGradient", "product_dtype", "fused_operator", "options",
           "SOURCE", "FLOAT32_TOL", "MAX_COLUMNS", "FACTOR_COLUMNS", "pivoted_cholesky",
           "pivot_options", "PIVOT_SOURCE", "PIVOT_THREADS"]

#: Solves stopping at a relative residual of at least this take float32 entries: their
#: rounding (about 1e-7 of each entry, random across the sums) stays far below it.
FLOAT32_TOL = 1e-4
#: Right-hand sides of one product launch (the register tile's width); float64 products of
#: more columns take the library route (on an H200 the fused float64 product of 129 columns
#: took 1.75x the library's time, of 33 columns 0.31x).
MAX_COLUMNS = 64
#: Widest factors of ``W`` the fused contraction takes, by the entries' arithmetic; wider ones
#: take the library route (H200, n = 50 000, against the library: float32 0.24x its time at
#: 133 columns and 0.74x at 433, float64 0.57x and 2.3x; the limits keep the fused route
#: where it is about 1.5x faster or more, by the times' linear growth in the width).
FACTOR_COLUMNS = {np.dtype(np.float32): 320, np.dtype(np.float64): 144}
#: Columns of ``b`` per shared-memory chunk of the contraction.
_MQ = 32
#: Rows per block and columns per step, by the entries' arithmetic (static shared memory under
#: 48 KiB for every dimension up to :data:`._kernels_xp.FUSED_MAX_D`).
_TILES = {np.dtype(np.float32): (128, 32), np.dtype(np.float64): (64, 16)}
#: Dynamic shared memory the contraction may take (a block's rows of ``A``); larger factors
#: go in chunks of columns.
_SHARED = 160 * 1024

SOURCE = kernel_source(__package__, "gp_functions.cu") + \
    kernel_source(__package__, "gp_product.cu")
PIVOT_SOURCE = kernel_source(__package__, "gp_functions.cu") + \
    kernel_source(__package__, "gp_pivot.cu")
#: Threads per block of ``gp_pivot.cu`` (its ``GL_PIVOT_THREADS``).
PIVOT_THREADS = 256


def product_dtype(tol):
    """The arithmetic of the kernel entries for solves to the relative residual ``tol``.

    >>> product_dtype(1e-2), product_dtype(1e-6)
    (dtype('float32'), dtype('float64'))
    """
    return np.dtype(np.float32 if tol >= FLOAT32_TOL else np.float64)


def options(kind, d, dtype, tp=8):
    """The compiler options of ``gp_product.cu``'s kernels for the kernel code ``kind``, ``d``
    input dimensions, the entries' ``dtype`` and ``tp`` right-hand sides per launch (a
    multiple of 8 up to :data:`MAX_COLUMNS`)."""
    bi, bj = _TILES[np.dtype(dtype)]
    real = "float" if np.dtype(dtype) == np.float32 else "double"
    return ("--std=c++17", f"-DGL_D={int(d)}", f"-DGL_KIND={int(kind)}", f"-DGL_REAL={real}",
            f"-DGL_BI={bi}", f"-DGL_BJ={bj}", f"-DGL_TP={int(tp)}", f"-DGL_MQ={_MQ}")


def _kernel(name, form, d, dtype, tp=8, shared=None):
    """``(kernel, rows per block)``."""
    return (raw_kernel(name, SOURCE, {}, options=options(form.kind, d, dtype, tp),
                       shared_bytes=shared), _TILES[dtype][0])


class FusedOperator:
    """``v -> K v`` with ``K = c s(X) + diag(w + noise)`` by ``gl_gp_product``, and the
    gradient of the matrix-free likelihood by ``gl_gp_factor_contract``.

    Parameters
    ----------
    form : Fused
        The kernel (:func:`._kernels_xp.fused_form`).
    x : (n, d) cupy.ndarray
        Training inputs (float64).
    noise : float or (n,) cupy.ndarray
        The diagonal added to the kernel (``alpha`` plus any jitter).
    dtype : numpy.dtype
        The entries' arithmetic (:func:`product_dtype`).
    library : callable, optional
        The library route's operator (:class:`._mixed_xp.Operator`) for the blocks the fused
        kernels do not take (:data:`MAX_COLUMNS`, :data:`FACTOR_COLUMNS`).
    """

    def __init__(self, form, x, noise, dtype, library=None):
        import cupy
        self.form, self.dtype, self.library = form, np.dtype(dtype), library
        #: What ``last_run().details["cg_products"]`` says.
        self.route = f"fused {self.dtype.name}"
        shift = x.mean(axis=0)
        self.z = cupy.ascontiguousarray(((x - shift) * cupy.asarray(form.inv_ls))
                                        .astype(self.dtype))
        self.n, self.d = x.shape
        self.diag = (noise + form.white) if not getattr(noise, "ndim", 0) else \
            cupy.asarray(noise, dtype=np.float64) + form.white
        self.c = self.dtype.type(form.c)

    def __call__(self, v):
        import cupy
        vec = v.ndim == 1
        t = 1 if vec else v.shape[1]
        if self.library is not None and self.dtype == np.float64 and t > MAX_COLUMNS:
            return self.library(v)
        v2 = cupy.ascontiguousarray(v.reshape(self.n, -1), dtype=np.float64)
        out = cupy.empty((self.n, t), dtype=np.float64)
        for q0 in range(0, t, MAX_COLUMNS):
            q1 = min(q0 + MAX_COLUMNS, t)
            vk = v2 if q1 - q0 == t else cupy.ascontiguousarray(v2[:, q0:q1])
            ok = out if q1 - q0 == t else cupy.empty((self.n, q1 - q0), dtype=np.float64)
            kern, bi = _kernel("gl_gp_product", self.form, self.d, self.dtype,
                               8 * -(-(q1 - q0) // 8))
            kern((-(-self.n // bi),), (256,),
                 (self.z, vk, ok, np.int64(self.n), np.int32(q1 - q0), np.int64(q1 - q0),
                  np.int64(q1 - q0), self.c))
            if ok is not out:
                out[:, q0:q1] = ok
        d = self.diag
        out += (d[:, None] if getattr(d, "ndim", 0) else d) * v2
        return out.reshape(v.shape) if vec else out

    def contract(self, a, b):
        """``acc`` of :meth:`._kernels_xp.Fused.gradient` less its trace entry: ``sum_ij W_ij
        c s_ij`` and ``sum_ij W_ij c h_ij (z_id - z_jd)^2`` for ``W = a b^T`` (``n x m``
        float64 factors), a device array of ``d + 1``."""
        import cupy
        acc = cupy.zeros(self.d + 1, dtype=np.float64)
        m = a.shape[1]
        bi, _ = _TILES[self.dtype]
        step = max(1, _SHARED // ((bi + 1) * self.dtype.itemsize))
        for q0 in range(0, m, step):  # W = sum over column chunks of a_k b_k^T
            q1 = min(q0 + step, m)
            ak = cupy.ascontiguousarray(a[:, q0:q1], dtype=np.float64)
            bk = cupy.ascontiguousarray(b[:, q0:q1], dtype=np.float64)
            kern, bi = _kernel("gl_gp_factor_contract", self.form, self.d, self.dtype,
                               shared=_SHARED)
            kern((-(-self.n // bi),), (256,),
                 (self.z, ak, bk, acc, np.int64(self.n), np.int32(q1 - q0), self.c),
                 shared_mem=(q1 - q0) * (bi + 1) * self.dtype.itemsize)
        return acc

    def lml_gradient(self, left, right, pre, scale):
        """``1/2 sum_ij W_ij dK_ij/dlog theta`` (host, ``theta``'s order) for
        ``W = left right^T - scale P^-1`` with the preconditioner ``pre``
        (``P^-1 = D^-1 - G G^T``: ``W = [left, scale G] [right, G]^T - scale D^-1``)."""
        m = left.shape[1] + (pre.G.shape[1] if pre.G is not None else 0)
        if self.library is not None and m > FACTOR_COLUMNS[self.dtype]:
            return self.library.lml_gradient(left, right, pre, scale)
        a, b = _factors(left, right, pre, scale)
        return _gradient(self.form, self.contract(a, b), a, b, pre, scale)


def _factors(left, right, pre, scale):
    """``(a, b)`` with ``W = a b^T - scale D^-1`` for ``W = left right^T - scale P^-1``
    (``P^-1 = D^-1 - G G^T``)."""
    import cupy
    if pre.G is None:
        return left, right
    return (cupy.concatenate([left, scale * pre.G], axis=1),
            cupy.concatenate([right, pre.G], axis=1))


def _gradient(form, acc, a, b, pre, scale):
    """``theta``'s gradient (host) from the contraction's sums ``acc`` over ``a b^T`` (a
    device array of ``d + 1``) and ``W``'s diagonal part ``-scale D^-1``: ``dK_ii/dlog c = c``,
    ``dK_ii/dlog l = 0``, and the trace for ``w``."""
    import cupy
    inv_d = (1.0 / pre.D).sum()
    acc[0] -= scale * float(form.c) * inv_d
    trace = (a * b).sum() - scale * inv_d
    return form.gradient(cupy.concatenate([acc, trace.reshape(1)]).get())


class StoredGradient:
    """The gradient of the matrix-free likelihood where the solve stored the kernel matrix
    (:class:`._cg_stored_xp.StoredOperator`, whose products are done by then): ``A B^T``
    (:func:`_factors`) made in that matrix's memory by one GEMM in its dtype (cuBLAS), then
    contracted against the kernel's derivatives by ``gl_gp_weight_contract``
    (``gp_contract.cu``; the entries and sums in float64) for the kernel ``form``."""

    def __init__(self, form, x):
        import cupy
        self.form = form
        shift = x.mean(axis=0)
        self.z = cupy.ascontiguousarray((x - shift) * cupy.asarray(form.inv_ls),
                                        dtype=np.float64)

    def __call__(self, left, right, pre, scale, k):
        import cupy
        a, b = _factors(left, right, pre, scale)
        cupy.matmul(a.astype(k.dtype), b.astype(k.dtype).T, out=k)
        n, d = self.z.shape
        acc = cupy.zeros(d + 2, dtype=np.float64)  # the kernel's last sum stays unused
        blocks = -(-n // 32)
        raw_kernel("gl_gp_weight_contract", CONTRACT_SOURCE, {},
                   options=kernel_options(self.form.kind, d, k.dtype))(
            (blocks, blocks), (32, 8), (k, self.z, acc, np.int64(n), np.float64(self.form.c)))
        return _gradient(self.form, acc[:d + 1], a, b, pre, scale)


def pivot_options(kind, d):
    """The compiler options of ``gp_pivot.cu``'s kernels for the kernel code ``kind`` and
    ``d`` input dimensions."""
    return ("--std=c++17", f"-DGL_D={int(d)}", f"-DGL_KIND={int(kind)}")


def pivoted_cholesky(form, x, rank, shift):
    """:func:`._precond_xp.pivoted_cholesky` for the kernel ``form`` on the CuPy ``x``: the same
    steps, factor and diagonal, each step two launches of ``gp_pivot.cu`` (the pivot chosen
    and its row made on the device, nothing read back but every
    :data:`._precond_xp.CHECK_EVERY` steps) where the library route takes a dozen."""
    import cupy

    from ._precond_xp import CHECK_EVERY, RANK_TOL
    n, d = x.shape
    z = cupy.ascontiguousarray((x - shift) * cupy.asarray(form.inv_ls), dtype=np.float64)
    rank = min(int(rank), n)
    rows = cupy.zeros((rank, n), dtype=np.float64)
    live = cupy.zeros(rank, dtype=bool)
    diag = cupy.full(n, float(form.c), dtype=np.float64)  # c s(0), s(0) = 1 for every form
    blocks = -(-n // PIVOT_THREADS)
    part_v = cupy.empty(blocks, dtype=np.float64)
    part_i = cupy.empty(blocks, dtype=np.int64)
    state = cupy.zeros(4, dtype=np.float64)
    select = raw_kernel("gl_gp_pivot_select", PIVOT_SOURCE, {}, pivot_options(form.kind, d))
    row = raw_kernel("gl_gp_pivot_row", PIVOT_SOURCE, {}, pivot_options(form.kind, d))
    for m in range(rank):
        first = (diag, part_i, np.int32(0), np.int64(n)) if m == 0 else \
            (part_v, part_i, np.int32(1), np.int64(blocks))
        select((1,), (PIVOT_THREADS,), first + (state, live, np.int32(m), np.float64(RANK_TOL)))
        row((blocks,), (PIVOT_THREADS,), (z, rows, diag, state, part_v, part_i, np.int64(n),
                                          np.int32(m), np.float64(form.c)))
        if m % CHECK_EVERY == CHECK_EVERY - 1 and not bool(live[m]):
            break
    m = int(live.sum())
    cupy.maximum(diag, 0.0, out=diag)
    return rows[:m].T, diag


def fused_operator(plan, x, noise, tol, library):
    """A :class:`FusedOperator` for ``plan``'s kernel on the CuPy ``x`` (``library``: the
    library route's operator for the blocks it leaves), or ``None`` where the kernel has
    another form (the caller takes the library route)."""
    form = fused_form(plan, x.shape[1])
    if form is None:
        return None
    return FusedOperator(form, x, noise, product_dtype(tol), library)
