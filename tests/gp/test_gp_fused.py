"""The fused GPU likelihood + gradient (``gp._fused_cuda``) for kernels ``c * s(r) + w I``:
its form detection and the sums it reduces (on the CPU, in NumPy), and on the GPU against
the CPU engine and scikit-learn."""

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor as SKGPR
from sklearn.gaussian_process.kernels import (RBF, ConstantKernel as C, DotProduct, Matern,
                                              RationalQuadratic, WhiteKernel as W)

from gpulinalg._runtime import arrays as _arrays
from gpulinalg.decomp._engines import custom_kernels_enabled
from gpulinalg.gp._kernels_xp import compile_kernel, fused_form

FORMS = {
    "c*rbf-ard+w": lambda d: C(1.3) * RBF(np.linspace(0.6, 1.4, d)) + W(0.2),
    "w+rbf*c": lambda d: W(0.1) + RBF(0.8) * C(0.7),
    "rbf": lambda d: RBF(1.1),
    "matern05+w": lambda d: Matern(0.9, nu=0.5) + W(0.3),
    "c*matern15-ard": lambda d: C(2.0) * Matern(np.linspace(0.5, 1.5, d), nu=1.5),
    "matern25+w-fixed": lambda d: Matern(1.2, nu=2.5) + W(0.1, "fixed"),
    "c-fixed*matern-inf+w": lambda d: C(1.5, "fixed") * Matern([1.0] * d, nu=np.inf) + W(0.05),
}


def _sums(k, x, y, noise):
    """The fused contraction's sums, in NumPy from their definitions."""
    form = fused_form(compile_kernel(k, x.shape[1]), x.shape[1])
    z = x * form.inv_ls
    diff = z[:, None, :] - z[None, :, :]
    r2 = (diff ** 2).sum(-1)
    r = np.sqrt(r2)
    s, h = {0: (np.exp(-0.5 * r2), np.exp(-0.5 * r2)),
            1: (np.exp(-r), np.where(r > 0, np.exp(-r) / np.where(r > 0, r, 1), 0)),
            2: ((1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r), 3 * np.exp(-np.sqrt(3) * r)),
            3: ((1 + np.sqrt(5) * r + 5 * r2 / 3) * np.exp(-np.sqrt(5) * r),
                5 / 3 * (1 + np.sqrt(5) * r) * np.exp(-np.sqrt(5) * r))}[form.kind]
    K = form.c * s + np.diag(form.white + noise * np.ones(len(x)))
    y2 = y.reshape(len(x), -1)
    kinv = np.linalg.inv(K)
    a = kinv @ y2
    w = a @ a.T - y2.shape[1] * kinv
    acc = np.concatenate([[(w * form.c * s).sum()],
                          np.einsum("ij,ijd->d", w * form.c * h, diff ** 2), [np.trace(w)]])
    return form, K, acc


@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("t", [None, 2])
def test_fused_sums_give_sklearns_gradient(name, t, rng):
    x = rng.uniform(-1, 1, (40, 3))
    y = np.sin(3 * x[:, 0]) + 0.1 * rng.standard_normal(40)
    if t:
        y = np.stack([y, 2 * y + 1], axis=1)
    k = FORMS[name](3)
    form, K, acc = _sums(k, x, y, 1e-6)
    np.testing.assert_allclose(K, k(x) + 1e-6 * np.eye(40), rtol=1e-12, atol=1e-13)
    ref = SKGPR(k, alpha=1e-6, optimizer=None).fit(x, y)
    _, grad = ref.log_marginal_likelihood(k.theta, eval_gradient=True)
    got = form.gradient(acc)
    assert got.shape == grad.shape
    np.testing.assert_allclose(got, grad, rtol=1e-7, atol=1e-9 * np.abs(grad).max())


@pytest.mark.parametrize("kernel", [RBF() + RBF(), RationalQuadratic(), C() * C(),
                                    C() * RBF() * DotProduct(), RBF() * Matern(),
                                    Matern(nu=0.7), C() * (RBF() + W())])
def test_fused_form_declines(kernel):
    plan = compile_kernel(kernel, 2)
    assert plan is None or fused_form(plan, 2) is None


def test_fused_form_declines_wide_inputs():
    assert fused_form(compile_kernel(RBF(), 33), 33) is None
    assert fused_form(compile_kernel(RBF(), 32), 32) is not None


# -- on the GPU --------------------------------------------------------------------------------

def _spy(monkeypatch):
    """The calls of the fused kernel (it runs only where the hand-written kernels are on)."""
    from gpulinalg.gp import _fused_cuda
    calls = []
    real = _fused_cuda.lml_grad

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(_fused_cuda, "lml_grad", spy)
    return calls


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("n, d, t", [(1, 2, None), (37, 2, None), (700, 6, 2), (2113, 6, None)])
def test_fused_gpu_matches_cpu_engine(name, n, d, t, rng, xp_gpu, monkeypatch):
    from gpulinalg._runtime.streams import op_stream
    from gpulinalg.gp import _engine_cuda, _engine_host
    calls = _spy(monkeypatch)
    x = rng.uniform(-1, 1, (n, d))
    y = np.sin(3 * x[:, 0]) + 0.1 * rng.standard_normal(n)
    if t:
        y = np.stack([y, 2 * y + 1], axis=1)
    noise = 1e-4 if n != 700 else rng.uniform(1e-4, 1e-3, n)
    k = FORMS[name](d)
    plan = compile_kernel(k, d)
    lml_c, grad_c = _engine_host.log_marginal_likelihood(x, y, noise, None, None, plan=plan,
                                                         eval_gradient=True)
    with op_stream():
        args = (xp_gpu.asarray(x), xp_gpu.asarray(y),
                noise if np.isscalar(noise) else xp_gpu.asarray(noise), None, None)
        for _ in range(2):
            lml_g, grad_g = _engine_cuda.log_marginal_likelihood(*args, plan=plan,
                                                                 eval_gradient=True)
            assert abs(lml_g - lml_c) <= 1e-9 * max(abs(lml_c), 1.0), (lml_g, lml_c)
            scale = max(np.linalg.norm(grad_c), 1.0)
            grad_g = _arrays.to_host(grad_g)  # the fused kernel answers on the host
            assert np.abs(grad_g - grad_c).max() <= 1e-7 * scale, (grad_g, grad_c)
    assert len(calls) == (2 if custom_kernels_enabled() else 0)


@pytest.mark.gpu
def test_fused_gpu_not_positive_definite_and_nonfinite(rng, xp_gpu, monkeypatch):
    from gpulinalg._runtime.streams import op_stream
    from gpulinalg.gp import _engine_cuda
    calls = _spy(monkeypatch)
    x = np.repeat(rng.uniform(-1, 1, (50, 2)), 2, axis=0)  # duplicated points, no noise
    y = rng.standard_normal(100)
    plan = compile_kernel(C(1.0) * RBF([1.0, 1.0]) + W(1e-5, "fixed"), 2)
    plan_bad = compile_kernel(C(1.0) * RBF([1.0, 1.0]), 2)
    with op_stream():
        xd, yd = xp_gpu.asarray(x), xp_gpu.asarray(y)
        lml, grad = _engine_cuda.log_marginal_likelihood(xd, yd, -1.0, None, None, plan=plan,
                                                         eval_gradient=True)
        assert lml == -np.inf and grad.shape == (3,) and not grad.any()
        xn = xd.copy()
        xn[3, 0] = np.inf
        with pytest.raises(ValueError, match="NaN or Inf"):
            _engine_cuda.log_marginal_likelihood(xn, yd, 1e-2, None, None, plan=plan_bad,
                                                 eval_gradient=True)
    assert len(calls) == (2 if custom_kernels_enabled() else 0)


@pytest.mark.gpu
def test_fused_fit_matches_sklearn(rng, xp_gpu):
    import gpulinalg
    from gpulinalg.gp import GaussianProcessRegressor
    x = rng.uniform(0, 1, (800, 6))
    y = np.sin(2 * np.pi * x @ np.linspace(0.1, 0.4, 6)) + 0.1 * rng.standard_normal(800)
    k = C(1.0) * RBF(np.ones(6)) + W(1.0)
    with gpulinalg.config(backend="gpu"):
        gp = GaussianProcessRegressor(k).fit(x, y)
    ref = SKGPR(k).fit(x, y)
    assert abs(gp.log_marginal_likelihood_value_ - ref.log_marginal_likelihood_value_) <= \
        1e-6 * abs(ref.log_marginal_likelihood_value_)
