"""``decomp.TruncatedSVD``: scikit-learn's estimator checks, the same fitted attributes as
scikit-learn's class for dense and sparse input, pipelines and pandas output (scikit-learn's own
``test_truncated_svd.py`` runs in tests/conformance)."""

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("sklearn")

from sklearn.decomposition import TruncatedSVD as SklearnTruncatedSVD  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from gpulinalg.decomp import TruncatedSVD  # noqa: E402


@parametrize_with_checks([TruncatedSVD(random_state=0)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("algorithm", ["randomized", "arpack"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_same_attributes_as_sklearn(rng, algorithm, sparse, dtype, backend):
    X = rng.standard_normal((80, 12)) @ np.diag(np.linspace(5, 0.5, 12))
    X = (sp.csr_matrix(X * (np.abs(X) > 0.5)) if sparse else X).astype(dtype)
    kw = dict(n_components=4, algorithm=algorithm, random_state=0)
    ours, theirs = TruncatedSVD(**kw), SklearnTruncatedSVD(**kw)
    got, want = ours.fit_transform(X), theirs.fit_transform(X)
    tol = 1e-4 if dtype == np.float32 else 1e-9
    assert got.dtype == want.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    for name in ("components_", "explained_variance_", "explained_variance_ratio_",
                 "singular_values_"):
        np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), rtol=tol,
                                   atol=tol * np.abs(getattr(theirs, name)).max())
    np.testing.assert_allclose(ours.transform(X), theirs.transform(X), rtol=tol,
                               atol=tol * np.abs(want).max())


def test_in_a_pipeline_with_pandas_output(rng):
    pd = pytest.importorskip("pandas")
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    frame = pd.DataFrame(rng.standard_normal((30, 5)), columns=list("abcde"))
    pipe = make_pipeline(StandardScaler(), TruncatedSVD(2, random_state=0))
    pipe.set_output(transform="pandas")
    out = pipe.fit_transform(frame)
    assert list(out.columns) == ["truncatedsvd0", "truncatedsvd1"]
    assert list(pipe[-1].feature_names_in_) == list("abcde")


def test_too_many_components_is_refused(rng):
    with pytest.raises(ValueError, match="n_components"):
        TruncatedSVD(13).fit(rng.standard_normal((20, 12)))


def test_refused_input_is_named_and_recorded():
    """A bfloat16 tensor gets the library's refusal (torch's own message named a ScalarType),
    and a refused fit or transform leaves its own record, not the previous call's."""
    import gpulinalg
    torch = pytest.importorskip("torch")
    x = torch.randn(20, 5).to(torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16 input is not supported"):
        TruncatedSVD(2).fit(x)
    rec = gpulinalg.last_run()
    assert rec.op == "decomp.TruncatedSVD.fit_transform" and rec.backend == "none"
    fitted = TruncatedSVD(2, random_state=0).fit(np.random.default_rng(0).random((20, 5)))
    with pytest.raises(TypeError, match="bfloat16"):
        fitted.transform(x)
    assert gpulinalg.last_run().op == "decomp.TruncatedSVD.transform"
    with pytest.raises(ValueError):
        TruncatedSVD(2).fit(np.ones(3))
    assert "raised before running" in gpulinalg.last_run().reason


def _tensor_cases():
    """(name, to-package function) of the packages a fit keeps its attributes in."""
    cases = []
    try:
        import torch
        cases.append(pytest.param(lambda a: torch.from_numpy(a), torch.Tensor, id="torch"))
        cases.append(pytest.param(lambda a: torch.from_numpy(a).cuda(), torch.Tensor,
                                  id="torch-cuda", marks=pytest.mark.gpu))
    except ImportError:
        pass
    cases.append(pytest.param("cupy", None, id="cupy", marks=pytest.mark.gpu))
    return cases


def _to_numpy(a):
    return a.get() if hasattr(a, "get") else a.cpu().numpy() if hasattr(a, "cpu") else a


@pytest.mark.parametrize("algorithm", ["randomized", "arpack"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("make, cls", _tensor_cases())
def test_device_arrays_stay_in_their_package(rng, make, cls, dtype, algorithm):
    """CuPy and torch input: the fit, its attributes and every projection in that package
    (and device), equal to the NumPy fit of the same data."""
    if make == "cupy":
        if not __import__("gpulinalg").gpu_available():
            pytest.skip("needs an NVIDIA GPU")
        import cupy
        make, cls = cupy.asarray, cupy.ndarray
    X = (rng.standard_normal((120, 10)) @ np.diag(np.linspace(6, 0.3, 10))).astype(dtype)
    kw = dict(n_components=3, algorithm=algorithm, random_state=0)
    ours, ref = TruncatedSVD(**kw), TruncatedSVD(**kw)
    Z, want = ours.fit_transform(make(X)), ref.fit_transform(X)
    tol = 1e-4 if dtype == np.float32 else 1e-9
    assert isinstance(Z, cls) and _to_numpy(Z).dtype == dtype
    np.testing.assert_allclose(_to_numpy(Z), want, rtol=tol, atol=tol * np.abs(want).max())
    for name in ("components_", "explained_variance_", "explained_variance_ratio_",
                 "singular_values_"):
        got = getattr(ours, name)
        assert isinstance(got, cls), name
        np.testing.assert_allclose(_to_numpy(got), getattr(ref, name), rtol=tol,
                                   atol=tol * np.abs(getattr(ref, name)).max())
    projected = ours.transform(make(X))
    assert isinstance(projected, cls)
    np.testing.assert_allclose(_to_numpy(projected), want, rtol=tol,
                               atol=tol * np.abs(want).max())
    back = ours.inverse_transform(Z)
    assert isinstance(back, cls)
    np.testing.assert_allclose(_to_numpy(back), ref.inverse_transform(want), rtol=tol,
                               atol=tol * np.abs(X).max())
    # NumPy data through a model fitted on another package: NumPy out
    assert isinstance(ours.transform(X), np.ndarray)


def test_tensor_input_keeps_the_checks():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="minimum of 2 is required by TruncatedSVD"):
        TruncatedSVD(1).fit(torch.ones(5, 1))
    with pytest.raises(ValueError, match=r"n_components\(4\) must be <= n_features\(3\)"):
        TruncatedSVD(4).fit(torch.ones(5, 3))
    with pytest.raises(ValueError, match="NaN"):
        TruncatedSVD(1).fit(torch.tensor([[1.0, float("nan")], [1.0, 2.0], [3.0, 4.0]]))
    fitted = TruncatedSVD(2, random_state=0).fit(torch.randn(20, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="X has 4 features"):
        fitted.transform(torch.randn(3, 4, dtype=torch.float64))
    z = TruncatedSVD(2, random_state=0).fit_transform(torch.arange(30).reshape(10, 3))
    assert z.dtype == torch.float64  # integers computed in float64, as scikit-learn
