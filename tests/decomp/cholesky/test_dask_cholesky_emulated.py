"""The GPU panel kernels of the Dask blocked Cholesky (``_tiles_cuda.trsm_right``,
``gemm_sub``, ``herk_sub`` and the POTRF of decomp's GPU engine) run the whole factor graph
against an emulation of cuBLAS/cuSOLVER/CuPy on the CPU: the C-ordered row-block frames
(leading dimensions, flipped triangles, transposed operations) are checked against NumPy.
The real libraries run in the ``gpu``-marked tests of test_dask_gpu.py."""

import contextlib

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from gpulinalg.decomp.cholesky import _cholesky_dask  # noqa: E402
from gpulinalg.decomp._tiles import _tiles_cuda, _tiles_xp  # noqa: E402

from tests.support.cusolver_emulator import CALLS, FakeDev, emulated_gpu, view  # noqa: E402


def _gemm(dtype):
    def gemm(h, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        CALLS["gemm"] += 1
        A = view(a, m, k, lda, dtype) if transa == 0 else _op(view(a, k, m, lda, dtype), transa)
        B = view(b, k, n, ldb, dtype) if transb == 0 else _op(view(b, n, k, ldb, dtype), transb)
        C = view(c, m, n, ldc, dtype)
        al, be = (view(p, 1, 1, 1, dtype)[0, 0] for p in (alpha, beta))
        C[...] = al * (A @ B) + be * C
    return gemm


def _op(x, trans):
    return x.T if trans == 1 else x.conj().T


def _rank_k(dtype, herm):
    real = np.empty(0, dtype).real.dtype

    def rank_k(h, uplo, trans, n, k, alpha, a, lda, beta, c, ldc):
        CALLS["herk" if herm else "syrk"] += 1
        A = view(a, n, k, lda, dtype) if trans == 0 else _op(view(a, k, n, lda, dtype), trans)
        C = view(c, n, n, ldc, dtype)
        al, be = (view(p, 1, 1, 1, real if herm else dtype)[0, 0] for p in (alpha, beta))
        new = al * (A @ A.conj().T) + be * C
        keep = np.tril(np.ones((n, n), bool)) if uplo == 0 else np.triu(np.ones((n, n), bool))
        C[keep] = new[keep]
    return rank_k


@pytest.fixture
def emu(monkeypatch):
    import sys
    with emulated_gpu(monkeypatch):
        cb = sys.modules["nvmath.bindings.cublas"]
        for p, dt in zip("sdcz", (np.float32, np.float64, np.complex64, np.complex128)):
            monkeypatch.setattr(cb, p + "gemm", _gemm(dt), raising=False)
            name = p + ("herk" if p in "cz" else "syrk")
            monkeypatch.setattr(cb, name, _rank_k(dt, p in "cz"), raising=False)
        monkeypatch.setattr(_tiles_cuda, "op_stream", contextlib.nullcontext)
        stack = _tiles_xp.stack_panel
        monkeypatch.setattr(_tiles_xp, "stack_panel",
                            lambda tiles: np.asarray(stack(tiles)).view(FakeDev))
        yield


@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
@pytest.mark.parametrize("lower", [True, False])
def test_panel_graph_on_emulated_gpu_kernels(emu, rng, dtype, lower):
    n, t = 23, 7  # tiles 7, 7, 7, 2
    m = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n))
                                       if np.dtype(dtype).kind == "c" else 0)
    a = (m @ m.conj().T + n * np.eye(n)).astype(dtype)
    x = da.from_array(a, chunks=(t, t))
    dsk, lkey = _cholesky_dask._factor_graph(x, _tiles_cuda, lower, "emu")
    nb = x.numblocks[0]
    for i in range(nb):
        for j in range(nb):
            dsk[(x.name, i, j)] = np.array(a[i * t:(i + 1) * t, j * t:(j + 1) * t]).view(FakeDev)
    dsk.update({("L", i, j): lkey(i, j) for i in range(nb) for j in range(i + 1)})
    CALLS.clear()
    got = dask.get(dsk, [("L", i, j) for i in range(nb) for j in range(i + 1)])
    L = np.zeros((n, n), dtype)
    for (i, j), tile in zip([(r, c) for r in range(nb) for c in range(r + 1)], got):
        L[i * t:i * t + tile.shape[0], j * t:j * t + tile.shape[1]] = tile
    hi = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    ref = np.linalg.cholesky(a.astype(hi))
    tol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-10
    np.testing.assert_allclose(L, ref, atol=tol * np.abs(ref).max())
    herm = np.dtype(dtype).kind == "c"
    assert CALLS["herk" if herm else "syrk"] == 6  # T (T - 1) / 2 updates, one call each
    assert CALLS["gemm"] == 3  # ... and one GEMM where a panel has rows below its diagonal
