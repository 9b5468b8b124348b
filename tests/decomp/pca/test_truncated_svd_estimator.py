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
