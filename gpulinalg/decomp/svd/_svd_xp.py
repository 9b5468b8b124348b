"""Deterministic SVD signs, written once for NumPy and CuPy (both engines of
:func:`gpulinalg.decomp.svd` apply them)."""

__all__ = ["flip_signs"]


def flip_signs(u, s, vh, xp, overwrite=False):
    """Deterministic signs: the largest-magnitude entry of each of the first ``min(m, n)``
    rows of ``Vh`` is made real and positive; ``U``'s columns take the inverse phase.
    ``overwrite=True`` scales ``u`` and ``vh`` in place (factors the caller owns)."""
    k = s.shape[-1]
    if k == 0:
        return u, s, vh
    rows = vh[..., :k, :]
    idx = xp.argmax(xp.abs(rows), axis=-1)[..., None]
    peak = xp.take_along_axis(rows, idx, axis=-1)  # (..., k, 1)
    mag = xp.abs(peak)
    phase = xp.where(mag > 0, peak / xp.where(mag > 0, mag, 1), 1).astype(vh.dtype)
    if overwrite:
        rows *= xp.conj(phase)  # a view of vh
        u[..., :, :k] *= xp.swapaxes(phase, -1, -2)
        return u, s, vh
    vh = vh.copy()
    u = u.copy()
    vh[..., :k, :] = rows * xp.conj(phase)
    u[..., :, :k] = u[..., :, :k] * xp.swapaxes(phase, -1, -2)
    return u, s, vh
