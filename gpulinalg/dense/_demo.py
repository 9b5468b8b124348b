"""``gpulinalg demo`` step of the dense module: a fused linear layer (bias + ReLU), forward and
backward, against the same layer written with NumPy."""

import numpy as np

from .._demo import compare


def relu_mask(aux):
    """The boolean mask ``Z > 0`` that a fused forward kept in its aux (the bit layout is in
    :class:`gpulinalg.dense.MatmulAux`'s Notes), on the host."""
    data = aux.data.get() if hasattr(aux.data, "get") else np.asarray(aux.data)  # CuPy -> host
    bits = np.unpackbits(data, axis=-2, bitorder="little")[..., :aux.rows, :aux.cols]
    return np.swapaxes(bits, -1, -2).astype(bool) if aux.transposed else bits.astype(bool)


def _close(got, ref, tol=1e-4):
    """Normwise relative difference within ``tol`` (fp32 products of a few thousand terms)."""
    return float(np.linalg.norm(got - ref)) <= tol * float(np.linalg.norm(ref))


def step(small):
    """Rows for the demo: fused forward, fused backward, each against plain NumPy.

    The backward reference uses the mask the fused forward produced (unpacked from its aux), so
    a pre-activation within rounding of zero is on the same side of the ReLU in both.
    """
    from . import matmul, matmul_backward
    batch, fin, fout = (256, 256, 128) if small else (8192, 4096, 4096)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, fin)).astype(np.float32)
    w = (rng.standard_normal((fin, fout)) / np.sqrt(fin)).astype(np.float32)
    bias = rng.standard_normal(fout).astype(np.float32)

    def forward():
        return matmul(x, w, bias=bias, activation="relu", return_aux=True)
    rows = [compare(f"fused linear+ReLU fwd {batch}x{fin}->{fout} fp32", forward,
                    lambda: np.maximum(x @ w + bias, 0), "NumPy relu(x@w+b)",
                    lambda got, ref: _close(got[0], ref))]
    y, aux = forward()
    mask = relu_mask(aux)
    g = rng.standard_normal(y.shape).astype(np.float32)

    def numpy_backward():
        dz = g * mask
        return dz @ w.T, x.T @ dz, dz.sum(axis=0)
    rows.append(compare(
        "fused backward (ReLU mask, bias gradient)",
        lambda: matmul_backward(g, x, w, aux=aux, activation="relu", bias=True),
        numpy_backward, "NumPy, same mask",
        lambda got, ref: all(_close(a, b) for a, b in zip(got, ref))))
    return rows
