"""GP predictions against scikit-learn's formulas, computed here in float64 with NumPy/SciPy:
``mean = K(X*, X) alpha``, ``alpha = K^-1 y``, ``std = sqrt(diag k(X*) - |L^-1 K(X, X*)|^2)``.

On the CPU at a small ``n``, through the estimator and through the tiled code path (the kernel
matrix built, checked and factored in many row tiles, in place; predict in many query
blocks) that an exact GP at n = 100 000 takes on the GPU, forced by the kernel plan's tile
sizes. On the GPU at n = 20 000 (``gpu`` mark).
"""

import numpy as np
import pytest
import scipy.linalg
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

import gpulinalg
from gpulinalg.decomp.cholesky._cholesky_host import _potrf_threads
from gpulinalg.gp import GaussianProcessRegressor, _engine_host, _fit_xp, _solve_xp
from gpulinalg.gp._kernels_xp import BLOCK_ELEMENTS, compile_kernel
from gpulinalg.gp._regressor_api import _Training

D = 6


def problem(n, m, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, D))
    xq = rng.uniform(0, 1, (m, D))
    y = np.sin(2 * np.pi * x @ np.linspace(0.2, 0.6, D)) + 0.1 * rng.standard_normal(n)
    kernel = ConstantKernel(1.3) * RBF(np.linspace(0.4, 1.2, D)) + WhiteKernel(0.1)
    return x, y, xq, kernel


def kernel_matrix(x, kernel):
    """``kernel(x)`` for ``problem``'s ``C * RBF(ARD) + White`` by scikit-learn's formula
    (``c exp(-|x/l - x'/l|^2 / 2) + w I``) in one ``n x n`` array: SciPy's ``cdist``, then
    in place. At n = 20 000 on a 2-core CPU it took 2.4 s where ``kernel(x)`` (pdist,
    squareform and an ``n x n`` temporary per kernel operator) took 25 s."""
    from scipy.spatial.distance import cdist
    c, ls = kernel.k1.k1.constant_value, kernel.k1.k2.length_scale
    xs = x / ls
    K = cdist(xs, xs, "sqeuclidean")
    K *= -0.5
    np.exp(K, out=K)
    K *= c
    K.reshape(-1)[::K.shape[0] + 1] += kernel.k2.noise_level
    return K


def reference(x, y, xq, kernel, alpha=1e-10):
    """scikit-learn's posterior mean and standard deviation, in float64 on the CPU (one
    Cholesky of the kernel matrix, made by :func:`kernel_matrix`)."""
    K = kernel_matrix(x, kernel)
    K[np.diag_indices_from(K)] += alpha
    with _potrf_threads(len(K)):  # OpenBLAS's two-thread potrf crashes at n = 20000
        L = scipy.linalg.cholesky(K, lower=True, overwrite_a=True, check_finite=False)
    a = scipy.linalg.cho_solve((L, True), y, check_finite=False)
    kq = kernel(xq, x)
    v = scipy.linalg.solve_triangular(L, kq.T, lower=True, check_finite=False)
    return kq @ a, np.sqrt(kernel.diag(xq) - (v * v).sum(axis=0))


def rel(a, b):
    return float(np.abs(np.asarray(a) - b).max() / np.abs(b).max())


def test_reference_kernel_matrix_is_scikit_learns():
    x, _, _, kernel = problem(150, 1, seed=4)
    np.testing.assert_allclose(kernel_matrix(x, kernel), kernel(x), rtol=1e-13, atol=1e-15)


def test_predict_matches_the_formulas_on_cpu():
    x, y, xq, kernel = problem(400, 60)
    mean_r, std_r = reference(x, y, xq, kernel)
    with gpulinalg.config(backend="cpu"):
        gp = GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
        mean, std = gp.predict(xq, return_std=True)
    assert rel(mean, mean_r) < 1e-8 and rel(std, std_r) < 1e-8


@pytest.mark.parametrize("rows", [1, 7, 400])
def test_tiled_path_matches_the_formulas(rows):
    """The n = 100 000 path at n = 300: kernel tiles of ``rows`` rows, query blocks of 11
    points, the factor made in place in the kernel matrix's own memory."""
    x, y, xq, kernel = problem(300, 50, seed=1)
    mean_r, std_r = reference(x, y, xq, kernel)
    plan = compile_kernel(kernel, D, block_elements=rows * 300, predict_elements=11 * 300)
    assert len(plan._rows(300, 300)) == -(-300 // rows)
    train = _Training(x, None, None, keep=True)
    res = _fit_xp.fit_body(_engine_host, x, y, 1e-10, None, train, plan=plan, jitter=None)
    assert res.L is None and train.L is not None and train.device is None
    assert np.allclose(np.triu(train.L, 1), 0)
    mean, std = _fit_xp.predict_body(_engine_host, xq, x, train.L, res.alpha, np.ones(1),
                                     np.zeros(1), None, None, None, plan=plan, mode="std")
    assert rel(mean, mean_r) < 1e-8 and rel(std, std_r) < 1e-8
    assert len(_fit_xp._query_rows(50, 300, plan)) == 5


def test_tiled_kernel_matrix_equals_one_block():
    x, _, _, kernel = problem(90, 1)
    one = compile_kernel(kernel, D).matrix(x)
    tiles = compile_kernel(kernel, D, block_elements=90 * 4).matrix(x)
    np.testing.assert_array_equal(tiles, one)
    np.testing.assert_allclose(one, kernel(x), rtol=1e-12, atol=1e-14)


def test_factor_in_place_no_second_buffer():
    x, _, _, kernel = problem(120, 1)
    K = compile_kernel(kernel, D).matrix(x)
    ref = np.linalg.cholesky(K)
    L, used = _solve_xp.cholesky_jitter(_engine_host, K, None, overwrite_k=True,
                                        symmetric=True)
    assert used == 0.0 and np.shares_memory(L, K)
    np.testing.assert_allclose(L, ref, rtol=1e-12, atol=1e-14)


def test_nan_in_tiles_is_reported():
    x, y, _, kernel = problem(50, 1)
    x[37, 2] = np.nan
    plan = compile_kernel(kernel, D, block_elements=50 * 3)
    with pytest.raises(ValueError, match="NaN or Inf"):
        _fit_xp.fit_body(_engine_host, x, y, 1e-10, None, _Training(x, None, None, True),
                         plan=plan, jitter=None)


def test_bad_tile_sizes():
    with pytest.raises(ValueError, match="block_elements"):
        compile_kernel(RBF(), 2, block_elements=0)


def test_factor_set_through_L_is_used_by_predict():
    x, y, xq, kernel = problem(60, 5)
    with gpulinalg.config(backend="cpu"):
        gp = GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
        m0 = gp.predict(xq, return_std=True)
        gp.L_ = gp.L_.copy()
        np.testing.assert_allclose(gp.predict(xq, return_std=True), m0, rtol=1e-12)


@pytest.mark.gpu
def test_predict_at_20000_matches_the_formulas(xp_gpu):
    """n = 20 000 on the GPU against the formulas in float64 on the CPU, on 200 query points;
    the fit keeps the factor on the GPU (no second n x n buffer: the pool's high-water mark
    stays under one kernel matrix plus its row tiles), and the first predict uploads nothing.

    The CPU reference runs first, on one BLAS thread past order 16384: OpenBLAS's two-thread
    ``potrf`` segfaults at this order (``_cholesky_host.TWO_THREAD_LIMIT``)."""
    n = 20000
    x, y, xq, kernel = problem(n, 200, seed=2)
    mean_r, std_r = reference(x, y, xq, kernel)
    pool = xp_gpu.get_default_memory_pool()
    pool.free_all_blocks()
    base = pool.total_bytes()
    with gpulinalg.config(backend="gpu"):
        gp = GaussianProcessRegressor(kernel, optimizer=None).fit(x, y)
        peak = pool.total_bytes() - base
        assert gp._fitted.device is not None
        mean, std = gp.predict(xq, return_std=True)
        assert "uploaded_training_bytes" not in gpulinalg.last_run().details
    # one kernel matrix and the row tiles it is built from; a second n x n buffer: + 8 n^2
    assert peak < 8 * n * n + 7 * 8 * BLOCK_ELEMENTS, peak
    corner = xp_gpu.asnumpy(gp._fitted.device[1][:50, :50])  # L_ without its 3.2 GB read
    assert rel(mean, mean_r) < 1e-8, rel(mean, mean_r)
    assert rel(std, std_r) < 1e-8, rel(std, std_r)
    assert np.allclose(np.triu(corner, 1), 0) and (np.diag(corner) > 0).all()


@pytest.mark.gpu
def test_tiled_path_on_gpu(xp_gpu):
    """The same code with small tiles on the GPU agrees with the default tiles."""
    from gpulinalg._runtime.streams import op_stream
    from gpulinalg.gp import _engine_cuda
    x, y, xq, kernel = problem(3000, 300, seed=3)
    out = []
    for rows, query in ((None, None), (37, 101)):
        kw = {} if rows is None else dict(block_elements=rows * 3000,
                                          predict_elements=query * 3000)
        plan = compile_kernel(kernel, D, **kw)
        xd, yd, qd = (xp_gpu.asarray(v) for v in (x, y, xq))
        train = _Training(x, None, None, keep=True)
        # the bodies on the thread's library stream, as the dispatcher runs them (the kernel
        # builds on CuPy's current stream would race the in-place factorization otherwise)
        with op_stream():
            res = _fit_xp.fit_body(_engine_cuda, xd, yd, 1e-10, None, train, plan=plan,
                                   jitter=None)
            _, L, a = train.device
            mean, std = _fit_xp.predict_body(_engine_cuda, qd, xd, L, a, xp_gpu.ones(1),
                                             xp_gpu.zeros(1), None, None, None, plan=plan,
                                             mode="std")
        out.append((xp_gpu.asnumpy(mean), xp_gpu.asnumpy(std), res.log_marginal_likelihood))
    assert rel(out[1][0], out[0][0]) < 1e-10 and rel(out[1][1], out[0][1]) < 1e-10
    assert abs(out[1][2] - out[0][2]) <= 1e-10 * abs(out[0][2])
