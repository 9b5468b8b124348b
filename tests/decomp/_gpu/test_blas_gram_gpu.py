"""``_blas_cuda.gram``: the Gram matrix by GEMMs over its lower block triangle, mirrored,
against the plain product in float64 (every entry, both triangles), and the inputs it leaves
to the plain product."""

import numpy as np
import pytest

from gpulinalg._runtime.streams import get_stream
from gpulinalg.decomp._gpu import _blas_cuda

pytestmark = pytest.mark.gpu


def _gram(xp, x):
    with get_stream():
        g = _blas_cuda.gram(x)
        get_stream().synchronize()
    return g


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-5), (np.float64, 1e-13)])
@pytest.mark.parametrize("m, n", [(3000, 512), (2000, 1000), (700, 1031), (1, 600)])
def test_gram_is_the_product(xp_gpu, rng, dtype, tol, m, n):
    x = rng.standard_normal((m, n)).astype(dtype) + 2
    g = _gram(xp_gpu, xp_gpu.asarray(x))
    assert g.dtype == dtype and g.shape == (n, n)
    got, ref = xp_gpu.asnumpy(g), x.astype(np.float64).T @ x.astype(np.float64)
    np.testing.assert_array_equal(got, got.T)
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()


@pytest.mark.parametrize("case", ["narrow", "fortran", "complex", "int"])
def test_other_inputs_take_the_plain_product(xp_gpu, rng, case):
    x = rng.standard_normal((100, 600))
    x = {"narrow": x[:, :_blas_cuda.GRAM_MIN - 1], "fortran": np.asfortranarray(x),
         "complex": x + 1j * x, "int": x.astype(np.int64)}[case]
    assert _gram(xp_gpu, xp_gpu.asarray(x, order="K")) is None
