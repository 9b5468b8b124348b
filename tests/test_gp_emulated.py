"""The GPU ``cho_inverse``'s cuBLAS calls (panelled ``trsm`` against the identity, panelled
``gemm``) on the CPU: the emulated routines read and write memory through the very raw
pointers, dimensions and leading dimensions that the real bindings receive
(:func:`_cusolver_emulator.view`), so the pointer arithmetic is checked without a GPU."""

import numpy as np
import pytest
import scipy.linalg

from _cusolver_emulator import FakeDev, view


class _FakeCublas:
    """``<t>trsm`` and ``<t>gemm`` of ``nvmath.bindings.cublas`` (host pointer mode)."""

    def __init__(self, real, dtype):
        self.real, self.dtype, self.calls = real, np.dtype(dtype), []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def _scalar(self, ptr):
        return view(ptr, 1, 1, 1, self.dtype)[0, 0]

    def trsm(self, h, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb):
        cb = self.real
        assert (side, uplo, trans, diag) == (int(cb.SideMode.LEFT), int(cb.FillMode.LOWER),
                                             int(cb.Operation.N), int(cb.DiagType.NON_UNIT))
        self.calls.append("trsm")
        A, B = view(a, m, m, lda, self.dtype), view(b, m, n, ldb, self.dtype)
        B[...] = self._scalar(alpha) * scipy.linalg.solve_triangular(A, B, lower=True)

    def gemm(self, h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        cb = self.real
        assert (ta, tb) == (int(cb.Operation.T), int(cb.Operation.N))
        self.calls.append("gemm")
        A, B = view(a, k, m, lda, self.dtype), view(b, k, n, ldb, self.dtype)
        C = view(c, m, n, ldc, self.dtype)
        C[...] = self._scalar(alpha) * (A.T @ B) + self._scalar(beta) * C * (beta != 0)


@pytest.mark.parametrize("n, panel, dtype", [(257, 64, np.float64), (100, 1024, np.float64),
                                              (130, 50, np.float32), (1, 4, np.float64)])
def test_trsm_gemm_route_pointer_arithmetic(n, panel, dtype, monkeypatch):
    from nvmath.bindings import cublas

    from gpulinalg.gp import _engine_cuda
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n))
    K = (a @ a.T / n + np.eye(n)).astype(dtype)
    L = np.asfortranarray(np.linalg.cholesky(K.astype(np.float64)).astype(dtype))
    L0 = np.tril(L).astype(np.float64)
    L[np.triu_indices(n, 1)] = 7.0  # the other triangle holds junk: never read
    c = L.view(FakeDev)
    v = np.zeros((n, n), dtype=dtype).view(FakeDev)
    fake = _FakeCublas(cublas, dtype)
    pre = "d" if dtype == np.float64 else "s"
    monkeypatch.setattr(_engine_cuda, "get_handle", lambda name: 0)
    monkeypatch.setattr(_engine_cuda, "PANEL", panel)
    monkeypatch.setattr(cublas, pre + "trsm", fake.trsm, raising=True)
    monkeypatch.setattr(cublas, pre + "gemm", fake.gemm, raising=True)
    inv = _engine_cuda._trsm_gemm(c, v)
    assert np.shares_memory(inv, c) and inv.flags.c_contiguous
    panels = -(-n // panel)
    assert fake.calls == ["trsm"] * panels + ["gemm"] * panels
    tol = 1e-10 if dtype == np.float64 else 2e-4
    ref = np.linalg.inv(K.astype(np.float64))
    np.testing.assert_allclose(np.asarray(inv), ref, atol=tol * np.abs(ref).max())
    V = np.asarray(v).T  # the buffer holds V = L^-1 column-major: lower triangular
    np.testing.assert_array_equal(np.triu(V, 1), 0)
    np.testing.assert_allclose(V @ L0, np.eye(n),
                               atol=tol * n)
