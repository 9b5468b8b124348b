"""Property tests (hypothesis): every function ``gpulinalg.decomp`` shares with ``scipy.linalg``
against SciPy, over shapes (empty and 1x1 included), dtypes, C/F layouts, non-contiguous views
and options; inputs are never modified. Tolerances from DESIGN section 4 (LAPACK style).

Runs on the backend in force (CPU here; the same bodies run on the GPU under
``gpulinalg.config(backend="gpu")`` via the ``backend`` fixture's ``gpu`` parameter).
"""

import warnings

import numpy as np
import scipy.linalg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpulinalg
from gpulinalg import IllConditionedWarning
from gpulinalg.decomp import cho_factor, cho_solve, cholesky, qr, solve_triangular, svd

from tests.support.decomp_dense_ref import (DTYPES, backward_ratio, eps, host, orthogonality_ratio,
                                            solve_ratio)

SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def matrices(draw, square=False, max_n=7):
    """``(a, dtype)``: a random matrix in one of four dtypes and three layouts."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    m = draw(st.integers(0, max_n))
    n = m if square else draw(st.integers(0, max_n))
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n))
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal((m, n))
    return x.astype(dtype), dtype, draw(st.sampled_from(["C", "F", "view"]))


def lay(x, layout):
    """``x`` C-ordered, Fortran-ordered, or as a non-contiguous view (every other entry)."""
    if layout == "view":
        big = np.zeros((2 * x.shape[0], 2 * x.shape[1]), dtype=x.dtype)
        big[::2, ::2] = x
        return big[::2, ::2]
    return np.asfortranarray(x) if layout == "F" else np.ascontiguousarray(x)


def _spd(a, dtype):
    n = a.shape[0]
    h = a @ a.conj().T + n * np.eye(n, dtype=dtype)
    return ((h + h.conj().T) / 2).astype(dtype)


@SETTINGS
@given(matrices(), st.sampled_from(["full", "economic", "r", "raw"]), st.booleans())
def test_qr_property(backend, am, mode, pivoting):
    a, dtype, layout = am
    a = lay(a, layout)
    before = a.copy()
    with warnings.catch_warnings():  # pivoted QR has no GPU routine: a fallback under "gpu"
        warnings.simplefilter("ignore", gpulinalg.FallbackWarning)
        out = qr(a, mode=mode, pivoting=pivoting)
    ref = scipy.linalg.qr(a, mode=mode, pivoting=pivoting)
    assert np.array_equal(a, before)
    flat = [host(x) for x in (out[0] + out[1:] if mode == "raw" else out)]
    flat_ref = list(ref[0] + ref[1:] if mode == "raw" else ref)
    assert [(x.shape, x.dtype) for x in flat] == [(x.shape, x.dtype) for x in flat_ref]
    if pivoting:
        assert np.array_equal(flat[-1], flat_ref[-1])
    if mode in ("full", "economic") and a.size:
        q, r = flat[0], flat[1]
        cols = flat[-1] if pivoting else slice(None)
        assert backward_ratio(a[:, cols], q @ r, dtype) <= 30
        assert orthogonality_ratio(q, dtype) <= 30


@SETTINGS
@given(matrices(), st.booleans(), st.booleans(), st.sampled_from(["gesdd", "gesvd"]))
def test_svd_property(backend, am, full, uv, lapack_driver):
    a, dtype, layout = am
    a = lay(a, layout)
    before = a.copy()
    out = svd(a, full_matrices=full, compute_uv=uv, lapack_driver=lapack_driver)
    ref = scipy.linalg.svd(a, full_matrices=full, compute_uv=uv, lapack_driver=lapack_driver)
    assert np.array_equal(a, before)
    s = host(out.S if uv else out)
    s_ref = ref[1] if uv else ref
    assert s.shape == s_ref.shape and s.dtype == s_ref.dtype
    scale = max(float(s_ref.max(initial=0)), 1.0)
    assert np.allclose(s, s_ref, atol=50 * max(a.shape) * eps(dtype) * scale)
    if uv:
        u, vh = host(out.U), host(out.Vh)
        assert u.shape == ref[0].shape and vh.shape == ref[2].shape and u.dtype == dtype
        k = min(a.shape)
        if a.size:
            assert backward_ratio(a, (u[:, :k] * s) @ vh[:k], dtype) <= 50
            assert orthogonality_ratio(u, dtype) <= 50
            assert orthogonality_ratio(vh, dtype, rows=True) <= 50


@SETTINGS
@given(matrices(square=True), st.booleans())
def test_cholesky_property(backend, am, lower):
    a, dtype, layout = am
    a = lay(_spd(a, dtype), layout)
    before = a.copy()
    c = host(cholesky(a, lower=lower))
    ref = scipy.linalg.cholesky(a, lower=lower)
    assert np.array_equal(a, before)
    assert c.shape == ref.shape and c.dtype == ref.dtype
    n = a.shape[0]
    if n:
        rebuilt = c @ c.conj().T if lower else c.conj().T @ c
        assert backward_ratio(a, rebuilt, dtype) <= 30
        assert np.allclose(c, ref, atol=100 * n * eps(dtype) * np.abs(ref).max())
    cf, low = cho_factor(a, lower=lower)
    assert low is lower
    b = np.ones((n, 2), dtype=dtype)
    x = host(cho_solve((cf, low), b))
    x_ref = scipy.linalg.cho_solve(scipy.linalg.cho_factor(a, lower=lower), b)
    assert x.shape == x_ref.shape and x.dtype == x_ref.dtype
    if n:
        assert solve_ratio(a, x, b, dtype) <= 30 * n


@SETTINGS
@given(matrices(square=True), st.sampled_from([0, 1, 2]), st.booleans(), st.booleans(),
       st.sampled_from([(), (3,)]))
def test_solve_triangular_property(backend, am, trans, lower, unit, bcols):
    a, dtype, layout = am
    n = a.shape[0]
    a = lay(a + (n + 1) * np.eye(n, dtype=dtype), layout)  # well conditioned
    b = np.ones((n,) + bcols, dtype=dtype)
    before = a.copy(), b.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", IllConditionedWarning)  # well conditioned: quiet
        x = host(solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit))
    ref = scipy.linalg.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit)
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])
    assert x.shape == ref.shape and x.dtype == ref.dtype
    if n:
        tri = np.tril(a) if lower else np.triu(a)
        if unit:
            np.fill_diagonal(tri, 1)
        op = {0: tri, 1: tri.T, 2: tri.conj().T}[trans]
        assert solve_ratio(op, x, b, dtype) <= 30 * n


def test_one_by_one_everywhere(backend):
    a = np.array([[4.0]])
    assert np.allclose(host(cholesky(a)), 2.0)
    assert np.allclose(host(solve_triangular(a, np.array([8.0]))), 2.0)
    q, r = qr(a)
    assert np.isclose(host(q)[0, 0] * host(r)[0, 0], 4.0)
    assert np.allclose(host(svd(a, compute_uv=False)), 4.0)

