"""Calls refused before anything runs say so clearly and are recorded: a refused call never
leaves the previous call's record standing, and its error names what was wrong."""

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg import decomp


def test_refused_call_is_recorded_not_the_previous_one():
    decomp.qr(np.ones((3, 2)))
    with pytest.raises(TypeError):
        decomp.svd(np.ones((2, 2), dtype=object))
    rec = gpulinalg.last_run()
    assert rec.op == "decomp.svd" and rec.backend == "none"
    assert "TypeError" in rec.details["raised"]


def test_scipy_batched_cho_factor_feeds_cho_solve_and_logdet(backend):
    a = np.stack([np.eye(3) * 2 + 0.1, np.eye(3) * 3 + 0.2])
    factor = scipy.linalg.cho_factor(a)
    b = np.ones((2, 3, 1))
    np.testing.assert_allclose(decomp.cho_solve(factor, b), np.linalg.solve(a, b), rtol=1e-12)
    np.testing.assert_allclose(decomp.logdet_cholesky(factor), np.linalg.slogdet(a)[1],
                               rtol=1e-12)


def test_mixed_lower_flags_are_refused():
    c = np.stack([np.eye(2), np.eye(2)])
    with pytest.raises(ValueError, match="one flag"):
        decomp.cho_solve((c, np.array([True, False])), np.ones((2, 2, 1)))


def test_bfloat16_is_refused_by_name():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(TypeError, match="bfloat16"):
        decomp.qr(np.ones((3, 3), dtype=ml_dtypes.bfloat16))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="bfloat16"):
        decomp.svd(torch.ones(3, 3, dtype=torch.bfloat16))


def test_gpr_alpha_with_nan_is_named():
    pytest.importorskip("sklearn")
    from gpulinalg.gp import GaussianProcessRegressor
    with pytest.raises(ValueError, match="alpha must not contain"):
        GaussianProcessRegressor(alpha=np.array([np.nan, 1.0, 1.0])).fit(
            np.arange(3.0)[:, None], np.ones(3))


def test_det_names_bfloat16_not_its_stand_in():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="bfloat16") as info:
        decomp.det(torch.eye(3, dtype=torch.bfloat16))
    assert "V2" not in str(info.value)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(TypeError, match="bfloat16"):
        decomp.det(np.eye(3, dtype=ml_dtypes.bfloat16))
    with pytest.raises(TypeError, match=r"cannot be cast to float\(32, 64\)"):
        decomp.det(np.zeros((2, 2), dtype="V8"))  # a plain void array: SciPy's message


@pytest.mark.parametrize("call", [
    lambda m: gpulinalg.dense.matmul(m, np.ones((3, 3))),
    lambda m: gpulinalg.dense.matmul_backward(np.ones((3, 3)), m, np.ones((3, 3))),
], ids=["matmul", "matmul_backward"])
def test_dense_refused_masked_call_is_recorded(call):
    decomp.qr(np.ones((3, 2)))
    with pytest.raises(ValueError, match="masked arrays are not supported"):
        call(np.ma.masked_array(np.ones((3, 3)), mask=np.eye(3, dtype=bool)))
    rec = gpulinalg.last_run()
    assert rec.op.startswith("dense.matmul") and rec.backend == "none"
    assert "masked" in rec.details["raised"]


@pytest.mark.parametrize("alpha", [np.inf, -np.inf, np.nan, -1.0])
def test_gpr_scalar_alpha_not_finite_is_named(alpha):
    pytest.importorskip("sklearn")
    from gpulinalg.gp import GaussianProcessRegressor
    with pytest.raises(ValueError, match="alpha must be finite and >= 0"):
        GaussianProcessRegressor(alpha=alpha).fit(np.arange(3.0)[:, None], np.ones(3))


@pytest.mark.parametrize("layer", ["FusedLinear", "FusedMLP"])
def test_fused_layers_refuse_a_numpy_array_by_name_and_record_it(layer):
    pytest.importorskip("torch")
    from gpulinalg import dense
    module = dense.FusedLinear(4, 3) if layer == "FusedLinear" else dense.FusedMLP([4, 3, 2])
    decomp.qr(np.ones((3, 2)))
    with pytest.raises(TypeError, match=f"{layer} takes a torch.Tensor, got ndarray") as info:
        module(np.ones((2, 4), dtype=np.float32))
    assert "is_cuda" not in str(info.value) and info.value.__suppress_context__
    rec = gpulinalg.last_run()
    assert rec.op == f"dense.{layer}.forward" and rec.backend == "none"


def test_gpr_log_marginal_likelihood_refused_is_recorded():
    pytest.importorskip("sklearn")
    from gpulinalg.gp import GaussianProcessRegressor
    gpr = GaussianProcessRegressor().fit(np.arange(4.0)[:, None], np.ones(4))
    decomp.qr(np.ones((3, 2)))
    with pytest.raises(ValueError, match="theta"):
        gpr.log_marginal_likelihood(np.ones(7))
    rec = gpulinalg.last_run()
    assert rec.op == "gp.log_marginal_likelihood" and rec.backend == "none"
