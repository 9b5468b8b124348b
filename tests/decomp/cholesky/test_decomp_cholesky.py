"""Cholesky, cho_factor/cho_solve, logdet_cholesky and solve_triangular on both backends."""

import numpy as np
import pytest
import scipy.linalg

import gpulinalg
from gpulinalg import FallbackWarning, NotPositiveDefiniteError
from gpulinalg import testing
from gpulinalg.decomp import cho_factor, cho_solve, cholesky, logdet_cholesky, solve_triangular

from tests.support.decomp_dense_ref import (DTYPES, backward_ratio, eps, host, random, solve_ratio,
                                            spd)


def _conj_t(x):
    return np.conj(np.swapaxes(x, -1, -2))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("cond", [10.0, 1e3])
@pytest.mark.parametrize("order", ["C", "F"])
def test_cholesky_ratio(backend, rng, dtype, lower, cond, order):
    a = spd(rng, 40, dtype, cond=cond)
    a = np.asfortranarray(a) if order == "F" else a
    before = a.copy()
    c = host(cholesky(a, lower=lower))
    assert c.dtype == dtype and np.array_equal(a, before)
    if lower:
        assert np.allclose(np.triu(c, 1), 0)
        rebuilt = c @ _conj_t(c)
    else:
        assert np.allclose(np.tril(c, -1), 0)
        rebuilt = _conj_t(c) @ c
    assert backward_ratio(a, rebuilt, dtype) <= 30
    ref = scipy.linalg.cholesky(a, lower=lower)
    assert np.allclose(c, ref, atol=100 * 40 * eps(dtype))


@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_reads_one_triangle(backend, rng, lower):
    a = spd(rng, 12, np.float64)
    garbage = a.copy()
    mask = np.triu(np.ones_like(a, bool), 1) if lower else np.tril(np.ones_like(a, bool), -1)
    garbage[mask] = 1e6
    assert np.allclose(host(cholesky(garbage, lower=lower)), scipy.linalg.cholesky(a, lower))


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
def test_large_factors_each_layout(backend, rng, dtype, lower, order):
    # n = 100 >= 64 and not a multiple of 32: the GPU's tiled working copy, partial tiles
    a = spd(rng, 100, dtype, batch=(2,))
    keep = np.tril if lower else np.triu
    mask = keep(np.ones((100, 100), bool))
    junk = np.where(mask, a, np.nan)  # the other triangle is never read...
    junk = np.ascontiguousarray(junk.swapaxes(-1, -2)).swapaxes(-1, -2) if order == "F" \
        else junk
    before = junk.copy()
    c = host(cholesky(junk, lower=lower, check_finite=False))
    ref = scipy.linalg.cholesky(a[1], lower=lower)
    assert np.array_equal(junk, before, equal_nan=True)
    assert np.allclose(c[1], ref, atol=100 * 100 * eps(dtype)) and not np.isnan(c).any()
    cf, low = cho_factor(junk, lower=lower, check_finite=False)
    cf = host(cf)
    assert low == lower and np.allclose(keep(cf[1]), ref, atol=100 * 100 * eps(dtype))
    assert np.isnan(cf[:, 0, 99] if lower else cf[:, 99, 0]).all()  # ...and kept as given


def test_cholesky_batched_and_view(backend, rng):
    a = spd(rng, 10, np.float64, batch=(2, 3))
    c = host(cholesky(a))  # SciPy's default: the upper factor
    assert c.shape == a.shape and np.allclose(np.tril(c, -1), 0)
    assert backward_ratio(a, _conj_t(c) @ c, np.float64) <= 30
    big = spd(rng, 20, np.float64)
    view = big[::2, ::2]  # a principal submatrix: still SPD, non-contiguous
    cv = host(cholesky(view, lower=True))
    assert backward_ratio(view, cv @ cv.T, np.float64) <= 30


def test_not_positive_definite_carries_minor_and_batch(backend, rng):
    a = spd(rng, 6, np.float64, batch=(2, 2))
    a[1, 0, 3, 3] = -5.0
    with pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(a)
    assert info.value.minor == 4 and info.value.batch_index == (1, 0)
    with pytest.raises(NotPositiveDefiniteError) as info:
        cho_factor(-np.eye(3))
    assert info.value.minor == 1 and info.value.batch_index is None
    assert isinstance(info.value, np.linalg.LinAlgError)


def test_nan_raises(backend):
    a = np.eye(3)
    a[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cholesky(a)
    with pytest.raises(ValueError, match="holds NaN or Inf") as info:  # never a silent NaN
        cholesky(a, check_finite=False)  # factor, nor a "leading minor not positive"
    assert not isinstance(info.value, NotPositiveDefiniteError)
    assert gpulinalg.last_run().details["raised"].startswith("ValueError")


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("where", ["diag", "off"])
def test_nan_diagnosed_not_misreported(backend, rng, lower, where):
    a = spd(rng, 8, np.float64, batch=(2,))
    i, j = (5, 5) if where == "diag" else ((6, 2) if lower else (2, 6))
    a[1, i, j] = np.nan
    with pytest.raises(ValueError, match=r"batch entry \(1,\).*NaN or Inf"):
        cholesky(a, lower=lower, check_finite=False)
    with pytest.raises(ValueError, match="NaN or Inf"):
        cho_factor(a[1], lower=lower, check_finite=False)
    bad = a[1].copy()
    bad[i, j] = 0.0
    bad[3, 3] = -1.0  # a genuine failure is still reported as one
    with pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(bad, lower=lower, check_finite=False)
    assert info.value.minor == 4


def test_nan_in_unread_triangle_is_ignored(backend, rng):
    a = spd(rng, 6, np.float64)
    a[0, 5] = np.nan  # upper triangle: not read with lower=True
    c = host(cholesky(a, lower=True, check_finite=False))
    assert np.allclose(c @ c.T, np.tril(a) + np.tril(a, -1).T)


def test_nan_overwritten_in_place_is_a_linalg_error():
    a = np.asfortranarray(np.eye(4))
    a[2, 2] = np.nan
    with gpulinalg.config(backend="cpu"), pytest.raises(gpulinalg.LinAlgError, match="NaN"):
        cholesky(a, lower=True, overwrite_a=True, check_finite=False)


def test_logdet_of_nan_factor_raises(backend):
    c = np.eye(3)
    c[2, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf on its diagonal"):
        logdet_cholesky((c, False))
    cb = np.stack([np.eye(3), np.eye(3)])
    cb[1, 0, 0] = np.inf
    with pytest.raises(ValueError, match=r"batch entry \(1,\)"):
        logdet_cholesky((cb, True))


def test_empty_and_1x1(backend):
    assert cholesky(np.zeros((0, 0))).shape == (0, 0)
    assert cholesky(np.zeros((3, 0, 0))).shape == (3, 0, 0)
    assert np.allclose(host(cholesky(np.array([[4.0]]))), 2.0)
    c = cho_factor(np.array([[4.0]]))
    assert np.allclose(host(cho_solve(c, np.array([8.0]))), 2.0)
    assert np.isclose(logdet_cholesky(c), np.log(4.0))
    assert cho_solve(cho_factor(np.zeros((0, 0))), np.zeros((0, 2))).shape == (0, 2)
    assert logdet_cholesky((np.zeros((2, 0, 0)), True)).shape == (2,)


def test_cholesky_dtypes_and_errors(backend):
    assert cholesky(np.array([[4, 2], [2, 3]])).dtype == np.float64
    assert cholesky(np.eye(2, dtype=np.float32)).dtype == np.float32
    with pytest.raises(ValueError, match="square"):
        cholesky(np.ones((2, 3)))
    with pytest.raises(TypeError):
        cho_solve(np.eye(2), np.ones(2))


def test_overwrite_a(backend, rng):
    a = spd(rng, 8, np.float64)
    ref = scipy.linalg.cholesky(a)
    assert np.allclose(host(cholesky(a.copy(), overwrite_a=True)), ref)


def test_defaults_are_scipys(backend, rng):
    a = spd(rng, 7, np.float64)
    assert np.allclose(host(cholesky(a)), scipy.linalg.cholesky(a))
    c, lower = cho_factor(a)
    c_ref, lower_ref = scipy.linalg.cho_factor(a)
    # a Python bool on both backends; SciPy 1.18's own cho_factor returns a 0-d NumPy array
    # (array(False)), which failed the former `lower is lower_ref` on the GPU machine
    assert lower is False and isinstance(lower, bool) and not bool(lower_ref)
    assert np.allclose(np.triu(host(c)), np.triu(c_ref))
    # the SciPy recipe of issue 14: U = cholesky(A); solve U^T y = b; solve U x = y
    b = random(rng, (7,), np.float64)
    u = cholesky(a)
    x = solve_triangular(u, solve_triangular(u.T, b, lower=True))
    assert np.linalg.norm(host(x) - np.linalg.solve(a, b)) <= 1e-12 * np.linalg.norm(host(x))


def test_signatures_are_scipys():
    import inspect
    for ours, theirs in [(cholesky, scipy.linalg.cholesky), (cho_factor, scipy.linalg.cho_factor),
                         (cho_solve, scipy.linalg.cho_solve),
                         (solve_triangular, scipy.linalg.solve_triangular)]:
        got = [(p.name, p.default, p.kind) for p in inspect.signature(ours).parameters.values()]
        want = [(p.name, p.default, p.kind)
                for p in inspect.signature(theirs).parameters.values()]
        assert got == want, ours.__name__


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("bshape", [(30,), (30, 4)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_cho_solve_ratio(backend, rng, dtype, lower, bshape, order):
    a = spd(rng, 30, dtype, cond=1e3)
    a = np.asfortranarray(a) if order == "F" else a
    cf = cho_factor(a, lower=lower)
    assert cf[1] is lower
    b = random(rng, bshape, dtype)
    before = b.copy()
    x = cho_solve(cf, b)
    assert x.shape == bshape and host(x).dtype == dtype and np.array_equal(b, before)
    assert solve_ratio(a, x, b, dtype) <= 30 * 30


def test_cho_solve_batched_broadcast(backend, rng):
    a = spd(rng, 7, np.float64, batch=(3,))
    cf = cho_factor(a)
    b = random(rng, (2, 1, 7, 2), np.float64)
    x = host(cho_solve(cf, b))
    assert x.shape == (2, 3, 7, 2)
    assert np.allclose(a @ x, b)
    xv = host(cho_solve(cf, b[0, 0, :, 0]))
    assert xv.shape == (3, 7) and np.allclose(np.einsum("bij,bj->bi", a, xv), b[0, 0, :, 0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_logdet(backend, rng, dtype):
    a = spd(rng, 25, dtype, cond=1e2, batch=(3,))
    got = host(logdet_cholesky(cho_factor(a)))
    ref = np.linalg.slogdet(a.astype(np.complex128))[1]
    assert got.shape == (3,) and got.dtype == np.finfo(dtype).dtype
    assert np.allclose(got, ref, rtol=1e3 * eps(dtype), atol=1e3 * eps(dtype))
    one = logdet_cholesky(cho_factor(a[0], lower=False))
    assert np.ndim(one) == 0 and np.isclose(float(one), ref[0], rtol=1e3 * eps(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", [0, 1, 2, "N", "T", "C"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("order", ["C", "F"])
def test_solve_triangular_matches_scipy(backend, rng, dtype, trans, lower, order):
    a = random(rng, (20, 20), dtype) + 20 * np.eye(20, dtype=dtype)
    a = np.asfortranarray(a) if order == "F" else a
    b = random(rng, (20, 3), dtype)
    before = a.copy(), b.copy()
    x = host(solve_triangular(a, b, trans=trans, lower=lower))
    ref = scipy.linalg.solve_triangular(a, b, trans=trans, lower=lower)
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])
    assert x.dtype == dtype and np.allclose(x, ref, rtol=1e3 * eps(dtype), atol=1e3 * eps(dtype))
    tri = np.tril(a) if lower else np.triu(a)
    op = {0: tri, 1: tri.T, 2: tri.conj().T}[{"N": 0, "T": 1, "C": 2}.get(trans, trans)]
    assert solve_ratio(op, x, b, dtype) <= 30 * 20


def test_solve_triangular_unit_diagonal_vector_batched(backend, rng):
    a = np.tril(random(rng, (4, 6, 6), np.float64)) + 6 * np.eye(6)
    b = random(rng, (6,), np.float64)
    x = host(solve_triangular(a, b, lower=True, unit_diagonal=True))
    unit = np.tril(a, -1) + np.eye(6)
    assert x.shape == (4, 6) and np.allclose(np.einsum("bij,bj->bi", unit, x), b)
    bb = random(rng, (4, 6, 2), np.float64)
    xb = host(solve_triangular(a[:, ::1, :], bb, lower=True))
    assert np.allclose(a @ xb, bb)
    view = host(solve_triangular(a[0, ::2, ::2], bb[0, ::2], lower=True))
    assert np.allclose(a[0, ::2, ::2] @ view, bb[0, ::2])


def test_solve_triangular_singular_raises(backend):
    from gpulinalg import SingularMatrixError
    a = np.tril(np.ones((3, 2, 4, 4)))
    a[2, 1, 3, 3] = 0.0
    with pytest.raises(SingularMatrixError, match=r"\(2, 1\).*entry 3"):
        solve_triangular(a, np.ones((4, 1)), lower=True)
    assert isinstance(SingularMatrixError("x"), np.linalg.LinAlgError)
    x = host(solve_triangular(a, np.ones((4, 1)), lower=True, unit_diagonal=True))
    assert np.all(np.isfinite(x))


def test_solve_triangular_errors():
    with pytest.raises(ValueError, match="trans"):
        solve_triangular(np.eye(2), np.ones(2), trans=3)
    with pytest.raises(ValueError, match="incompatible"):
        solve_triangular(np.eye(2), np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        solve_triangular(np.eye(2), np.array([1.0, np.nan]))
    assert solve_triangular(np.zeros((0, 0)), np.zeros(0)).shape == (0,)


@pytest.mark.parametrize("fn", ["cholesky", "cho_solve", "solve_triangular"])
def test_fallback_on_oom(rng, fake_gpu, fn):
    a = spd(rng, 10, np.float64)
    b = random(rng, (10, 2), np.float64)
    call = {"cholesky": lambda: cholesky(a),
            "cho_solve": lambda: cho_solve((np.linalg.cholesky(a), True), b),
            "solve_triangular": lambda: solve_triangular(np.linalg.cholesky(a), b, lower=True)}
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(FallbackWarning):
            out = call[fn]()
    assert gpulinalg.last_run().fell_back
    with gpulinalg.config(backend="cpu"):
        assert np.allclose(out, call[fn]())


def test_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(spd(rng, 6, np.float64))
    c = cholesky(a, lower=True)
    assert isinstance(c, torch.Tensor) and torch.allclose(c @ c.T, a)
    x = cho_solve((c, True), torch.ones(6, dtype=torch.float64))
    assert isinstance(x, torch.Tensor) and torch.allclose(a @ x, torch.ones(6, dtype=a.dtype))


@pytest.mark.gpu
def test_cupy_in_cupy_out_large(xp_gpu, rng):
    a = xp_gpu.asarray(spd(rng, 600, np.float64, cond=1e4))
    c, lower = cho_factor(a)
    assert isinstance(c, xp_gpu.ndarray) and gpulinalg.last_run().backend == "gpu"
    b = xp_gpu.asarray(random(rng, (600, 5), np.float64))
    x = cho_solve((c, lower), b)
    assert isinstance(x, xp_gpu.ndarray)
    assert solve_ratio(a, x, b, np.float64) <= 30 * 600
    ld = logdet_cholesky((c, lower))
    assert np.isclose(float(ld), np.linalg.slogdet(a.get())[1])
    y = solve_triangular(xp_gpu.tril(c), b, lower=True)
    assert xp_gpu.allclose(xp_gpu.tril(c) @ y, b)


@pytest.mark.gpu
def test_gpu_not_pd_in_large_batch(rng):
    a = spd(rng, 64, np.float64, batch=(5,))
    a[3, 10, 10] = -1.0
    with gpulinalg.config(backend="gpu"), pytest.raises(NotPositiveDefiniteError) as info:
        cholesky(a)
    assert info.value.batch_index == (3,) and info.value.minor == 11


# -- issue 18: singular and ill-conditioned triangular systems, one rule on both backends -----

def _kahan(n, dtype=np.float64):
    """Unit upper triangular with -1 above the diagonal: a clean diagonal, cond ~ 2^n."""
    return (np.eye(n) - np.triu(np.ones((n, n)), 1)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_solve_triangular_ill_conditioned_warns(backend, dtype):
    from gpulinalg import IllConditionedWarning
    a = _kahan(60, dtype)  # cond ~ 2^59 > 1/eps in both precisions
    b = np.ones(60, dtype)
    with pytest.warns(IllConditionedWarning, match="reciprocal condition number") as rec:
        solve_triangular(a, b)
    assert rec[0].filename == __file__  # points at the caller's line
    assert gpulinalg.last_run().details["rcond_bound"] < np.finfo(dtype).eps
    d = np.diag(np.geomspace(1.0, 1e-20, 5)).astype(np.float64)  # the diagonal alone tells
    with pytest.warns(IllConditionedWarning):
        solve_triangular(d, np.ones((5, 2)), lower=True)


def test_solve_triangular_well_conditioned_is_quiet(backend, rng):
    import warnings
    a = np.triu(random(rng, (3, 30, 30), np.float64)) + 30 * np.eye(30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = solve_triangular(a, random(rng, (30, 4), np.float64), trans="T")
    assert np.all(np.isfinite(host(x)))
    assert 1e-3 < gpulinalg.last_run().details["rcond_bound"] <= 1


def test_cho_solve_ill_conditioned_warns_and_singular_raises(backend):
    from gpulinalg import IllConditionedWarning, SingularMatrixError
    c = np.diag([1.0, 1e-9, 1.0])  # a = c^T c has cond 1e18
    with pytest.warns(IllConditionedWarning, match="Cholesky"):
        cho_solve((c, False), np.ones(3))
    c[1, 1] = 0.0
    with pytest.raises(SingularMatrixError, match="diagonal entry 1"):
        cho_solve((c, True), np.ones(3))
    c[1, 1] = 1e-5  # cond 1e10: fine in float64
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cho_solve((c, True), np.ones(3))


def test_conditioning_rule_is_a_lower_bound(rng):
    # rcond_bound >= the true reciprocal condition number: never a false alarm
    from scipy.linalg import lapack
    for n in (5, 20, 60):
        a = np.triu(random(rng, (n, n), np.float64)) + np.diag(rng.uniform(0.1, 2, n))
        with gpulinalg.config(backend="cpu"):
            solve_triangular(a, random(rng, (n, 3), np.float64))
        bound = gpulinalg.last_run().details["rcond_bound"]
        true = 1.0 / (np.linalg.norm(a, np.inf) * np.linalg.norm(np.linalg.inv(a), np.inf))
        assert bound >= true * (1 - 1e-12)
        rcond, _ = lapack.dtrcon(a, norm="I", uplo="U")
        assert rcond <= 3 * bound  # LAPACK's estimate is sharper, never far above


def test_empty_shortcuts_are_recorded_and_strict(monkeypatch):
    from gpulinalg import GPUUnavailableError
    from gpulinalg.decomp import qr, svd
    calls = {"cholesky": lambda: cholesky(np.zeros((0, 0))),
             "cho_factor": lambda: cho_factor(np.zeros((0, 0))),
             "cho_solve": lambda: cho_solve((np.zeros((0, 0)), False), np.zeros(0)),
             "logdet_cholesky": lambda: logdet_cholesky((np.zeros((2, 0, 0)), False)),
             "solve_triangular": lambda: solve_triangular(np.zeros((0, 0)), np.zeros((0, 3))),
             "qr": lambda: qr(np.zeros((0, 3))), "svd": lambda: svd(np.zeros((3, 0)))}
    for name, call in calls.items():
        call()
        rec = gpulinalg.last_run()
        assert rec.backend == "none" and rec.op == f"decomp.{name}", name
        if not gpulinalg.gpu_available():
            with gpulinalg.config(backend="gpu"), pytest.raises(GPUUnavailableError):
                call()


def test_fallback_warning_points_at_the_caller(rng, fake_gpu):
    a = spd(rng, 10, np.float64)
    with testing.inject_fault("oom"), gpulinalg.config(backend="gpu"):
        with pytest.warns(FallbackWarning) as rec:
            cholesky(a)
    assert [w.filename for w in rec] == [__file__]
    assert gpulinalg.last_run().fell_back


def test_a_nan_factor_of_a_checked_finite_input_is_not_positive_definite():
    """Factored in place, a NaN in the factor cannot be told from NaN input, unless the input
    was checked finite first (check_finite, or a caller such as the GP's jitter loop): then it
    comes from a pivot that is not positive, and the error says so (its minor included)."""
    from gpulinalg.decomp.cholesky._cholesky_xp import failure
    factor = np.array([[1.0, 0.0], [0.5, np.nan]])  # what potrf left in place
    unknown = failure(2, factor, True, True, None)
    assert type(unknown) is gpulinalg.LinAlgError and "cannot be checked" in str(unknown)
    known = failure(2, factor, True, True, None, input_finite=True)
    assert isinstance(known, gpulinalg.NotPositiveDefiniteError) and known.minor == 2
