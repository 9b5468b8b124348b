"""The cuBLAS glue of the blocked factorizations on the emulated cuBLAS/cuSOLVER (every run,
no GPU): the block-triangle Gram matrix (every block, both triangles) and the TF32 Cholesky's
blocking (panels, views, the failing minor; the two-level and inverted-diagonal variants) and
its block-substitution solve, whose products the emulator makes in float32."""

import numpy as np
import pytest

from gpulinalg.decomp._gpu import _blas_cuda
from gpulinalg.decomp.cholesky import _cholesky_tensor_cuda
from tests.support.cusolver_emulator import dev, emulated_gpu, plain


@pytest.mark.parametrize("blocks", [1, 3, 4, 7])
@pytest.mark.parametrize("n", [512, 530])
def test_gram_covers_every_block(monkeypatch, rng, blocks, n):
    monkeypatch.setattr(_blas_cuda, "GRAM_BLOCKS", blocks)
    x = rng.standard_normal((300, n)) + 1
    with emulated_gpu(monkeypatch):
        g = plain(_blas_cuda.gram(dev(x)))
    np.testing.assert_allclose(g, x.T @ x, rtol=1e-12, atol=1e-10)


def _spd(n):
    g = np.random.default_rng(n).standard_normal((n, n))
    return g @ g.T / n + np.eye(n)


@pytest.mark.parametrize("inner, inverted", [(0, False), (16, False), (0, True), (16, True)])
@pytest.mark.parametrize("n, panel", [(200, 64), (130, 200), (257, 32)])
def test_tensor_cholesky_blocking(monkeypatch, n, panel, inner, inverted):
    a = _spd(n)
    with emulated_gpu(monkeypatch):
        w = dev(np.asfortranarray(a.astype(np.float32)))
        inverses = []
        code = _cholesky_tensor_cuda.factor(w, panel, inner, inverted, inverses)
        low = np.tril(plain(w).astype(np.float64))
        invs = [plain(v) for v in inverses]
    assert code == 0
    np.testing.assert_allclose(low, np.linalg.cholesky(a), atol=2e-5 * np.abs(a).max())
    assert len(invs) == (-(-n // panel) if inverted else 0)
    for i, v in enumerate(invs):
        d = low[i * panel:(i + 1) * panel, i * panel:(i + 1) * panel]
        np.testing.assert_allclose(v @ d, np.eye(len(d)), atol=1e-4)


@pytest.mark.parametrize("inner, inverted", [(0, False), (8, True)])
def test_tensor_cholesky_reports_the_failing_minor(monkeypatch, inner, inverted):
    a = np.eye(150)
    a[100, 100] = -1.0
    with emulated_gpu(monkeypatch):
        assert _cholesky_tensor_cuda.factor(dev(np.asfortranarray(a.astype(np.float32))),
                                            32, inner, inverted) == 101


@pytest.mark.parametrize("n, panel", [(200, 64), (128, 64), (50, 64)])
def test_tensor_solve_by_inverted_blocks(monkeypatch, n, panel):
    a = _spd(n)
    b = np.random.default_rng(4).standard_normal((n, 2))
    with emulated_gpu(monkeypatch):
        w = dev(np.asfortranarray(a.astype(np.float32)))
        inverses = []
        assert _cholesky_tensor_cuda.factor(w, panel, 0, True, inverses) == 0
        x = plain(_cholesky_tensor_cuda.solve(w, inverses, dev(b.astype(np.float32))))
    assert x.dtype == np.float32
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-4, atol=1e-4)
