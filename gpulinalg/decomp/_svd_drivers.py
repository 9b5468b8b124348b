"""Which cuSOLVER SVD kernel :func:`gpulinalg.decomp.svd` runs: the driver table and its
resolution into an :class:`SVDPlan` (pure Python; the api estimates bytes from it, the GPU
engine follows it)."""

import dataclasses

__all__ = ["DRIVERS", "QR_FIRST_RATIO", "JACOBI_MAX_DIM", "SVDPlan", "resolve_driver"]

DRIVERS = ("auto", "gesvd", "gesvdj", "gesvdp")

#: A matrix goes through QR first when ``max(m, n) >= QR_FIRST_RATIO * min(m, n)``: the
#: SVD kernel then works on the small square R and ``ormqr`` maps its U back.
QR_FIRST_RATIO = 1.5
#: ``driver="auto"`` uses Jacobi (``gesvdj``) when ``min(m, n) <= JACOBI_MAX_DIM``.
JACOBI_MAX_DIM = 32


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
