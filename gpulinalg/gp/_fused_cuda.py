"""The GPU's fused log-marginal-likelihood + gradient for kernels ``c * s(r) + w I``
(:class:`._kernels_xp.Fused`: ``s`` an RBF or Matern 0.5/1.5/2.5 leaf, isotropic or ARD),
float64 only. :mod:`._engine_cuda` takes it for a gradient on float64 CuPy inputs when the
hand-written kernels are on (``custom_kernels``, a measured device) and the dispatcher left the
headroom for its second ``n x n`` buffer; otherwise the generic body of :mod:`._fit_xp` runs.

The steps of :func:`lml_grad`, all on the operation's stream:

1. :func:`build`: ``K`` by one kernel (``gl_gp_build``, ``gp_build.cu``): each entry
   ``c s(r_ij) + delta_ij (w + noise_i)`` from the scaled points ``z = x / l`` (``r_ij^2``
   summed directly: no GEMM, no cancellation), a device flag raised for a non-finite entry;
2. :func:`factor`: decomp's Cholesky of ``K`` (``overwrite_a``: in ``K``'s memory where its
   layout allows), as a flat column-major buffer; its failure read back (the flag too) means
   ``-inf`` (not positive definite) or ``ValueError`` (NaN or Inf);
3. :func:`inverse`: ``V = L^-1`` in a second ``n x n`` buffer holding ``tril(L)``
   (``tri_inverse`` of decomp's engines: a leaf kernel and doubling merges by strided-batched
   GEMMs);
4. :func:`likelihood`: ``u = V y``, ``alpha = V^T u``, ``log|K| = -2 sum log V_ii``;
5. the lower triangle of ``K^-1 = V^T V`` (``gram_lower``: cuBLAS ``gemm`` panels) written
   over the factor's buffer;
6. :func:`contract`: one kernel (``gl_gp_contract``, ``gp_contract.cu``) over that triangle:
   with ``W = alpha alpha^T - t K^-1``, the sums ``sum W_ij c s_ij``,
   ``sum W_ij c h_ij (z_id - z_jd)^2`` for every ``d`` and ``trace W``, reduced per thread block
   and added atomically;
7. :func:`read_back`: the likelihood, the sums and the flag in one device-to-host copy.

Peak memory (:func:`nbytes`): two ``n x n`` buffers, the merges' scratch and the thin arrays.
"""

import math

import numpy as np

from .._runtime.kernels import elementwise_kernel, kernel_source, raw_kernel
from ..decomp._engines import gram_lower, tri_inverse, tri_inverse_scratch

__all__ = ["lml_grad", "build", "kernel_options", "factor", "inverse", "likelihood", "contract",
           "read_back", "nbytes", "tril_copy", "CONTRACT_SOURCE"]

_FUNCTIONS = kernel_source(__package__, "gp_functions.cu")

_BUILD = _FUNCTIONS + kernel_source(__package__, "gp_build.cu")

#: ``gl_gp_contract`` and ``gl_gp_weight_contract`` (:mod:`._cg_fused_cuda`).
CONTRACT_SOURCE = _FUNCTIONS + kernel_source(__package__, "gp_contract.cu")


def kernel_options(kind, d, dtype=np.float64):
    """The compiler options of ``gp_build.cu``'s and ``gp_contract.cu``'s kernels for the
    kernel code ``kind``, ``d`` input dimensions and the ``dtype`` of the ``n x n`` matrix
    that ``gl_gp_build`` writes or ``gl_gp_weight_contract`` reads."""
    out = ("--std=c++17", f"-DGL_D={int(d)}", f"-DGL_KIND={int(kind)}")
    return out if np.dtype(dtype) == np.float64 else out + ("-DGL_STORED=float",)


def nbytes(n, t, d):
    """Device bytes of one fused evaluation: two ``n x n`` buffers and the merges' scratch,
    and the thin arrays."""
    return 8 * (2 * n * n + tri_inverse_scratch(n) + n * (3 * t + 2 * d + 4))


def lml_grad(la, x, y, noise, form):
    """``(log marginal likelihood, gradient)`` as host float64 of the kernel ``form`` (a
    :class:`._kernels_xp.Fused`) on the CuPy ``x`` (n x d) and ``y`` (n or n x t), float64,
    with ``noise`` (a float, or an array of one entry per point) on the diagonal: ``-inf``
    and zeros where the kernel matrix is not positive definite (scikit-learn's convention);
    ``ValueError`` when it holds NaN or Inf. ``la``: gp's GPU engine (``cholesky``)."""
    k, z, flag = build(x, noise, form)
    lf = factor(la, k, flag)
    if lf is None:  # not positive definite: the optimizer steps back
        return -math.inf, np.zeros(len(form.gradient(np.zeros(x.shape[1] + 2))))
    del k
    v = inverse(lf)
    lml, a = likelihood(v, y)
    gram_lower(v, x.shape[0], lf)
    del v
    return read_back(lml, contract(lf, a, z, form), flag, form)


def build(x, noise, form, dtype=np.float64):
    """``(K, z, flag)``: the kernel matrix (C-ordered, symmetric) by one kernel, made in
    float64 and stored in ``dtype``, with the form's white noise plus ``noise`` on its
    diagonal, the scaled points ``z = x / l`` and the device flag raised by a non-finite
    entry."""
    import cupy
    n, d = x.shape
    dtype = np.dtype(dtype)
    z = cupy.ascontiguousarray(x * cupy.asarray(form.inv_ls))
    if np.ndim(noise):
        noise_d, step = cupy.asarray(noise, dtype=np.float64), 1
    else:
        noise_d, step = cupy.full(1, float(noise), dtype=np.float64), 0
    flag = cupy.zeros(1, dtype=np.int32)
    k = cupy.empty((n, n), dtype=dtype)
    blocks = -(-n // 32)
    raw_kernel("gl_gp_build", _BUILD, {}, options=kernel_options(form.kind, d, dtype))(
        (blocks, blocks), (32, 8),
        (z, noise_d, k, flag, np.int64(n), np.float64(form.c), np.float64(form.white),
         np.int64(step)))
    return k, z, flag


def factor(la, k, flag):
    """The lower Cholesky factor of ``k`` in place (decomp's, one synchronization) as the flat
    column-major buffer, or ``None`` when ``k`` is not positive definite (``ValueError``
    when it holds NaN or Inf)."""
    import cupy

    from .._runtime.errors import LinAlgError
    from ._solve_xp import symmetric_view
    try:
        L = la.cholesky(symmetric_view(k), True, True, False, k.dtype)
    except LinAlgError:
        if int(flag.get()[0]):
            raise ValueError(_NONFINITE) from None
        return None
    return L.T.reshape(-1) if L.flags.f_contiguous else cupy.asfortranarray(L).T.reshape(-1)


def inverse(lf):
    """``V = L^-1`` (flat column-major) from the flat column-major factor ``lf``, in a new
    buffer: ``tril(L)`` copied, then
    :func:`~gpulinalg.decomp._kernels._cholinv_cuda.tri_inverse`."""
    import cupy
    n = math.isqrt(lf.size)
    v = cupy.empty(n * n, dtype=np.float64)
    tril_copy(lf, n, v)
    return tri_inverse(v, n, cupy.empty(tri_inverse_scratch(n), dtype=np.float64))


def likelihood(v, y):
    """``(lml, alpha)`` from ``V = L^-1``: ``u = V y``, ``alpha = V^T u`` (C-ordered ``n x t``),
    ``lml = -|u|^2 / 2 - t log|K| / 2 - t n log(2 pi) / 2`` (a 0-d device array) with
    ``log|K| = -2 sum log V_ii``."""
    import cupy
    n = y.shape[0]
    y2 = y.reshape(n, -1)
    t = y2.shape[1]
    vm = v.reshape(n, n).T  # V, column-major
    u = vm @ y2
    a = cupy.ascontiguousarray(vm.T @ u)
    logdet = -2.0 * cupy.log(v[::n + 1]).sum()
    lml = -0.5 * (u * u).sum() - 0.5 * t * logdet - 0.5 * t * n * math.log(2.0 * math.pi)
    return lml, a


def contract(lf, a, z, form):
    """The sums of :meth:`._kernels_xp.Fused.gradient` (a device array of ``d + 2``) over the
    lower triangle of ``K^-1`` in the flat column-major ``lf``, by one kernel."""
    import cupy
    n, d = z.shape
    acc = cupy.zeros(d + 2, dtype=np.float64)
    raw_kernel("gl_gp_contract", CONTRACT_SOURCE, {}, options=kernel_options(form.kind, d))(
        (-(-n // 32), -(-n // 64)), (32, 8),
        (lf, a, z, acc, np.int64(n), np.int32(a.shape[1]), np.float64(form.c)))
    return acc


def read_back(lml, acc, flag, form):
    """The one device-to-host copy: ``(lml, gradient)`` on the host (``-inf`` and zeros for a
    NaN factor that ``potrf`` passed; ``ValueError`` for a non-finite kernel matrix)."""
    import cupy
    packed = cupy.concatenate([lml.reshape(1), acc, flag.astype(np.float64)]).get()
    if packed[-1]:
        raise ValueError(_NONFINITE)
    if not math.isfinite(packed[0]):
        return -math.inf, np.zeros(len(form.gradient(packed[1:-1])))
    return float(packed[0]), form.gradient(packed[1:-1])


_NONFINITE = ("the kernel matrix contains NaN or Inf; check the kernel's hyperparameters and "
              "the training inputs")


def tril_copy(l, n, v):
    """``v[c n + r] = l[c n + r]`` for ``r >= c``, else 0: the lower triangle of the flat
    column-major ``n x n`` buffer ``l`` into ``v``, zeros above it (one kernel)."""
    elementwise_kernel("raw T l, int64 n", "T v",
                       "const long long r = i % n, c = i / n; v = r >= c ? l[i] : T(0)",
                       "gl_tril_colmajor")(l, np.int64(n), v)
