"""``decomp.lstsq`` and ``decomp.solve(assume_a="pos")`` with Dask arrays: lazy results through
the dispatcher (``last_run().backend == "dask"``) that match SciPy once computed, on a 2-worker
CPU ``LocalCluster`` with NumPy chunks; the calls the Dask routes do not take are refused by
name."""

import numpy as np
import pytest
import scipy.linalg as sla

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")

import gpulinalg  # noqa: E402
from gpulinalg import decomp  # noqa: E402


def _random(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _tol(dtype):
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("driver", [None, "gelsy", "gelss"])
@pytest.mark.parametrize("vec", [False, True])
def test_lstsq_tall_matches_scipy(client, rng, dtype, driver, vec):
    a = _random(rng, (500, 9), dtype)
    b = _random(rng, (500,) if vec else (500, 3), dtype)
    res = decomp.lstsq(da.from_array(a, chunks=(70, 4)),
                       da.from_array(b, chunks=(120,) + b.shape[1:]), lapack_driver=driver)
    assert gpulinalg.last_run().backend == "dask"
    assert all(isinstance(v, da.Array) for v in res if v is not None)
    x, residues, rank, s = client.compute(list(res[:3]) + [res.s], sync=True) \
        if res.s is not None else client.compute(list(res[:3]), sync=True) + [None]
    want = sla.lstsq(a, b, lapack_driver=driver)
    scale = max(1.0, float(np.abs(want[0]).max()))
    assert x.shape == want[0].shape and x.dtype == want[0].dtype
    np.testing.assert_allclose(x, want[0], rtol=_tol(dtype), atol=_tol(dtype) * scale)
    assert np.shape(residues) == np.shape(want[1])
    if np.size(want[1]):
        np.testing.assert_allclose(residues, want[1], rtol=_tol(dtype) * 10)
    assert int(rank) == int(want[2])
    if driver == "gelsy":
        assert s is None and want[3] is None
    else:
        np.testing.assert_allclose(s, want[3], rtol=_tol(dtype), atol=_tol(dtype) * want[3][0])


def test_lstsq_rank_deficient_is_minimum_norm(client, rng):
    a = rng.standard_normal((400, 6))
    a[:, 5] = a[:, 0] + a[:, 1]
    b = rng.standard_normal(400)
    cond = 1e-10  # the default, eps, sits in the rounding of s_min for any reduction order
    res = decomp.lstsq(da.from_array(a, chunks=90), b, cond=cond)
    x, rank = client.compute([res.x, res.rank], sync=True)
    want = sla.lstsq(a, b, cond=cond)
    assert int(rank) == int(want[2]) == 5
    np.testing.assert_allclose(x, want[0], rtol=1e-8, atol=1e-10)


def test_lstsq_square_has_no_residues(client, rng):
    a, b = rng.standard_normal((40, 40)) + 40 * np.eye(40), rng.standard_normal(40)
    res = decomp.lstsq(da.from_array(a, chunks=10), da.from_array(b, chunks=10))
    x, residues = client.compute([res.x, res.residues], sync=True)
    assert residues.shape == (0,)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-9)


def test_lstsq_refusals(rng):
    a = da.from_array(rng.standard_normal((10, 20)), chunks=5)
    with pytest.raises(ValueError, match="tall"):
        decomp.lstsq(a, np.ones(10))
    with pytest.raises(ValueError, match="same number of rows"):
        decomp.lstsq(da.from_array(np.ones((10, 2)), chunks=5), np.ones(9))
    with pytest.raises(ValueError, match="not found"):
        decomp.lstsq(da.from_array(np.ones((10, 2)), chunks=5), np.ones(10),
                     lapack_driver="gelsx")


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("lower", [False, True])
def test_solve_pos_reads_one_triangle_as_scipy(client, rng, dtype, lower):
    z = _random(rng, (120, 120), dtype)
    a = (z @ z.conj().T + 120 * np.eye(120)).astype(dtype)
    junk = a.copy()  # the triangle solve does not read holds junk
    junk[np.triu_indices(120, 1) if lower else np.tril_indices(120, -1)] = 7.0
    b = _random(rng, (120, 2), dtype)
    x = decomp.solve(da.from_array(junk, chunks=40), da.from_array(b, chunks=(40, 2)),
                     assume_a="pos", lower=lower)
    assert gpulinalg.last_run().backend == "dask" and isinstance(x, da.Array)
    want = sla.solve(junk, b, assume_a="pos", lower=lower)
    got = client.compute(x, sync=True)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=_tol(dtype), atol=_tol(dtype))


def test_solve_pos_vector_and_host_rhs(client, rng):
    z = rng.standard_normal((90, 90))
    a = z @ z.T + 90 * np.eye(90)
    b = rng.standard_normal(90)
    x = decomp.solve(da.from_array(a, chunks=30), b, assume_a="positive definite")
    got = client.compute(x, sync=True)
    assert got.shape == (90,)
    np.testing.assert_allclose(got, np.linalg.solve(a, b), rtol=1e-10)


def test_solve_refusals(rng):
    a = da.from_array(np.eye(10), chunks=5)
    with pytest.raises(NotImplementedError, match="assume_a='pos'"):
        decomp.solve(a, np.ones(10))
    with pytest.raises(ValueError, match="not a recognized"):
        decomp.solve(a, np.ones(10), assume_a="spd")
    with pytest.raises(ValueError, match="incompatible shapes"):
        decomp.solve(a, np.ones(9), assume_a="pos")
    with pytest.raises(NotImplementedError, match="complex"):
        decomp.solve(a.astype(complex), np.ones(10), assume_a="pos", transposed=True)
