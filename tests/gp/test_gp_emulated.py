"""The GPU ``K^-1``'s cuBLAS calls (``tri_inverse``: doubling merges by strided-batched and
ragged ``gemm``; ``gram_lower``: ``V^T V`` in column panels) on the CPU: the emulated routines
read and write memory through the very raw pointers, dimensions and leading dimensions that the
real bindings receive (:func:`_cusolver_emulator.view`), each checked to stay inside its
buffer, so the pointer arithmetic is checked without a GPU."""

import numpy as np
import pytest

from tests.support.cusolver_emulator import FakeDev, view


class _FakeGemm:
    """``dgemm`` and ``dgemm_strided_batched`` of ``nvmath.bindings.cublas`` on raw pointers,
    each operand checked to lie inside one of the ``buffers`` (no access out of bounds)."""

    def __init__(self, real, buffers):
        self.real, self.calls = real, []
        self.ranges = [(b.ctypes.data, b.ctypes.data + b.nbytes) for b in buffers]

    def __getattr__(self, name):
        return getattr(self.real, name)

    def _view(self, ptr, rows, cols, ld):
        end = ptr + (((cols - 1) * ld + rows) * 8 if rows and cols else 0)
        assert any(lo <= ptr and end <= hi for lo, hi in self.ranges), "out of bounds"
        return view(ptr, rows, cols, ld, np.float64)

    def _op(self, trans, ptr, rows, cols, ld):  # op(X) of shape rows x cols
        if trans == int(self.real.Operation.T):
            return self._view(ptr, cols, rows, ld).T
        assert trans == int(self.real.Operation.N)
        return self._view(ptr, rows, cols, ld)

    def dgemm(self, h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self.calls.append("gemm")
        al, be = (view(p, 1, 1, 1, np.float64)[0, 0] for p in (alpha, beta))
        A, B = self._op(ta, a, m, k, lda), self._op(tb, b, k, n, ldb)
        C = self._view(c, m, n, ldc)
        C[...] = al * (A @ B) + (be * C if be != 0 else 0.0)

    def dgemm_strided_batched(self, h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta,
                              c, ldc, sc, batch):
        self.calls.append(f"gemm x{batch}")
        for i in range(batch):
            self.dgemm(h, ta, tb, m, n, k, alpha, a + 8 * i * sa, lda, b + 8 * i * sb, ldb,
                       beta, c + 8 * i * sc, ldc)
            self.calls.pop()


def _fake_leaves(v, n):
    """The leaf kernel of ``_cholinv_cuda`` in NumPy: diagonal blocks of order LEAF inverted."""
    from gpulinalg.decomp._kernels import _cholinv_cuda
    V = np.asarray(v).reshape(n, n).T  # column-major
    for r in range(0, n, _cholinv_cuda.LEAF):
        blk = V[r:r + _cholinv_cuda.LEAF, r:r + _cholinv_cuda.LEAF]
        blk[...] = np.linalg.inv(np.tril(blk))


@pytest.mark.parametrize("n", [1, 31, 32, 33, 64, 95, 96, 200, 257, 1000])
def test_tri_inverse_and_gram_pointer_arithmetic(n, monkeypatch):
    """``tri_inverse`` (leaves, then doubling merges by strided-batched and ragged GEMMs) and
    ``gram_lower`` (``V^T V`` in column panels, lower or full) on emulated cuBLAS."""
    from nvmath.bindings import cublas

    from gpulinalg.decomp._kernels import _cholinv_cuda
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n))
    K = a @ a.T / n + np.eye(n)
    L = np.linalg.cholesky(K)
    v = L.T.copy().reshape(-1)  # column-major L, zeros above the diagonal
    scratch = np.full(_cholinv_cuda.tri_inverse_scratch(n), np.nan)
    out = np.full(n * n, 7.0)
    fake = _FakeGemm(cublas, [v, scratch, out])
    monkeypatch.setattr(_cholinv_cuda, "get_handle", lambda name: 0)
    monkeypatch.setattr(_cholinv_cuda, "_invert_leaves", _fake_leaves)
    monkeypatch.setattr(cublas, "dgemm", fake.dgemm, raising=True)
    monkeypatch.setattr(cublas, "dgemm_strided_batched", fake.dgemm_strided_batched,
                        raising=True)
    monkeypatch.setattr(_cholinv_cuda, "LOWER_PANEL", 96)
    _cholinv_cuda.tri_inverse(v.view(FakeDev), n, scratch.view(FakeDev))
    V = v.reshape(n, n).T
    np.testing.assert_array_equal(np.triu(V, 1), 0)
    np.testing.assert_allclose(V @ L, np.eye(n), atol=1e-10 * n)
    levels = len(_cholinv_cuda._levels(n))
    assert len(fake.calls) <= 4 * levels
    ref = np.linalg.inv(K)
    _cholinv_cuda.gram_lower(v.view(FakeDev), n, out.view(FakeDev))
    got = out.reshape(n, n).T
    low = np.tril_indices(n)
    np.testing.assert_allclose(got[low], ref[low], atol=1e-10 * np.abs(ref).max())
    _cholinv_cuda.gram_lower(v.view(FakeDev), n, out.view(FakeDev), full=True)
    np.testing.assert_allclose(out.reshape(n, n), ref, atol=1e-10 * np.abs(ref).max())
