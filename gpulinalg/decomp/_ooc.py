"""Out-of-core randomized SVD and PCA statistics: row panels streamed from host memory or disk.

A host matrix (NumPy array, ``np.memmap``, or any 2-D object with ``shape``, ``dtype`` and
row slicing such as an h5py or zarr dataset) is read in row panels ``A_i``. Each power
iteration is **one pass** over the matrix: ``Z <- orth(sum_i A_i^H (A_i Z))``, with ``Z``
(``n x l``) and the accumulation in float64 (complex128), so the result does not lose the
small singular values the two half-steps would otherwise square away. A last pass forms
``Y = A Z`` and its Gram matrix; the Rayleigh-Ritz step on ``Y`` gives ``U``, ``S`` and ``Vh``.
An optional centering vector makes the same passes act on ``A - 1 mu^T`` (PCA).

Two streamers run the same algorithm: :class:`NumpyStreamer` (CPU; also what CI tests) and
:class:`CupyStreamer` (GPU: two pinned host buffers and two device buffers, the copy of panel
``i + 1`` on a copy stream overlapping the GEMMs of panel ``i`` on the compute stream).
"""

import os
import time

import numpy as np

from .._runtime import budget as _budget
from .._runtime.dispatch import note
from ._sketch import gaussian, hermitian, high_precision, orthonormalize, svd_flip, to_host

__all__ = ["HostMatrix", "NumpyStreamer", "CupyStreamer", "streamed_svd", "streamed_moments",
           "streamed_residual_norm", "streamed_project",
           "PROGRESS_MIN_BYTES", "CPU_PANEL_BYTES"]

#: A progress bar (tqdm, when installed) is shown when a run streams at least this many bytes.
PROGRESS_MIN_BYTES = 4 << 30
#: Panel size of the CPU streamer.
CPU_PANEL_BYTES = 64 << 20
#: Largest pinned buffer of the GPU streamer.
GPU_PANEL_MAX_BYTES = 512 << 20
#: Host threads filling a pinned buffer from a NumPy source, and the least bytes per thread.
FILL_THREADS = max(1, min(16, os.cpu_count() or 1))
FILL_THREAD_BYTES = 1 << 20
#: Share of the GPU budget the streamer's panels take (the rest: sketch, accumulators).
BUDGET_FRACTION = 0.6


class HostMatrix:
    """A 2-D matrix on the host, read in row panels (kept out of the dispatcher's conversion).

    Parameters
    ----------
    source : ndarray, np.memmap, or object with ``shape``, ``dtype`` and ``source[i:j]``
    dtype : dtype
        Compute dtype of the results (float32/float64/complex).
    """

    def __init__(self, source, dtype):
        self.source = source
        self.shape = tuple(int(s) for s in source.shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = self.shape[0] * self.shape[1] * self.dtype.itemsize

    @property
    def in_memory(self):
        """True for a plain in-memory NumPy array (not a memmap, not a dataset)."""
        return isinstance(self.source, np.ndarray) and not isinstance(self.source, np.memmap)

    def panel(self, start, stop):
        return np.asarray(self.source[start:stop])

    def materialize(self):
        """The whole matrix as a NumPy array of the compute dtype (a view when possible)."""
        src = self.source if isinstance(self.source, np.ndarray) else self.panel(0, self.shape[0])
        return np.asarray(src, dtype=self.dtype)


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


class NumpyStreamer:
    """Row panels as float64 (complex128) NumPy arrays."""

    xp = np

    def __init__(self, matrix, *, panel_rows=None, check_finite=True):
        self.matrix, self.check_finite = matrix, check_finite
        m, n = matrix.shape
        row_bytes = max(n, 1) * 8
        self.panel_rows = int(panel_rows or max(1, min(m, CPU_PANEL_BYTES // row_bytes)))
        self.hi = high_precision(matrix.dtype)
        self.bytes_moved, self.seconds = 0, 0.0

    def run_pass(self, consume, progress):
        m = self.matrix.shape[0]
        check, self.check_finite = self.check_finite, False  # the first pass checks the data
        for start in range(0, m, self.panel_rows):
            stop = min(m, start + self.panel_rows)
            p = np.asarray(self.matrix.panel(start, stop), dtype=self.hi)
            if check and not np.isfinite(p).all():
                raise ValueError("a must not contain infs or NaNs")
            consume(start, stop, p)
            progress.update(p.shape[0] * p.shape[1] * self.matrix.dtype.itemsize)

    def finish(self):
        pass


class CupyStreamer:
    """Row panels copied through pinned buffers on a copy stream, used on the compute stream."""

    def __init__(self, matrix, *, panel_rows=None, check_finite=True):
        import cupy
        import cupyx
        self.xp = cupy
        self.matrix, self.check_finite = matrix, check_finite
        m, n = matrix.shape
        self.hi = high_precision(matrix.dtype)
        self.wire = _wire_dtype(matrix)
        # two device buffers, the float64 panel, its products with the sketch (l <= 256)
        row = max(n, 1) * (2 * self.wire.itemsize + self.hi.itemsize) + 2 * 256 * 8
        rows = panel_rows or int(_budget.available_bytes() * BUDGET_FRACTION) // row
        rows = min(rows, max(1, GPU_PANEL_MAX_BYTES // (max(n, 1) * self.wire.itemsize)))
        self.panel_rows = int(min(max(rows, 256), max(m, 1)))
        self.pinned = [cupyx.empty_pinned((self.panel_rows, n), self.wire) for _ in range(2)]
        self.device = [cupy.empty((self.panel_rows, n), self.wire) for _ in range(2)]
        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.compute = cupy.cuda.get_current_stream()
        self.bad = cupy.zeros((), dtype=cupy.bool_)
        self.bytes_moved, self.seconds = 0, 0.0
        self._pool = None

    def run_pass(self, consume, progress):
        m = self.matrix.shape[0]
        copied, computed = [None, None], [None, None]
        check, self.check_finite = self.check_finite, False  # the first pass checks the data
        t0 = time.perf_counter()
        for i, start in enumerate(range(0, m, self.panel_rows)):
            stop, b = min(m, start + self.panel_rows), i % 2
            rows = stop - start
            if copied[b] is not None:
                copied[b].synchronize()  # pinned buffer b is free again
            self._fill(self.pinned[b][:rows], start, stop)
            if computed[b] is not None:
                self.copy_stream.wait_event(computed[b])  # device buffer b is free again
            self.device[b][:rows].set(self.pinned[b][:rows], stream=self.copy_stream)
            copied[b] = self.copy_stream.record()
            self.compute.wait_event(copied[b])
            with self.compute:
                p = self.device[b][:rows].astype(self.hi, copy=False)
                if check:
                    self.bad |= ~self.xp.isfinite(p).all()
                consume(start, stop, p)
            computed[b] = self.compute.record()
            self.bytes_moved += rows * self.pinned[b].shape[1] * self.wire.itemsize
            progress.update(rows * self.pinned[b].shape[1] * self.wire.itemsize)
        self.compute.synchronize()
        self.seconds += time.perf_counter() - t0
        if check and bool(self.bad):
            raise ValueError("a must not contain infs or NaNs")

    def _fill(self, out, start, stop):
        """Copy rows ``start:stop`` into pinned ``out``; NumPy sources in parallel chunks (the
        copies release the GIL), so the host side keeps up with PCIe."""
        src = self.matrix.source
        rows = stop - start
        if not isinstance(src, np.ndarray) or out.nbytes < FILL_THREAD_BYTES * 2:
            np.copyto(out, self.matrix.panel(start, stop), casting="unsafe")
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(FILL_THREADS)
        step = -(-rows // FILL_THREADS)
        jobs = [self._pool.submit(np.copyto, out[i:i + step],
                                  src[start + i:min(start + i + step, stop)], casting="unsafe")
                for i in range(0, rows, step)]
        for job in jobs:
            job.result()

    def finish(self):
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        note(streamed_bytes=self.bytes_moved, stream_seconds=self.seconds,
             h2d_gbps=self.bytes_moved / self.seconds / 1e9 if self.seconds else None,
             panel_rows=self.panel_rows)


def _wire_dtype(matrix):
    """What crosses PCIe: the source's own dtype when it is a float type, else the compute one."""
    src = np.dtype(matrix.source.dtype)
    return src if src.kind in "fc" and src.itemsize >= 4 else matrix.dtype


def streamed_moments(streamer, progress=None):
    """One pass: column means and the total sum of squared deviations (for PCA)."""
    xp = streamer.xp
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


def streamed_svd(streamer, k, l, n_iter, seed, *, mean=None, progress=None):
    """Top-``k`` SVD of the streamed matrix (minus ``1 mean^T`` when ``mean`` is given).

    Passes over the matrix: ``n_iter + 1``. Returns ``(U, S, Vh, info)``; ``U`` is a NumPy
    array (it has as many rows as the matrix), ``S`` and ``Vh`` live on the streamer's device.
    """
    xp, hi = streamer.xp, streamer.hi
    m, n = streamer.matrix.shape
    out_dtype = streamer.matrix.dtype
    z = orthonormalize(xp, gaussian(xp, (n, l), hi, seed), "QR")
    bar = _Progress(streamer.matrix.nbytes * (n_iter + 1), progress)
    try:
        for _ in range(n_iter):
            z = orthonormalize(xp, _normal_pass(streamer, z, mean, bar), "QR")
        ys, gram = _final_pass(streamer, z, mean, bar)
    finally:
        bar.close()
        streamer.finish()
    U, S, W, route = _ritz_from_gram(ys, gram, k, out_dtype)
    Vh = hermitian(z @ xp.asarray(W))
    U, Vh = svd_flip(np, U.astype(out_dtype), to_host(Vh).astype(out_dtype))
    return U, S.astype(out_dtype.char.lower()), Vh, {"passes": n_iter + 1, "rayleigh_ritz": route,
                                                     "panel_rows": streamer.panel_rows}


def _centered(xp, p, z, mean):
    y = p @ z
    if mean is not None:
        y -= (mean @ z)[None, :]
    return y


def _normal_pass(streamer, z, mean, bar):
    """``(A - 1 mu^T)^H (A - 1 mu^T) z`` in one pass."""
    xp = streamer.xp
    acc = xp.zeros_like(z)

    def consume(start, stop, p):
        y = _centered(xp, p, z, mean)
        acc[...] += hermitian(p) @ y
        if mean is not None:
            acc[...] -= mean.conj()[:, None] * y.sum(axis=0)[None, :]

    streamer.run_pass(consume, bar)
    return acc


def _final_pass(streamer, z, mean, bar):
    """``Y = (A - 1 mu^T) z`` to the host, and ``Y^H Y``."""
    xp = streamer.xp
    m = streamer.matrix.shape[0]
    l = z.shape[1]
    if xp is np:
        ys = np.empty((m, l), streamer.hi)
    else:
        import cupyx
        ys = cupyx.empty_pinned((m, l), streamer.hi)
    gram = xp.zeros((l, l), streamer.hi)

    def consume(start, stop, p):
        y = _centered(xp, p, z, mean)
        gram[...] += hermitian(y) @ y
        if xp is np:
            ys[start:stop] = y
        else:
            y.get(stream=streamer.compute, out=ys[start:stop], blocking=False)

    streamer.run_pass(consume, bar)
    return ys, to_host(gram)


def _ritz_from_gram(ys, gram, k, out_dtype):
    """SVD of ``ys`` (``m x l``, host) from its Gram matrix, or by Householder QR when the Gram
    matrix cannot resolve ``sigma_k`` to the output precision."""
    from ._randomized import GRAM_MIN_RATIO
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
    xp, hi = streamer.xp, streamer.hi
    n = streamer.matrix.shape[1]
    v = hermitian(xp.asarray(Vh).astype(hi))

    def project(x):
        return x - v @ (hermitian(v) @ x)

    bar = _Progress(0, False)
    x = orthonormalize(xp, project(gaussian(xp, (n, min(n_probe, n)), hi, seed)), "QR")
    for _ in range(n_power):
        x = orthonormalize(xp, project(_normal_pass(streamer, x, mean, bar)), "QR")
    w = project(_normal_pass(streamer, x, mean, bar))
    lam = np.linalg.eigvalsh(to_host(hermitian(x) @ w))
    return float(np.sqrt(max(lam[-1], 0.0))) if lam.size else 0.0


def streamed_project(streamer, comp, mean, scale=None, progress=None):
    """``(A - 1 mean^T) comp^T`` (times ``scale`` per column) into a host array, one pass."""
    xp = streamer.xp
    m = streamer.matrix.shape[0]
    dtype = np.dtype(comp.dtype)
    w = hermitian(xp.asarray(comp).astype(streamer.hi))
    shift = xp.asarray(mean).astype(streamer.hi) @ w
    if scale is not None:
        w, shift = w * xp.asarray(scale)[None, :], shift * xp.asarray(scale)
    if xp is np:
        out = np.empty((m, w.shape[1]), dtype)
    else:
        import cupyx
        out = cupyx.empty_pinned((m, w.shape[1]), dtype)

    def consume(start, stop, p):
        y = (p @ w - shift[None, :]).astype(dtype)
        if xp is np:
            out[start:stop] = y
        else:
            y.get(stream=streamer.compute, out=out[start:stop], blocking=False)

    bar = _Progress(streamer.matrix.nbytes, progress)
    try:
        streamer.run_pass(consume, bar)
    finally:
        bar.close()
        streamer.finish()
    return np.array(out) if xp is not np else out
