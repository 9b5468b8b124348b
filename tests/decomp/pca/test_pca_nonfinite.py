"""A NaN or infinity in NumPy input raises scikit-learn's ``ValueError`` from every PCA call,
whichever engine reads the data: the host, the GPU after the upload, or a streamed pass."""

import numpy as np
import pytest

import gpulinalg

pytest.importorskip("sklearn")
from gpulinalg.decomp import PCA  # noqa: E402

MESSAGE = r"Input X contains NaN or infinity \(PCA does not accept missing values\)\."


def _bad(value, where):
    X = np.random.default_rng(0).standard_normal((3000, 12)).astype(np.float32)
    X[where] = value
    return X


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [(0, 0), (2999, 11), (1500, 5)])
@pytest.mark.parametrize("solver", ["covariance_eigh", "full", "randomized", "arpack"])
def test_fit_and_fit_transform_refuse(backend, value, where, solver):
    X = _bad(value, where)
    for call in (PCA(3, svd_solver=solver).fit, PCA(3, svd_solver=solver).fit_transform):
        with pytest.raises(ValueError, match=MESSAGE):
            call(X)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_transform_and_score_samples_refuse(backend, value):
    pca = PCA(3).fit(_bad(0.0, (0, 0)))
    for call in (pca.transform, pca.score_samples, pca.score):
        with pytest.raises(ValueError, match=MESSAGE):
            call(_bad(value, (10, 3)))


@pytest.mark.gpu
@pytest.mark.parametrize("solver", ["covariance_eigh", "randomized"])
def test_streamed_gpu_fit_refuses(solver):
    with gpulinalg.config(backend="gpu", vram_headroom=0.999), \
            pytest.raises(ValueError, match=MESSAGE):
        PCA(3, svd_solver=solver, random_state=0).fit(_bad(np.nan, (2000, 4)))
    assert gpulinalg.last_run().backend == "gpu-out-of-core"


@pytest.mark.gpu
def test_gpu_route_checks_on_the_device(monkeypatch):
    from gpulinalg._runtime import arrays, validation
    seen, real = [], validation.all_finite
    monkeypatch.setattr(validation, "all_finite", lambda a: seen.append(arrays.kind_of(a)) or
                        real(a))
    X = _bad(0.0, (0, 0))
    with gpulinalg.config(backend="gpu"):
        scores = PCA(3, svd_solver="covariance_eigh").fit_transform(X)
    assert gpulinalg.last_run().backend == "gpu"
    assert arrays.Kind.CUPY in seen and arrays.Kind.NUMPY not in seen  # no host pass over X
    assert isinstance(scores, np.ndarray) and np.isfinite(scores).all()
