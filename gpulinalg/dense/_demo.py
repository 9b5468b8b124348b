"""``gpulinalg demo`` step: a fused linear layer (bias + ReLU) forward and backward vs NumPy."""


import numpy as np

from .._demo import timed as _timed
from .._runtime import last_run
from ._matmul_api import matmul, matmul_backward



def step(small):
    """Rows for the demo: fused forward, fused backward, each against plain NumPy."""
    batch, fin, fout = (256, 256, 128) if small else (8192, 4096, 4096)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, fin)).astype(np.float32)
    w = (rng.standard_normal((fin, fout)) / np.sqrt(fin)).astype(np.float32)
    bias = rng.standard_normal(fout).astype(np.float32)
    (y, aux), _ = _timed(lambda: matmul(x, w, bias=bias, activation="relu", return_aux=True))
    rec = last_run()
    ref, t_ref = _timed(lambda: np.maximum(x @ w + bias, 0))
    rows = [dict(step=f"fused linear+ReLU fwd {batch}x{fin}->{fout}",
                 where=f"{rec.backend} ({rec.reason})", seconds=rec.seconds,
                 reference="numpy x @ w + b, max", reference_seconds=t_ref,
                 check=bool(np.allclose(y, ref, rtol=1e-4, atol=1e-3)))]
    g = np.ones_like(y)
    grads, _ = _timed(lambda: matmul_backward(g, x, w, aux=aux, activation="relu", bias=True))
    rec = last_run()

    def numpy_backward():
        dz = g * (x @ w + bias > 0)
        return dz @ w.T, x.T @ dz, dz.sum(axis=0)
    ref, t_ref = _timed(numpy_backward)
    ok = all(np.allclose(a, b, rtol=1e-3, atol=1e-2) for a, b in zip(grads, ref))
    rows.append(dict(step="fused backward (DReLU mask, bias gradient)",
                     where=f"{rec.backend} ({rec.reason})", seconds=rec.seconds,
                     reference="numpy mask + two products + sum", reference_seconds=t_ref,
                     check=ok))
    return rows
