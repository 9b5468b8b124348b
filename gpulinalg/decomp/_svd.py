"""Full singular value decomposition: cuSOLVER ``Xgesvd``, ``Xgesvdp`` or ``gesvdj``, with a
QR step first for tall or wide matrices."""

import dataclasses

import numpy as np

from .._runtime import dispatch as _dispatch
from .._runtime.budget import nbytes_of
from . import _cpu
from ._common import empty_result, flops_scale, prepare, real_dtype
from ._cusolver import (JACOBI_BATCHED_MAX, Solver, fortran_batch, raise_not_converged,
                        workspace_bytes)
from ._results import SVDResult

__all__ = ["svd", "resolve_driver", "DRIVERS", "QR_FIRST_RATIO", "JACOBI_MAX_DIM"]

DRIVERS = ("auto", "gesvd", "gesvdj", "gesvdp")

#: A matrix goes through QR first when ``max(m, n) >= QR_FIRST_RATIO * min(m, n)``: the
#: SVD kernel then works on the small square R and ``ormqr`` maps its U back.
QR_FIRST_RATIO = 1.5
#: ``driver="auto"`` uses Jacobi (``gesvdj``) when ``min(m, n) <= JACOBI_MAX_DIM``.
JACOBI_MAX_DIM = 32
#: Above that, ``auto`` runs the polar-decomposition kernel ``gesvdp`` (the fastest) and
#: verifies its result a posteriori: ``||A - U S V^H||_F <= VERIFY_FACTOR k eps ||A||_F`` and
#: ``||I - U^H U||_F``, ``||I - V^H V||_F <= VERIFY_FACTOR k eps`` (three k^3 products on the
#: square factor). When the check fails (gesvdp is not backward stable with singular values
#: near zero), the factor is recomputed with ``gesvd`` (QR iteration, backward stable).
#: Values-only calls, and full U without the QR step, use ``gesvd`` directly.
VERIFY_FACTOR = 5.0


@dataclasses.dataclass(frozen=True)
class SVDPlan:
    """What :func:`resolve_driver` chose (stored in :func:`gpulinalg.last_run` details)."""

    driver: str
    qr_first: bool
    verify: bool = False  # check the kernel's result; recompute with gesvd when it fails


def resolve_driver(m, n, driver="auto", compute_uv=True, full_matrices=False):
    """Resolve ``driver`` for an ``m x n`` matrix into an :class:`SVDPlan`.

    Examples
    --------
    >>> resolve_driver(20000, 2000)
    SVDPlan(driver='gesvdp', qr_first=True, verify=True)
    >>> resolve_driver(20000, 2000, compute_uv=False)
    SVDPlan(driver='gesvd', qr_first=True, verify=False)
    >>> resolve_driver(16, 16)
    SVDPlan(driver='gesvdj', qr_first=False, verify=False)
    >>> resolve_driver(300, 500, "gesvd")
    SVDPlan(driver='gesvd', qr_first=True, verify=False)
    """
    if driver not in DRIVERS:
        raise ValueError(f"driver must be one of {DRIVERS}, got {driver!r}")
    big, small = max(m, n), min(m, n)
    qr_first = big > small and big >= QR_FIRST_RATIO * small
    if driver != "auto":
        return SVDPlan(driver, qr_first)
    if small <= JACOBI_MAX_DIM:
        return SVDPlan("gesvdj", qr_first)
    if not compute_uv or (full_matrices and not qr_first):
        return SVDPlan("gesvd", qr_first)
    return SVDPlan("gesvdp", qr_first, verify=True)


def svd(a, full_matrices=False, compute_uv=True, driver="auto", *, check_finite=True):
    """Singular value decomposition ``a = U @ diag(S) @ Vh`` of a matrix or a batch.

    Parameters
    ----------
    a : (..., m, n) array_like
    full_matrices : bool, default False
        ``True``: U is (..., m, m) and Vh (..., n, n); else (..., m, k) and (..., k, n),
        ``k = min(m, n)``.
    compute_uv : bool, default True
        ``False`` returns the singular values alone.
    driver : {"auto", "gesvd", "gesvdj", "gesvdp"}, default "auto"
        cuSOLVER kernel on the GPU: ``gesvd`` (QR iteration), ``gesvdj`` (Jacobi),
        ``gesvdp`` (polar decomposition: for well-conditioned matrices only, it is not backward
        stable when singular values approach zero; the perturbation it applies is recorded as
        ``h_err_sigma`` in :func:`gpulinalg.last_run`). ``auto`` takes ``gesvdj`` when
        ``min(m, n) <= 32``; above, ``gesvdp`` with an a-posteriori check of backward error
        and orthogonality, recomputing with ``gesvd`` when the check fails (values-only calls
        use ``gesvd``). Whatever the driver, a matrix with
        ``max(m, n) >= 1.5 min(m, n)`` is first reduced by QR and the kernel factors the small
        R. On the CPU, ``gesvd`` selects LAPACK's gesvd and every other choice gesdd.
    check_finite : bool, default True

    Returns
    -------
    SVDResult(U, S, Vh), or S alone when ``compute_uv=False``
        ``S`` is real, descending. Signs are deterministic: the largest-magnitude entry of each
        row of ``Vh`` is real and positive (``svd_flip`` convention), on both backends.

    Examples
    --------
    >>> import numpy as np
    >>> from gpulinalg.decomp import svd
    >>> a = np.random.default_rng(0).standard_normal((8, 3))
    >>> u, s, vh = svd(a)
    >>> u.shape, s.shape, vh.shape
    ((8, 3), (3,), (3, 3))
    >>> bool(np.allclose(u * s @ vh, a)), bool(np.allclose(s, np.linalg.svd(a)[1]))
    (True, True)
    """
    a, dtype = prepare(a, check_finite=check_finite)
    m, n = a.shape[-2:]
    plan = resolve_driver(m, n, driver, compute_uv, full_matrices)
    batch = tuple(a.shape[:-2])
    if a.size == 0:
        return _empty(a, batch, m, n, full_matrices, compute_uv, dtype)
    nb = int(np.prod(batch, dtype=np.int64))
    big, k = max(m, n), min(m, n)
    u_cols = big if full_matrices else k
    nbytes = (nbytes_of((a.shape, dtype), (batch + (big, k), dtype), (batch + (big, u_cols), dtype),
                        (batch + (k, k), dtype), (batch + (k, k), dtype))
              + workspace_bytes(plan.driver, k if plan.qr_first else big, k, dtype)
              + workspace_bytes("geqrf", big, k, dtype))
    flops = nb * (4 * big * k * k + 22 * k ** 3) * flops_scale(dtype)
    return _dispatch.dispatch("decomp.svd", _gpu_svd, _cpu.svd,
                              (a, bool(full_matrices), bool(compute_uv), driver, dtype),
                              nbytes=nbytes, flops=flops)


def _empty(a, batch, m, n, full, uv, dtype):
    s = (batch + (0,), real_dtype(dtype))
    if not uv:
        return empty_result(a, s)[0]
    if full:
        u, _, vh = empty_result(a, (batch + (m, m), dtype, True), s,
                                (batch + (n, n), dtype, True))
    else:
        u, _, vh = empty_result(a, (batch + (m, 0), dtype), s, (batch + (0, n), dtype))
    return SVDResult(u, empty_result(a, s)[0], vh)


def _gpu_svd(a, full_matrices, compute_uv, driver, dtype):
    import cupy
    m, n = a.shape[-2:]
    wide = m < n
    big, k = max(m, n), min(m, n)
    plan = resolve_driver(m, n, driver, compute_uv, full_matrices)
    _dispatch.note(driver=plan.driver, qr_first=plan.qr_first)
    w = fortran_batch(a.swapaxes(-1, -2).conj() if wide else a, dtype)  # big x k
    nb = len(w)
    if nb > 1 and plan.driver == "gesvdj" and big <= JACOBI_BATCHED_MAX:
        s, u, v = _batched_jacobi(w, compute_uv, full_matrices)
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
    u, s, vh = _cpu.flip_signs(u, s, vh, cupy)
    return SVDResult(u, s, vh)


def _looped(w, compute_uv, full_matrices, plan):
    """One kernel call per matrix (QR first where the plan says so)."""
    import cupy
    nb, big, k = w.shape
    s = cupy.empty((nb, k), dtype=real_dtype(w.dtype))
    u = v = None
    if compute_uv:
        u_cols = big if full_matrices else k
        u = cupy.empty((nb, u_cols, big), dtype=w.dtype).transpose(0, 2, 1)
        v = cupy.empty((nb, k, k), dtype=w.dtype).transpose(0, 2, 1)
    with Solver(w.dtype, 3 * nb) as sv:
        for i in range(nb):
            _one(sv, 3 * i, w[i], s[i], None if u is None else u[i],
                 None if v is None else v[i], full_matrices, plan)
        codes = sv.check(f"svd ({plan.driver})").reshape(nb, 3)
    raise_not_converged(codes[:, 1], f"svd ({plan.driver})")
    return s, u, v


def _batched_jacobi(w, compute_uv, full_matrices):
    """A stack of small matrices in one ``gesvdjBatched`` call (full U, then sliced)."""
    import cupy
    nb, big, k = w.shape
    _dispatch.note(batched=True)
    s = cupy.empty((nb, k), dtype=real_dtype(w.dtype))
    u = cupy.empty((nb, big, big), dtype=w.dtype).transpose(0, 2, 1) if compute_uv else None
    v = cupy.empty((nb, k, k), dtype=w.dtype).transpose(0, 2, 1) if compute_uv else None
    with Solver(w.dtype, nb) as sv:
        sv.gesvdj_batched(w, s, u, v)
        codes = sv.check("svd (gesvdjBatched)")
    raise_not_converged(codes, "svd (gesvdjBatched)")
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
    if u is None:
        return _kernel(sv, slot + 1, r, s, None, None, False, plan)
    ur = cupy.empty((k, k), dtype=w.dtype, order="F")
    _kernel(sv, slot + 1, r, s, ur, v, False, plan)
    u.fill(0)
    u[:k, :k] = ur
    if full and big > k:
        idx = cupy.arange(k, big)
        u[idx, idx] = 1
    sv.ormqr(w, k, tau, u, slot + 2)


def _kernel(sv, slot, w, s, u, v, full, plan):
    """Run the plan's kernel on ``w``; with ``plan.verify``, check and fall back to gesvd."""
    driver = plan.driver
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
    _dispatch.note(driver="gesvd", rejected=driver)
    w[...] = original
    import cupy
    vh = cupy.empty(v.shape, dtype=v.dtype, order="F")
    sv.gesvd(w, s, u, vh, full, slot)
    v[...] = vh.conj().T  # the caller reads V (not V^H) from the verified drivers


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
