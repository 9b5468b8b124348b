"""GPU engine of the full SVD: cuSOLVER ``Xgesvd``, ``Xgesvdp``, ``gesvdj`` or
``gesvdjBatched``, with a QR step (``Xgeqrf`` + ``ormqr``) first for tall or wide matrices;
for stacks of matrices up to 32 x 32 (``driver="auto"``), the fused Jacobi kernel of
:mod:`._fused_svd_cuda` (one launch, one read-back).

CuPy arrays in, on the dispatcher's stream; no validation, no dispatch.
"""

import numpy as np

from ..._runtime.kernels import kernel_source

from ..._runtime import dispatch as _dispatch
from ..._runtime.validation import check_finite
from .._kernels import _fused_svd_cuda, _policy_cuda
from .._gpu._batched_cuda import fan, spread
from .._gpu._batched_plan import lanes, route
from .._checks import real_dtype
from .._gpu._cusolver_cuda import JACOBI_BATCHED_MAX, Solver, fortran_batch, raise_not_converged
from .._gpu._finite_cuda import flag_nonfinite, raise_nonfinite
from .._results import SVDResult
from ._svd_drivers import SVDPlan, promotes_first, resolve_driver
from ._svd_xp import flip_signs

__all__ = ["svd", "VERIFY_FACTOR"]

#: Above ``JACOBI_MAX_DIM`` (:mod:`._svd_drivers`), ``auto`` runs the polar-decomposition
#: kernel ``gesvdp`` (the fastest: 6x ``gesvd`` at 2000^2 fp64 on the H200) and verifies its
#: result a posteriori: ``||A - U S V^H||_F <= VERIFY_FACTOR k eps ||A||_F`` and
#: ``||I - U^H U||_F``, ``||I - V^H V||_F <= VERIFY_FACTOR k eps`` (three k^3 products on the
#: square factor); 50 k eps is the accuracy the SVD promises (issue #16's target; torch's
#: gesvdj result at 4096^2 fp32 is at 1e-3, inside it). When the check fails (gesvdp is not
#: backward stable with singular values near zero), a single-precision factor is first
#: recomputed by ``gesvdp`` in double precision and checked again (fp64 runs at the fp32 rate
#: on the H200), and only then with ``gesvd`` (QR iteration, backward stable). From a
#: factor of order ``PROMOTE_FROM`` on (:func:`._svd_drivers.promotes_first`), where the
#: single-precision try failed on the H200 (or failed in some runs), the double-precision
#: one comes first.
#: Values-only calls, and full U without the QR step, use ``gesvd`` directly.
VERIFY_FACTOR = 50.0

_PROMOTE = {np.dtype(np.float32): np.dtype(np.float64),
            np.dtype(np.complex64): np.dtype(np.complex128)}


def svd(a, full_matrices, compute_uv, driver, dtype, lapack_driver="gesdd", overwrite_a=False,
        finite=False):
    """SVD of the CuPy stack ``a`` (..., m, n) with the kernel :func:`resolve_driver` picks:
    ``SVDResult(U, S, Vh)`` with deterministic signs, or ``S`` alone. ``lapack_driver`` and
    ``overwrite_a`` are not read (the api maps ``lapack_driver="gesvd"`` to ``driver``; the
    kernels run on a column-major copy). ``finite``: SciPy's ``check_finite`` of ``a``, read
    back with the ``info`` codes for a stack of small matrices (one synchronization in all),
    up front otherwise (no kernel meets NaN or Inf)."""
    import cupy
    m, n = a.shape[-2:]
    wide = m < n
    big, k = max(m, n), min(m, n)
    nb = int(np.prod(a.shape[:-2], dtype=np.int64))
    plan = resolve_driver(m, n, driver, compute_uv, full_matrices)
    fused = driver == "auto" and _policy_cuda.enabled() and _fused_svd_cuda.fits(big, dtype)
    way = route("gesvd", big, nb, fused=fused, dtype=dtype)
    if way == "fused":
        _dispatch.note(driver="fused", qr_first=False)
        return _fused_svd_cuda.svd(a, full_matrices, compute_uv, dtype, finite)
    if way == "jacobi" and driver == "auto" and plan.driver != "gesvdj":
        # a stack of medium matrices: Jacobi is accurate by itself, where gesvdp's
        # a-posteriori check would cost one synchronization per matrix
        plan = SVDPlan("gesvdj", plan.qr_first)
    _dispatch.note(driver=plan.driver, qr_first=plan.qr_first)
    batched = way == "batched" and plan.driver == "gesvdj" and big <= JACOBI_BATCHED_MAX
    if finite and not batched:
        check_finite(a, "a")
    w = fortran_batch(a.swapaxes(-1, -2).conj() if wide else a, dtype)  # big x k
    if batched:
        s, u, v = _batched_jacobi(w, compute_uv, full_matrices, a if finite else None)
    else:
        s, u, v = _looped(w, compute_uv, full_matrices, plan)
    batch = tuple(a.shape[:-2])
    s = s.reshape(batch + (k,))
    if not compute_uv:
        return s
    vh = v if plan.driver == "gesvd" else v.conj().swapaxes(-1, -2)
    u, vh = u.reshape(batch + u.shape[1:]), vh.reshape(batch + (k, k))
    if wide:
        u, vh = vh.conj().swapaxes(-1, -2), u.conj().swapaxes(-1, -2)
    if u.dtype in _SIGN_TYPES and k > 0:
        u, vh = _flip_signs_fused(u, vh, k)
    else:
        u, s, vh = flip_signs(u, s, vh, cupy)
    return SVDResult(u, s, vh)


_SIGNS_SOURCE = kernel_source(__package__, "svd_signs.cu")

_SIGN_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
               np.dtype(np.complex64): "complex<float>",
               np.dtype(np.complex128): "complex<double>"}


def _flip_signs_fused(u, vh, k):
    """:func:`._svd_xp.flip_signs` on the engine's own ``u`` and ``vh`` (..., ., .), in place:
    one kernel (the generic version is a dozen launches and two copies: most of a small
    stack's time). Returns the arrays written (a batch that does not merge is copied)."""
    from ..._runtime.kernels import raw_kernel
    u3 = u.reshape((-1,) + u.shape[-2:])
    v3 = vh.reshape((-1,) + vh.shape[-2:])
    rows = len(v3) * k
    if rows:
        item = u3.itemsize
        kern = raw_kernel("gl_svd_signs", _SIGNS_SOURCE, {"T": _SIGN_TYPES[u3.dtype]},
                          options=("--std=c++17",))
        st = [np.int64(x // item) for x in u3.strides + v3.strides]
        kern(((rows + 7) // 8,), (256,), (u3, v3, np.int64(rows), np.int64(k),
                                          np.int64(u3.shape[1]), np.int64(v3.shape[2]), *st))
    return u3.reshape(u.shape), v3.reshape(vh.shape)


def _looped(w, compute_uv, full_matrices, plan):
    """One kernel call per matrix (QR first where the plan says so). A verified plan
    computes the vectors its check reads for values alone too (``u`` and ``v`` returned, not
    read): of the square factor only, when QR goes first."""
    import cupy
    nb, big, k = w.shape
    s = cupy.empty((nb, k), dtype=real_dtype(w.dtype))
    u = v = None
    if compute_uv or (plan.verify and not plan.qr_first):
        u_cols = big if full_matrices and compute_uv else k
        u = cupy.empty((nb, u_cols, big), dtype=w.dtype).transpose(0, 2, 1)
    if compute_uv or plan.verify:
        v = cupy.empty((nb, k, k), dtype=w.dtype).transpose(0, 2, 1)
    # Jacobi without a check synchronizes nowhere: its loop runs on several streams
    count = lanes("gesvdj", big, nb) if plan.driver == "gesvdj" and not plan.verify else 1
    with Solver(w.dtype, 3 * nb) as sv:
        with fan(count) as fanned:
            ways = spread(sv, fanned, nb)
            for i in range(nb):
                lane, stream = ways[i % len(ways)]
                with stream:
                    _one(lane, 3 * i, w[i], s[i], None if u is None else u[i],
                         None if v is None else v[i], full_matrices, plan)
        codes = sv.check(f"svd ({plan.driver})").reshape(nb, 3)
    raise_not_converged(codes[:, 1], f"svd ({plan.driver})")
    return s, u, v


def _batched_jacobi(w, compute_uv, full_matrices, check=None):
    """A stack of small matrices in one ``gesvdjBatched`` call (full U, then sliced);
    ``check``: the input, whose finiteness is flagged into the info codes' last slot."""
    import cupy
    nb, big, k = w.shape
    _dispatch.note(batched=True)
    s = cupy.empty((nb, k), dtype=real_dtype(w.dtype))
    u = cupy.empty((nb, big, big), dtype=w.dtype).transpose(0, 2, 1) if compute_uv else None
    v = cupy.empty((nb, k, k), dtype=w.dtype).transpose(0, 2, 1) if compute_uv else None
    info = cupy.zeros(nb + 1, dtype=np.int32)
    if check is not None:
        flag_nonfinite(check, info[nb:])
    with Solver(w.dtype, nb, info=info, params=False) as sv:
        sv.gesvdj_batched(w, s, u, v)
        codes = sv.check("svd (gesvdjBatched)")  # the only synchronization of the call
    if codes[nb]:
        raise_nonfinite("a")
    raise_not_converged(codes[:nb], "svd (gesvdjBatched)")
    if u is not None and not full_matrices:
        u = u[:, :, :k]
    return s, u, v


def _one(sv, slot, w, s, u, v, full, plan):
    """SVD of the column-major ``w`` (big x k, destroyed) into ``s``, ``u`` and ``v`` (V, or
    Vh for gesvd). Info slots: ``slot`` QR, ``slot + 1`` the kernel, ``slot + 2`` ormqr."""
    import cupy
    big, k = w.shape
    if not plan.qr_first:
        return _kernel(sv, slot + 1, w, s, u, v, full, plan)
    tau = cupy.empty(k, dtype=w.dtype)
    sv.geqrf(w, tau, slot)
    r = cupy.asfortranarray(cupy.triu(w[:k, :]))
    if v is None:  # values alone, unchecked
        return _kernel(sv, slot + 1, r, s, None, None, False, plan)
    ur = cupy.empty((k, k), dtype=w.dtype, order="F")
    _kernel(sv, slot + 1, r, s, ur, v, False, plan)
    if u is None:  # values alone: R's vectors served the check
        return
    u.fill(0)
    u[:k, :k] = ur
    if full and big > k:
        idx = cupy.arange(k, big)
        u[idx, idx] = 1
    sv.ormqr(w, k, tau, u, slot + 2)


def _kernel(sv, slot, w, s, u, v, full, plan):
    """Run the plan's kernel on ``w``; with ``plan.verify``, check and fall back to gesvd."""
    driver = plan.driver
    if driver == "gesvdp" and plan.verify and u is not None \
            and promotes_first(w.dtype, w.shape[1]):
        # single precision would fail the check at this size: double precision at once
        if _promoted(w, s, u, v, full):
            _dispatch.note(driver="gesvdp", promoted=str(_PROMOTE[w.dtype]))
            return
        return _recompute(sv, slot, w, None, s, u, v, full, driver)
    original = w.copy(order="F") if plan.verify and u is not None else None
    if driver == "gesvd":
        sv.gesvd(w, s, u, v, full, slot)
    elif driver == "gesvdp":
        err = sv.gesvdp(w, s, u, v, full, slot)
        _dispatch.note(h_err_sigma=float(err))
    else:
        sv.gesvdj(w, s, u, v, full, slot)
    if original is None or _verified(original, s, u, v):
        return
    if driver == "gesvdp" and w.dtype in _PROMOTE and _promoted(original, s, u, v, full):
        _dispatch.note(driver="gesvdp", rejected="gesvdp", promoted=str(_PROMOTE[w.dtype]))
        return
    _recompute(sv, slot, w, original, s, u, v, full, driver)


def _recompute(sv, slot, w, original, s, u, v, full, rejected):
    """``gesvd`` of ``original`` (``None``: ``w`` holds the matrix still) into ``s``, ``u``
    and ``v`` after the ``rejected`` driver's result failed its check."""
    import cupy
    _dispatch.note(driver="gesvd", rejected=rejected)
    if original is not None:
        w[...] = original
    vh = cupy.empty(v.shape, dtype=v.dtype, order="F")
    sv.gesvd(w, s, u, vh, full, slot)
    v[...] = vh.conj().T  # the caller reads V (not V^H) from the verified drivers


def _promoted(a, s, u, v, full):
    """``gesvdp`` of the single-precision ``a`` in double precision, rounded into ``s``, ``u``
    and ``v``; whether that result passes :func:`_verified` at ``a``'s own precision (the
    arrays are left written either way: the caller recomputes them on failure)."""
    import cupy
    wide = _PROMOTE[a.dtype]
    w2 = a.astype(wide, order="F")
    s2 = cupy.empty(s.shape, dtype=real_dtype(wide))
    u2 = cupy.empty(u.shape, dtype=wide, order="F")
    v2 = cupy.empty(v.shape, dtype=wide, order="F")
    with Solver(wide, 1) as sv2:
        sv2.gesvdp(w2, s2, u2, v2, full, 0)
        codes = sv2.check("svd (gesvdp, promoted)")
    if codes[0] > 0:
        return False
    s[...], u[...], v[...] = s2, u2, v2
    return _verified(a, s, u, v)


def _verified(a, s, u, v):
    """Whether ``a ~ U diag(s) V^H`` to ``VERIFY_FACTOR k eps`` with orthonormal U and V
    (Frobenius norms; one synchronization)."""
    import cupy
    k = s.shape[0]
    uk = u[:, :k]
    eye = cupy.eye(k, dtype=a.dtype)
    figures = cupy.stack([
        cupy.linalg.norm(a - (uk * s) @ v.conj().T)
        / cupy.maximum(cupy.linalg.norm(a), np.finfo(a.dtype).tiny),
        cupy.linalg.norm(uk.conj().T @ uk - eye),
        cupy.linalg.norm(v.conj().T @ v - eye)]).get()
    bound = VERIFY_FACTOR * max(a.shape) * float(np.finfo(a.dtype).eps)
    ok = bool(np.all(figures <= bound))  # NaN fails
    _dispatch.note(verify_figures=[float(f) for f in figures], verify_bound=bound)
    return ok
