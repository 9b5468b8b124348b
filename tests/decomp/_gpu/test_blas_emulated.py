"""The cuBLAS glue of the blocked factorizations on the emulated cuBLAS/cuSOLVER (every run,
no GPU): the block-triangle Gram matrix (every block, both triangles) and the TF32 Cholesky's
blocking (panels, views, the failing minor), whose products the emulator makes in float32."""

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


@pytest.mark.parametrize("n, panel", [(200, 64), (130, 200), (257, 32)])
def test_tensor_cholesky_blocking(monkeypatch, n, panel):
    g = np.random.default_rng(n).standard_normal((n, n))
    a = g @ g.T / n + np.eye(n)
    with emulated_gpu(monkeypatch):
        w = dev(np.asfortranarray(a.astype(np.float32)))
        code = _cholesky_tensor_cuda.factor(w, panel)
        low = np.tril(plain(w).astype(np.float64))
    assert code == 0
    np.testing.assert_allclose(low, np.linalg.cholesky(a), atol=2e-5 * np.abs(a).max())


def test_tensor_cholesky_reports_the_failing_minor(monkeypatch):
    a = np.eye(150)
    a[100, 100] = -1.0
    with emulated_gpu(monkeypatch):
        assert _cholesky_tensor_cuda.factor(dev(np.asfortranarray(a.astype(np.float32))),
                                            32) == 101
