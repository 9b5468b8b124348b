"""float64 references and dtype-scaled tolerances shared by the dense tests."""

import numpy as np

from gpulinalg.dense._epilogs_xp import gelu

GELU_RTOL = 1e-9
ACTS = {None: lambda z: z, "relu": lambda z: np.maximum(z, 0), "gelu": lambda z: gelu(z, np)}


def eps(dtype):
    name = np.dtype(dtype).name
    return {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}.get(name, None) or \
        float(np.finfo(dtype).eps)


def reference(a, b, bias=None, activation=None, alpha=1.0, c=None, beta=0.0):
    """``(out, z, bound)`` in float64 (complex128): result, pre-activation, error scale."""
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    a64, b64 = np.asarray(a).astype(wide), np.asarray(b).astype(wide)
    z = alpha * (a64 @ b64)
    bound = abs(alpha) * (np.abs(a64) @ np.abs(b64))
    if c is not None and beta != 0.0:
        z = z + beta * np.asarray(c).astype(wide)
        bound = bound + abs(beta) * np.abs(np.asarray(c).astype(wide))
    if bias is not None:
        z = z + np.asarray(bias).astype(wide)
        bound = bound + np.abs(np.asarray(bias).astype(wide))
    return ACTS[activation](z), z, bound


def assert_close(got, ref, bound, dtype, k, activation=None):
    """``|got - ref| <= (k + 8) * eps(dtype) * bound`` elementwise (plus one rounding of ref).

    cuBLASLt evaluates GELU's tanh to about 1e-10 relative even in float64: with
    ``activation="gelu"`` that much is allowed on top.
    """
    got = np.asarray(got).astype(ref.dtype)
    tol = (k + 8) * eps(dtype) * (bound + np.abs(ref)) + 1e-300
    if activation == "gelu":
        tol = tol + GELU_RTOL * (bound + 1.0)
    err = np.abs(got - ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert np.all(err <= tol), f"max err {err.max():.3g}, max tol {tol.max():.3g}"
