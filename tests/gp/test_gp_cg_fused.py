"""The matrix-free solver's fused GPU kernels (``gp_product.cu``, :mod:`gpulinalg.gp.
_cg_fused_cuda`) against the library route (the kernel plan's row blocks,
:class:`gpulinalg.gp._mixed_xp.Operator`), and the likelihood's own tolerance
(``cg_options['lml_tol']``) on every engine."""

import types

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel as C, Matern, WhiteKernel as W

import gpulinalg
from gpulinalg.gp import CGOptions, GaussianProcessRegressor
from gpulinalg.gp._cg_fused_cuda import _SHARED, FACTOR_COLUMNS, FLOAT32_TOL, product_dtype
from gpulinalg.gp._kernels_xp import compile_kernel, fused_form

FORMS = {
    "c*rbf-ard+w": lambda d: C(1.3) * RBF(np.linspace(0.6, 1.4, d)) + W(0.2),
    "rbf": lambda d: RBF(1.1),
    "matern05+w": lambda d: Matern(0.9, nu=0.5) + W(0.3),
    "c*matern15-ard": lambda d: C(2.0) * Matern(np.linspace(0.5, 1.5, d), nu=1.5),
    "matern25": lambda d: Matern(1.2, nu=2.5),
}

#: Bound on the relative error of a sum of positive terms, by the entries' arithmetic.
RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-11}


def _data(rng, n, d):
    x = rng.uniform(-1, 1, (n, d))
    y = np.sin(3 * x[:, 0]) + 0.1 * rng.standard_normal(n)
    return x, y


def test_entries_arithmetic_follows_the_tolerance():
    assert product_dtype(FLOAT32_TOL) == np.float32
    assert product_dtype(FLOAT32_TOL / 2) == np.float64
    assert product_dtype(CGOptions().lml_tol) == np.float32
    assert product_dtype(CGOptions().tol) == np.float64


@pytest.mark.parametrize("bad", [0, 1, 1.5, -1e-3, True, "1e-2"])
def test_lml_tol_is_validated(bad):
    with pytest.raises(ValueError, match="lml_tol"):
        CGOptions(lml_tol=bad)


def test_likelihood_solves_stop_at_lml_tol_and_fit_at_tol(rng):
    """The optimizer's evaluations stop at ``lml_tol``, ``fit``'s final solve at ``tol``; the
    record says which, and the CPU's products are the library route."""
    x, y = _data(rng, 400, 2)
    k = C(1.0) * RBF(0.5) + W(0.01)
    gp = GaussianProcessRegressor(k, optimizer=None, solver="cg",
                                  cg_options={"lml_tol": 1e-1, "tol": 1e-8}).fit(x, y)
    fit_details = gpulinalg.last_run().details
    assert fit_details["tol"] == 1e-8 and fit_details["cg_residual"] <= 1e-8
    assert fit_details["cg_products"] == "library"
    loose = gp.log_marginal_likelihood(k.theta)
    loose_details = gpulinalg.last_run().details
    assert loose_details["tol"] == 1e-1
    assert loose_details["cg_iterations"] < fit_details["cg_iterations"]
    assert abs(loose - gp.log_marginal_likelihood_value_) <= \
        0.05 * abs(gp.log_marginal_likelihood_value_)


# -- the launchers on the CPU, the kernels emulated (tests/support/gp_cg_emulator.py) ------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("t, width", [(1, 4), (9, 4), (70, 130), (70, 200)])
def test_fused_launchers_emulated(dtype, t, width, rng, monkeypatch):
    """The operator's launches (column chunks past 64, padding to 8, the noise added in
    float64) and the gradient's factors (in chunks past the shared memory's columns) and
    diagonal terms, the kernels emulated from their arguments and options: the library
    route's answers."""
    from gpulinalg.gp import _engine_host
    from gpulinalg.gp._cg_fused_cuda import FusedOperator
    from gpulinalg.gp._mixed_xp import Operator
    from gpulinalg.gp._precond_xp import Preconditioner
    from tests.support.cusolver_emulator import CALLS, dev, emulated_gpu
    n, d = 150, 3
    x, _ = _data(rng, n, d)
    k = FORMS["c*rbf-ard+w"](d)
    plan = compile_kernel(k, d)
    noise = rng.uniform(1e-3, 1e-2, n)
    lib = Operator(plan, x, noise)
    v = rng.standard_normal((n, t))
    pre = Preconditioner(_engine_host, plan, x, noise, 140)
    left, right = rng.standard_normal((n, width)), rng.standard_normal((n, width))
    want = lib(v)
    gwant = lib.lml_gradient(left, right, pre, 2.0)
    CALLS.clear()
    with emulated_gpu(monkeypatch):
        fused = FusedOperator(fused_form(plan, d), dev(x), dev(noise), np.dtype(dtype),
                              library=lib)
        got = np.asarray(fused(dev(v)))
        ggot = np.asarray(fused.lml_gradient(dev(left), dev(right), pre, 2.0))
    step = _SHARED // ((128 + 1) * 4 if dtype == np.float32 else (64 + 1) * 8)
    m = width + pre.rank
    # float64 products past 64 columns, and factors past the width limit, take the library route
    assert CALLS["gp_product"] == (0 if dtype == np.float64 and t > 64 else -(-t // 64))
    assert CALLS["gp_factor_contract"] == (0 if m > FACTOR_COLUMNS[np.dtype(dtype)] else
                                           -(-m // step))
    rtol = RTOL[np.dtype(dtype)]
    assert np.all(np.abs(got - want) <= rtol * lib(np.abs(v)))
    np.testing.assert_allclose(ggot, gwant, rtol=1e-3 if dtype == np.float32 else 1e-9,
                               atol=1e-6 * np.abs(gwant).max())


def _pivot_data(rng, n, d, distinct):
    """``n`` points of ``d`` dimensions, only ``distinct`` of them different where given (a
    kernel matrix of that rank): the factorization stops there."""
    x, _ = _data(rng, n, d)
    return x if distinct is None else x[rng.integers(0, distinct, n)]


@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("n, rank, distinct", [(1, 5, None), (600, 45, None), (300, 70, 5)])
def test_fused_pivoted_cholesky_emulated(name, n, rank, distinct, rng, monkeypatch):
    """The preconditioner's factorization by ``gp_pivot.cu``'s two launches a step, emulated
    from their arguments: the library route's pivots, factor and remaining diagonal, the stop
    at the kernel's rank (read back every ``CHECK_EVERY`` steps), through the GPU engine only
    where the hand-written kernels are on."""
    from gpulinalg.gp import _engine_cuda
    from gpulinalg.gp._precond_xp import CHECK_EVERY, pivoted_cholesky
    from tests.support.cusolver_emulator import CALLS, dev, emulated_gpu, plain
    d = 3
    x = _pivot_data(rng, n, d, distinct)
    plan = compile_kernel(FORMS[name](d), d)
    shift = x.mean(axis=0)
    want_l, want_d = pivoted_cholesky(plan, x, rank, shift)
    for on in (True, False):
        CALLS.clear()
        with emulated_gpu(monkeypatch), gpulinalg.config(custom_kernels=on):
            got_l, got_d = _engine_cuda.pivoted_cholesky(plan, dev(x), rank, dev(shift))
            got_l, got_d = plain(got_l), plain(got_d)
        steps = min(rank, n) if distinct is None else \
            min(rank, -(-(distinct + 1) // CHECK_EVERY) * CHECK_EVERY)
        assert CALLS["gp_pivot_row"] == CALLS["gp_pivot_select"] == (steps if on else 0)
        assert got_l.shape == want_l.shape == (n, min(rank, n, distinct or n))
        # the same pivots (another one moves a column by O(1)); rounding grows as 1/sqrt(pivot)
        np.testing.assert_allclose(got_l, want_l, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got_d, want_d, rtol=0, atol=1e-9)


@pytest.mark.parametrize("headroom, products, tol, want", [
    (None, "auto", 1e-2, "fused"), (1e9, "auto", 1e-2, "stored float32"),
    (1e9, "auto", 1e-6, "stored float64"), (1e9, "matrix-free", 1e-2, "fused"),
    (6 * 90 ** 2, "auto", 1e-2, "stored float32"),
    (6 * 90 ** 2, "auto", 1e-6, "fused")])
def test_stored_products_emulated(headroom, products, tol, want, rng, monkeypatch):
    """The GPU engine stores the kernel matrix for a solve (``gl_gp_build`` emulated, or the
    plan's row blocks where the hand-written kernels are off) only with ``products="auto"``
    inside a dispatch whose headroom holds it in the products' arithmetic; its products and
    gradient are the library route's (the gradient's weights made in the stored matrix's
    memory and contracted by ``gl_gp_weight_contract`` emulated, where the kernels are on);
    products after the gradient raise."""
    from gpulinalg.gp import _engine_cuda, _engine_host
    from gpulinalg.gp._mixed_xp import Operator
    from gpulinalg.gp._precond_xp import Preconditioner
    from tests.support.cusolver_emulator import CALLS, dev, emulated_gpu, plain
    n, d = 90, 3
    x, _ = _data(rng, n, d)
    plan = compile_kernel(FORMS["c*rbf-ard+w"](d), d)
    noise = rng.uniform(1e-3, 1e-2, n)
    lib = Operator(plan, x, noise)
    v = rng.standard_normal((n, 5))
    pre = Preconditioner(_engine_host, plan, x, noise, 10)
    left, right = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))
    monkeypatch.setattr(_engine_cuda, "headroom_bytes", lambda: headroom)
    for on in (True, False):
        CALLS.clear()
        with emulated_gpu(monkeypatch), gpulinalg.config(custom_kernels=on):
            op = _engine_cuda.cg_operator(plan, dev(x), dev(noise), tol, products)
            got = plain(op(dev(v)))
            grad = np.asarray(op.lml_gradient(dev(left), dev(right), pre, 2.0))
        route = want if on or want.startswith("stored") else "library"
        assert op.route == (route if route != "fused" else f"fused {product_dtype(tol).name}")
        assert CALLS["gp_build"] == CALLS["gp_weight_contract"] == \
            (1 if on and route.startswith("stored") else 0)
        bound = lib(np.abs(v))
        assert np.all(np.abs(got - lib(v)) <= RTOL[product_dtype(tol)] * bound)
        np.testing.assert_allclose(grad, lib.lml_gradient(left, right, pre, 2.0), rtol=1e-3,
                                   atol=1e-9)
        if route.startswith("stored"):
            with pytest.raises(RuntimeError, match="given up"):
                op(dev(v))


# -- on the GPU ---------------------------------------------------------------------------------


def _operators(k, x, noise, dtype, xp):
    from gpulinalg.gp._cg_fused_cuda import FusedOperator
    from gpulinalg.gp._mixed_xp import Operator
    d = x.shape[1]
    plan = compile_kernel(k, d)
    xd = xp.asarray(x)
    nd = noise if np.isscalar(noise) else xp.asarray(noise)
    return Operator(plan, xd, nd), FusedOperator(fused_form(plan, d), xd, nd, dtype), plan


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, d, t", [(1, 2, 1), (37, 3, 1), (1000, 8, 17), (2113, 5, 70)])
def test_fused_product_matches_library_route(name, dtype, n, d, t, rng, xp_gpu):
    x, _ = _data(rng, n, d)
    noise = 1e-3 if n != 1000 else rng.uniform(1e-4, 1e-3, n)
    lib, fused, plan = _operators(FORMS[name](d), x, noise, np.dtype(dtype), xp_gpu)
    assert fused.route == f"fused {np.dtype(dtype).name}"
    v = rng.standard_normal((n, t))
    vd = xp_gpu.asarray(v)
    got, want = fused(vd).get(), lib(vd).get()
    # every kernel here is positive: K |v| bounds the terms of each sum
    bound = lib(xp_gpu.abs(vd)).get()
    assert got.shape == want.shape == (n, t)
    assert np.all(np.abs(got - want) <= RTOL[np.dtype(dtype)] * bound)
    one = fused(vd[:, 0]).get()  # a vector in, a vector out
    assert one.shape == (n,)
    np.testing.assert_allclose(one, got[:, 0], rtol=0, atol=1e-12 * bound[:, 0].max())


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("n, d, rank, distinct", [(1, 2, 5, None), (37, 3, 40, None),
                                                  (2113, 8, 300, None), (3000, 5, 100, 7)])
def test_fused_pivoted_cholesky_matches_library_route(name, n, d, rank, distinct, rng, xp_gpu):
    """The preconditioner's factorization by ``gp_pivot.cu`` against the library route on the
    GPU: the same pivots, factor and remaining diagonal, the same stop at the kernel's rank."""
    from gpulinalg._runtime.streams import op_stream
    from gpulinalg.gp import _engine_cuda
    x = _pivot_data(rng, n, d, distinct)
    plan = compile_kernel(FORMS[name](d), d)
    xd = xp_gpu.asarray(x)
    got = {}
    with op_stream():
        for on in (True, False):
            with gpulinalg.config(custom_kernels=on):
                L, r = _engine_cuda.pivoted_cholesky(plan, xd, rank, xd.mean(axis=0))
            got[on] = (L.get(), r.get())
    (lf, rf), (ll, rl) = got[True], got[False]
    assert lf.shape == (n, min(rank, n, distinct or n))
    if distinct is None:
        assert ll.shape == lf.shape
        np.testing.assert_allclose(rf, rl, rtol=0, atol=1e-9)
    else:  # the fused rows make r^2 = 0 exactly for equal points and stop at their rank;
        # the library's r^2 of equal points can round above 0 (Matern 1/2's sqrt lifts
        # it far above the stopping floor), so its factor may go on with rounding rows
        assert ll.shape[1] >= lf.shape[1] and float(np.abs(rf).max()) <= 1e-9
    np.testing.assert_allclose(lf, ll[:, :lf.shape[1]], rtol=0, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, d, m", [(37, 3, 2), (1000, 8, 40), (1500, 4, 300)])
def test_fused_gradient_matches_library_route(name, dtype, n, d, m, rng, xp_gpu):
    """``W = left right^T - t P^-1`` with a rank-``r`` pivoted-Cholesky ``P``: the
    contraction of the fused kernel (``W``'s factors, chunked where they are wide) against the
    library route's row blocks of ``W``."""
    from gpulinalg._runtime.streams import op_stream
    from gpulinalg.gp import _engine_cuda
    from gpulinalg.gp._precond_xp import Preconditioner
    x, _ = _data(rng, n, d)
    k = FORMS[name](d)
    lib, fused, plan = _operators(k, x, 1e-2, np.dtype(dtype), xp_gpu)
    xd = xp_gpu.asarray(x)
    rank = min(m // 2, n)
    with op_stream():  # CuPy's work on the stream of the engine's cuSOLVER calls, as dispatched
        pre = Preconditioner(_engine_cuda, plan, xd, 1e-2, rank)
    width = m - pre.rank
    left = xp_gpu.asarray(rng.standard_normal((n, width)))
    right = xp_gpu.asarray(rng.standard_normal((n, width)))
    want = np.asarray(lib.lml_gradient(left, right, pre, 3.0).get())
    got = fused.lml_gradient(left, right, pre, 3.0)
    assert isinstance(got, np.ndarray) and got.shape == want.shape == (len(k.theta),)
    # the same sums with |W|'s bound |A| |B|^T, W = A B^T - 3 D^-1: the terms that cancel
    a = xp_gpu.concatenate([left, 3.0 * pre.G], axis=1) if pre.G is not None else left
    b = xp_gpu.concatenate([right, pre.G], axis=1) if pre.G is not None else right
    none = types.SimpleNamespace(dense_rows=lambda i0, i1: xp_gpu.zeros((i1 - i0, n)))
    scale = np.asarray(lib.lml_gradient(abs(a), abs(b), none, 0.0).get())
    tol = 1e-3 if dtype == np.float32 else 1e-9
    assert np.all(np.abs(got - want) <= tol * (np.abs(scale) + np.abs(want).max()))


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, d, rank", [(37, 3, 5), (2113, 8, 100)])
def test_stored_products_and_gradient_match_library_route(name, dtype, n, d, rank, rng,
                                                          xp_gpu):
    """The stored kernel matrix (``gl_gp_build`` in ``dtype``): its products (cuBLAS) and
    the gradient from ``W`` made in its memory (``gl_gp_weight_contract``) against the
    library route's row blocks on the GPU."""
    from gpulinalg._runtime.streams import op_stream
    from gpulinalg.gp import _engine_cuda, _fused_cuda
    from gpulinalg.gp._cg_fused_cuda import StoredGradient
    from gpulinalg.gp._cg_stored_xp import StoredOperator
    from gpulinalg.gp._precond_xp import Preconditioner
    x, _ = _data(rng, n, d)
    k = FORMS[name](d)
    noise = rng.uniform(1e-4, 1e-3, n)
    lib, _, plan = _operators(k, x, noise, np.dtype(dtype), xp_gpu)
    xd, nd = xp_gpu.asarray(x), xp_gpu.asarray(noise)
    form = fused_form(plan, d)
    v = xp_gpu.asarray(rng.standard_normal((n, 9)))
    with op_stream():
        km, _, _ = _fused_cuda.build(xd, 0.0, form, dtype)
        op = StoredOperator(km, nd, StoredGradient(form, xd))
        got, want, bound = op(v).get(), lib(v).get(), lib(xp_gpu.abs(v)).get()
        pre = Preconditioner(_engine_cuda, plan, xd, nd, rank)
        left = xp_gpu.asarray(rng.standard_normal((n, 4)))
        right = xp_gpu.asarray(rng.standard_normal((n, 4)))
        gwant = np.asarray(lib.lml_gradient(left, right, pre, 3.0).get())
        ggot = op.lml_gradient(left, right, pre, 3.0)
    assert op.route == f"stored {np.dtype(dtype).name}"
    assert np.all(np.abs(got - want) <= RTOL[np.dtype(dtype)] * bound)
    tol = 1e-3 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(ggot, gwant, rtol=tol, atol=tol * np.abs(gwant).max())


@pytest.mark.gpu
@pytest.mark.parametrize("lml_tol", [1e-2, 1e-6])
def test_regressor_fused_matches_library_route(lml_tol, rng, xp_gpu):
    """``solver="cg"`` on the GPU with the kernels on and off, the products matrix-free and
    from the stored kernel matrix (``products="auto"``; this one fits): the same likelihood
    (to the stochastic estimate's spread: the probes are the same, the solves stop at
    ``lml_tol``) and the same fit; the record names the products."""
    x, y = _data(rng, 3000, 6)
    k = C(1.0) * RBF(np.linspace(0.5, 1.0, 6)) + W(0.05)
    got = {}
    for products in ("matrix-free", "auto"):
        options = {"lml_tol": lml_tol, "tol": 1e-8, "products": products}
        for on in (True, False):
            with gpulinalg.config(backend="gpu", custom_kernels=on):
                gp = GaussianProcessRegressor(k, optimizer=None, solver="cg",
                                              cg_options=options)
                gp.fit(xp_gpu.asarray(x), xp_gpu.asarray(y))
                fit_route = gpulinalg.last_run().details["cg_products"]
                lml, grad = gp.log_marginal_likelihood(k.theta, eval_gradient=True)
                lml_route = gpulinalg.last_run().details["cg_products"]
                mean = xp_gpu.asnumpy(gp.predict(xp_gpu.asarray(x[:200])))
            got[products, on] = (lml, np.asarray(grad), mean, gp.log_marginal_likelihood_value_)
            if products == "auto":
                assert fit_route == "stored float64"
                assert lml_route == f"stored {product_dtype(lml_tol).name}"
            elif on and gpulinalg.gp._engine_cuda.custom_kernels_enabled():
                assert fit_route == "fused float64"
                assert lml_route == f"fused {product_dtype(lml_tol).name}"
            elif not on:
                assert fit_route == lml_route == "library"
    l0, g0, m0, f0 = got["matrix-free", False]
    for key, (l1, g1, m1, f1) in got.items():
        assert abs(f1 - f0) <= 1e-8 * abs(f0), key
        np.testing.assert_allclose(m1, m0, rtol=0, atol=1e-6 * np.abs(m0).max(), err_msg=key)
        # float32 products move the Krylov path and so where the solves stop: the estimate
        # moves by a fraction of the tolerance
        assert abs(l1 - l0) <= max(1e-6, 0.1 * lml_tol) * abs(l0), key
        assert np.abs(g1 - g0).max() <= 1e-2 * max(np.abs(g0).max(), 1.0), key


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_contraction_chunks_emulated(dtype, rng, monkeypatch):
    """Factors wider than the shared memory holds go in chunks of columns, one launch each;
    their sums add up to the whole contraction (the library route's)."""
    from gpulinalg.gp._cg_fused_cuda import FusedOperator
    from gpulinalg.gp._mixed_xp import Operator
    from tests.support.cusolver_emulator import CALLS, dev, emulated_gpu
    n, d, m = 60, 2, 700
    x, _ = _data(rng, n, d)
    plan = compile_kernel(FORMS["matern05+w"](d), d)
    a, b = rng.standard_normal((n, m)), rng.standard_normal((n, m))
    zero = types.SimpleNamespace(dense_rows=lambda i0, i1: np.zeros((i1 - i0, n)))
    want = Operator(plan, x, 0.0).lml_gradient(a, b, zero, 0.0)
    CALLS.clear()
    with emulated_gpu(monkeypatch):
        fused = FusedOperator(fused_form(plan, d), dev(x), 0.0, np.dtype(dtype))
        acc = np.asarray(fused.contract(dev(a), dev(b)))
    step = _SHARED // ((128 + 1) * 4 if dtype == np.float32 else (64 + 1) * 8)
    assert CALLS["gp_factor_contract"] == -(-m // step) >= 3
    got = fused.form.gradient(np.concatenate([acc, [(a * b).sum()]]))
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-10)
