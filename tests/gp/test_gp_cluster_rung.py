"""The last rung of ``precision="auto"``: an in-memory fit that fits nowhere here (no factor,
no matrix-free run within the host budget) moves to the active Dask cluster, visibly (a
``FallbackWarning``, the record), when no hyperparameter is to be optimized; predictions come
back as NumPy arrays. Without a client, or with an optimizer to run, the refusal stands (and
says why the cluster was not used). On the 2-worker CPU ``LocalCluster``."""

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")

from sklearn.gaussian_process.kernels import RBF, WhiteKernel  # noqa: E402

import gpulinalg  # noqa: E402
from gpulinalg import FallbackWarning  # noqa: E402
from gpulinalg.gp import GaussianProcessRegressor, _regressor_api  # noqa: E402

KERNEL = 1.5 * RBF([1.0, 2.0]) + WhiteKernel(1e-2)


def _data(rng, n=150, m=20):
    X = rng.uniform(0, 5, (n, 2))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n), rng.uniform(0, 5, (m, 2))


@pytest.fixture
def no_room(host_bytes, monkeypatch):
    """A host with room for the inputs and nothing of the kernel matrix's size; small blocks
    on the cluster (several row blocks at test sizes)."""
    host_bytes(20_000)
    monkeypatch.setattr(_regressor_api, "CLUSTER_TILE", 64)


def test_without_a_client_the_refusal_stands(rng, no_room):
    """First in the module: the module's cluster does not exist yet."""
    distributed = pytest.importorskip("distributed")
    try:
        distributed.get_client()
        pytest.skip("a Dask client is active in this process")
    except ValueError:
        pass
    X, y, _ = _data(rng)
    with gpulinalg.config(backend="cpu"):
        with pytest.raises(MemoryError, match="was not started"):
            GaussianProcessRegressor(KERNEL, optimizer=None).fit(X, y)


def test_a_fit_that_fits_nowhere_here_moves_to_the_cluster(client, rng, no_room):
    X, y, Xq = _data(rng)
    with gpulinalg.config(backend="cpu"):
        with pytest.warns(FallbackWarning, match="fitted on the active Dask cluster"):
            est = GaussianProcessRegressor(KERNEL, optimizer=None, normalize_y=True).fit(X, y)
        rec = gpulinalg.last_run()
        mean, std = est.predict(Xq, return_std=True)
    assert rec.backend == "dask" and "NumPy row blocks of 50" in rec.details["moved_to_dask"]
    assert isinstance(est.L_, da.Array) and est.precision_ == "float64"
    assert isinstance(mean, np.ndarray) and isinstance(std, np.ndarray)
    from sklearn.gaussian_process import GaussianProcessRegressor as SkGPR
    ref = SkGPR(KERNEL, optimizer=None, normalize_y=True).fit(X, y)
    mean_r, std_r = ref.predict(Xq, return_std=True)
    np.testing.assert_allclose(mean, mean_r, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(std, std_r, rtol=1e-6, atol=1e-8)
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=1e-9)


def test_an_optimizer_keeps_the_refusal_and_says_why(client, rng, no_room):
    X, y, _ = _data(rng)
    with gpulinalg.config(backend="cpu"):
        with pytest.raises(MemoryError, match="does not optimize the kernel's hyperparameters"):
            GaussianProcessRegressor(KERNEL).fit(X, y)
