"""Deterministic eigenvector signs, written once for NumPy and CuPy (both engines of
:func:`gpulinalg.decomp.eigh` apply them)."""

__all__ = ["flip_signs"]


def flip_signs(v, xp):
    """The largest-magnitude entry of each column of ``v`` (..., n, k) made real and positive
    (the column times a unit phase: still an eigenvector of the same eigenvalue)."""
    if v.shape[-1] == 0 or v.shape[-2] == 0:
        return v
    idx = xp.argmax(xp.abs(v), axis=-2)[..., None, :]
    peak = xp.take_along_axis(v, idx, axis=-2)  # (..., 1, k)
    mag = xp.abs(peak)
    phase = xp.where(mag > 0, peak / xp.where(mag > 0, mag, 1), 1).astype(v.dtype)
    return v * xp.conj(phase)
