"""Out-of-core randomized SVD and PCA statistics: row panels streamed from host memory or disk.

A host matrix (:class:`~gpulinalg.decomp.lowrank._ooc_source.HostMatrix` over a NumPy array,
``np.memmap``, or any 2-D object with ``shape``, ``dtype`` and row slicing such as an h5py or
zarr dataset) is read in row panels ``A_i``. Each power iteration is **one pass** over the
matrix: ``Z <- orth(sum_i A_i^H (A_i Z))``, with ``Z`` (``n x l``) and the accumulation in
float64 (complex128), so the result does not lose the small singular values the two half-steps
would otherwise square away. A last pass forms ``Y = A Z`` and its Gram matrix; the
Rayleigh-Ritz step on ``Y`` gives ``U``, ``S`` and ``Vh``. An optional centering vector makes
the same passes act on ``A - 1 mu^T`` (PCA).

The algorithm is written once; a *streamer* brings the panels and says where they live:
``_ooc_host.NumpyStreamer`` (CPU; also what CI tests) and ``_ooc_cuda.CupyStreamer`` (GPU).
A streamer has ``engine`` (the :class:`~gpulinalg.decomp.lowrank._lowrank_engine.Engine` of its
panels), ``matrix``, ``hi`` (the accumulation dtype), ``panel_rows``, and the methods
``run_pass(consume, progress)`` (calls ``consume(start, stop, panel)`` per panel),
``host_buffer(shape, dtype)``, ``rows_to_host(block, out)``, ``detach(buffer)`` and ``finish()``.
"""

import numpy as np

from ._randomized_xp import GRAM_MIN_RATIO, NOT_FINITE
from ._sketch_xp import flip_by_phase, gaussian, hermitian, orthonormalize

__all__ = ["streamed_svd", "streamed_moments", "streamed_gram", "streamed_residual_norm",
           "streamed_project", "PROGRESS_MIN_BYTES"]

#: A progress bar (tqdm, when installed) is shown when a run streams at least this many bytes.
PROGRESS_MIN_BYTES = 4 << 30


class _Progress:
    def __init__(self, total_bytes, enabled):
        self.bar = None
        if enabled is None:
            enabled = total_bytes >= PROGRESS_MIN_BYTES
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # tqdm is optional: no bar without it
                return
            self.bar = tqdm(total=total_bytes, unit="B", unit_scale=True,
                            desc="gpulinalg out-of-core")

    def update(self, nbytes):
        if self.bar is not None:
            self.bar.update(nbytes)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def streamed_moments(streamer, progress=None):
    """One pass: column means and the total sum of squared deviations (for PCA)."""
    xp = streamer.engine.xp
    m, n = streamer.matrix.shape
    acc = {"sum": xp.zeros(n, streamer.hi), "sq": xp.zeros((), np.float64)}

    def consume(start, stop, p):
        acc["sum"] += p.sum(axis=0)
        acc["sq"] += (p.real ** 2).sum() + ((p.imag ** 2).sum() if p.dtype.kind == "c" else 0)

    bar = _Progress(streamer.matrix.nbytes, progress)
    try:
        streamer.run_pass(consume, bar)
    finally:
        bar.close()
    mean = acc["sum"] / max(m, 1)
    total_ss = float(acc["sq"]) - m * float((xp.abs(mean) ** 2).sum())
    return mean, max(total_ss, 0.0)


def streamed_gram(streamer):
    """One pass: column means and the Gram matrix ``A^H A`` (float64), for PCA's covariance."""
    xp = streamer.engine.xp
    n = streamer.matrix.shape[1]
    acc = {"sum": xp.zeros(n, np.float64), "gram": xp.zeros((n, n), np.float64)}

    def consume(start, stop, p):
        acc["sum"] += p.sum(axis=0)
        acc["gram"] += hermitian(p) @ p

    streamer.run_pass(consume, _Progress(streamer.matrix.nbytes, None))
    streamer.finish()
    return acc["sum"] / max(streamer.matrix.shape[0], 1), acc["gram"]


def streamed_svd(streamer, k, l, n_iter, seed, *, mean=None, progress=None):
    """Top-``k`` SVD of the streamed matrix (minus ``1 mean^T`` when ``mean`` is given).

    Passes over the matrix: ``n_iter + 1``. Returns ``(U, S, Vh, info)``; ``U``, ``S`` and
    ``Vh`` are NumPy arrays (``U`` has as many rows as the matrix).
    """
    engine, hi = streamer.engine, streamer.hi
    m, n = streamer.matrix.shape
    out_dtype = streamer.matrix.dtype
    z = orthonormalize(engine, gaussian(engine, (n, l), hi, seed), "QR")
    bar = _Progress(streamer.matrix.nbytes * (n_iter + 1), progress)
    try:
        for _ in range(n_iter):
            z = orthonormalize(engine, _normal_pass(streamer, z, mean, bar), "QR")
        ys, gram = _final_pass(streamer, z, mean, bar)
    finally:
        bar.close()
        streamer.finish()
    U, S, W, route = _ritz_from_gram(ys, gram, k, out_dtype)
    Vh = hermitian(z @ engine.xp.asarray(W))
    U, Vh = flip_by_phase(np, U.astype(out_dtype), engine.to_host(Vh).astype(out_dtype))
    return U, S.astype(out_dtype.char.lower()), Vh, {"passes": n_iter + 1, "rayleigh_ritz": route,
                                                     "panel_rows": streamer.panel_rows}


def _centered(p, z, mean):
    y = p @ z
    if mean is not None:
        y -= (mean @ z)[None, :]
    return y


def _normal_pass(streamer, z, mean, bar):
    """``(A - 1 mu^T)^H (A - 1 mu^T) z`` in one pass."""
    acc = streamer.engine.xp.zeros_like(z)

    def consume(start, stop, p):
        y = _centered(p, z, mean)
        acc[...] += hermitian(p) @ y
        if mean is not None:
            acc[...] -= mean.conj()[:, None] * y.sum(axis=0)[None, :]

    streamer.run_pass(consume, bar)
    return acc


def _final_pass(streamer, z, mean, bar):
    """``Y = (A - 1 mu^T) z`` to the host, and ``Y^H Y``."""
    m = streamer.matrix.shape[0]
    l = z.shape[1]
    ys = streamer.host_buffer((m, l), streamer.hi)
    gram = streamer.engine.xp.zeros((l, l), streamer.hi)

    def consume(start, stop, p):
        y = _centered(p, z, mean)
        gram[...] += hermitian(y) @ y
        streamer.rows_to_host(y, ys[start:stop])

    streamer.run_pass(consume, bar)
    return ys, streamer.engine.to_host(gram)


def _ritz_from_gram(ys, gram, k, out_dtype):
    """SVD of ``ys`` (``m x l``, host) from its Gram matrix, or by Householder QR when the Gram
    matrix cannot resolve ``sigma_k`` to the output precision. A non-finite Gram matrix
    (NaN or infinity in a matrix streamed with ``check_finite=False``) raises ValueError."""
    if not np.isfinite(gram).all():
        raise ValueError(NOT_FINITE.format(dtype=np.dtype(out_dtype).name))
    lam, w = np.linalg.eigh(gram)
    lam, w = lam[::-1], w[:, ::-1]
    single = out_dtype in (np.float32, np.complex64)
    if single and k and lam[k - 1] > GRAM_MIN_RATIO ** 2 * lam[0]:
        sig = np.sqrt(lam[:k])
        return ys @ (w[:, :k] / sig[None, :]), sig, w[:, :k], "gram"
    qy, r = np.linalg.qr(ys)
    u_r, sig, vh_r = np.linalg.svd(r)
    return qy @ u_r[:, :k], sig[:k], hermitian(vh_r[:k]), "qr"


def streamed_residual_norm(streamer, Vh, *, n_probe=4, n_power=3, seed=0, mean=None):
    """Estimate ``||A (I - V V^H)||_2 = ||A - U diag(S) Vh||_2`` (``n_power + 1`` passes).

    The streamed Rayleigh-Ritz step makes ``U diag(S) Vh = A V V^H`` exactly, so block power
    iteration on ``(I - V V^H) A^H A (I - V V^H)`` estimates the residual's spectral norm.
    """
    engine, hi = streamer.engine, streamer.hi
    n = streamer.matrix.shape[1]
    v = hermitian(engine.xp.asarray(Vh).astype(hi))

    def project(x):
        return x - v @ (hermitian(v) @ x)

    bar = _Progress(0, False)
    x = orthonormalize(engine, project(gaussian(engine, (n, min(n_probe, n)), hi, seed)), "QR")
    for _ in range(n_power):
        x = orthonormalize(engine, project(_normal_pass(streamer, x, mean, bar)), "QR")
    w = project(_normal_pass(streamer, x, mean, bar))
    lam = np.linalg.eigvalsh(engine.to_host(hermitian(x) @ w))
    return float(np.sqrt(max(lam[-1], 0.0))) if lam.size else 0.0


def streamed_project(streamer, comp, mean, scale=None, progress=None):
    """``(A - 1 mean^T) comp^T`` (times ``scale`` per column) into a host array, one pass."""
    xp = streamer.engine.xp
    m = streamer.matrix.shape[0]
    dtype = np.dtype(comp.dtype)
    w = hermitian(xp.asarray(comp).astype(streamer.hi))
    shift = xp.asarray(mean).astype(streamer.hi) @ w
    if scale is not None:
        w, shift = w * xp.asarray(scale)[None, :], shift * xp.asarray(scale)
    out = streamer.host_buffer((m, w.shape[1]), dtype)

    def consume(start, stop, p):
        streamer.rows_to_host((p @ w - shift[None, :]).astype(dtype), out[start:stop])

    bar = _Progress(streamer.matrix.nbytes, progress)
    try:
        streamer.run_pass(consume, bar)
    finally:
        bar.close()
        streamer.finish()
    return streamer.detach(out)
