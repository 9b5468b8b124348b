"""Which cuSOLVER SVD kernel :func:`gpulinalg.decomp.svd` runs: the driver table and its
resolution into an :class:`SVDPlan` (pure Python; the api estimates bytes from it, the GPU
engine follows it)."""

import dataclasses

__all__ = ["DRIVERS", "QR_FIRST_RATIO", "JACOBI_MAX_DIM", "PROMOTE_FROM", "VALUES_BY_FULL_FROM",
           "SVDPlan", "resolve_driver", "promotes_first"]

DRIVERS = ("auto", "gesvd", "gesvdj", "gesvdp")

#: A matrix goes through QR first when ``max(m, n) >= QR_FIRST_RATIO * min(m, n)``: the
#: SVD kernel then works on the small square R and ``ormqr`` maps its U back.
QR_FIRST_RATIO = 1.5
#: ``driver="auto"`` uses Jacobi (``gesvdj``) when ``min(m, n) <= JACOBI_MAX_DIM``.
JACOBI_MAX_DIM = 32
#: A verified ``gesvdp`` of a single-precision factor whose smaller side is at least this
#: runs in double precision at once, without the single-precision try first (from 2048^2 the
#: try failed its check and cost a second run; below it mostly passed); measured:
#: benchmarks/results/h200-decomp-batched-2026-12-02j.json and docs/performance-log.md.
PROMOTE_FROM = 1024
#: ``driver="auto"`` without vectors (``compute_uv=False``): from this smaller side on, the
#: values come from the verified ``gesvdp`` with vectors (discarded) instead of ``gesvd``'s
#: values-only mode, about twice as fast from 256^2 up (docs/performance-log.md, "svdvals").
VALUES_BY_FULL_FROM = 256


@dataclasses.dataclass(frozen=True)
class SVDPlan:
    """What :func:`resolve_driver` chose (stored in :func:`gpulinalg.last_run` details)."""

    driver: str
    qr_first: bool
    verify: bool = False  # check the kernel's result; recompute with gesvd when it fails
    # (the check needs the vectors: a verified plan computes them, values-only calls too)


def resolve_driver(m: int, n: int, driver: str = "auto", compute_uv: bool = True,
                   full_matrices: bool = False) -> SVDPlan:
    """Resolve ``driver`` for an ``m x n`` matrix into an :class:`SVDPlan`.

    Examples
    --------
    >>> resolve_driver(20000, 2000)
    SVDPlan(driver='gesvdp', qr_first=True, verify=True)
    >>> resolve_driver(20000, 2000, compute_uv=False)
    SVDPlan(driver='gesvdp', qr_first=True, verify=True)
    >>> resolve_driver(200, 160, compute_uv=False)
    SVDPlan(driver='gesvd', qr_first=False, verify=False)
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
    if not compute_uv and small < VALUES_BY_FULL_FROM:
        return SVDPlan("gesvd", qr_first)
    if compute_uv and full_matrices and not qr_first:
        return SVDPlan("gesvd", qr_first)
    return SVDPlan("gesvdp", qr_first, verify=True)


def promotes_first(dtype, k: int) -> bool:
    """Whether the verified ``gesvdp`` of a ``dtype`` factor with smaller side ``k`` runs in
    double precision from the start (:data:`PROMOTE_FROM`).

    Examples
    --------
    >>> promotes_first("float32", 4096), promotes_first("float32", 512)
    (True, False)
    >>> promotes_first("float64", 4096), promotes_first("complex64", 2048)
    (False, True)
    """
    import numpy as np
    return np.dtype(dtype).char in "fF" and k >= PROMOTE_FROM
