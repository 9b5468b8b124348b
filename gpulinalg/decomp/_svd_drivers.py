"""Which cuSOLVER SVD kernel :func:`gpulinalg.decomp.svd` runs: the driver table and its
resolution into an :class:`SVDPlan` (pure Python; the api estimates bytes from it, the GPU
engine follows it)."""

import dataclasses

__all__ = ["DRIVERS", "QR_FIRST_RATIO", "JACOBI_MAX_DIM", "PROMOTE_FROM", "SVDPlan",
           "resolve_driver", "promotes_first"]

DRIVERS = ("auto", "gesvd", "gesvdj", "gesvdp")

#: A matrix goes through QR first when ``max(m, n) >= QR_FIRST_RATIO * min(m, n)``: the
#: SVD kernel then works on the small square R and ``ormqr`` maps its U back.
QR_FIRST_RATIO = 1.5
#: ``driver="auto"`` uses Jacobi (``gesvdj``) when ``min(m, n) <= JACOBI_MAX_DIM``.
JACOBI_MAX_DIM = 32
#: A verified ``gesvdp`` of a single-precision factor whose smaller side is at least this
#: runs in double precision at once, without the single-precision try first. On the H200
#: (``python -m benchmarks.decomp_batched --sections svd``, 2026-12-02, float32 random
#: matrices, ms, verified call with the try first / in double precision at once) the
#: single-precision try failed its check at 2048^2 (backward error 54; 162 / 85.6), 4096^2
#: (76; 558 / 289) and 8192^2 (2649 / 1331), and at 1024^2 in one run of two (70.5 or 28.0 /
#: 37.2); below, where it mostly passed, double precision at once cost more (16 x 256^2
#: 92.1 / 102, 4 x 512^2 48.4 / 55.5). complex64 is untimed: as float32.
PROMOTE_FROM = 1024


@dataclasses.dataclass(frozen=True)
class SVDPlan:
    """What :func:`resolve_driver` chose (stored in :func:`gpulinalg.last_run` details)."""

    driver: str
    qr_first: bool
    verify: bool = False  # check the kernel's result; recompute with gesvd when it fails


def resolve_driver(m: int, n: int, driver: str = "auto", compute_uv: bool = True,
                   full_matrices: bool = False) -> SVDPlan:
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
