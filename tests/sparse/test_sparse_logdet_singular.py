"""A numerically singular sparse factorization gives ``(0, -inf)`` from ``logdet`` (as its
``solve`` raises), never the finite log of a rounding-size pivot; a regular one is unchanged."""

import numpy as np
import pytest
import scipy.sparse as sp

import gpulinalg


def neumann_laplacian(n):
    """The 2-D Laplacian with Neumann ends: singular (constants span its null space)."""
    t = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    t[0, 0] = t[-1, -1] = 1
    eye = sp.eye(n)
    return (sp.kron(t, eye) + sp.kron(eye, t)).tocsr()


@pytest.mark.parametrize("method", ["auto", "lu", "ldlt"])
def test_singular_factor_logdet_is_minus_infinity(backend, method):
    f = gpulinalg.sparse.factorize(neumann_laplacian(20), method=method)
    sign, logabsdet = f.logdet()
    assert sign == 0 and logabsdet == -np.inf
    with pytest.raises(gpulinalg.SingularMatrixError):
        f.solve(np.ones(400))


@pytest.mark.parametrize("method", ["auto", "lu", "ldlt", "cholesky"])
def test_regular_factor_logdet_matches_numpy(backend, method):
    a = neumann_laplacian(12) + sp.eye(144) * 1e-3
    sign, logabsdet = gpulinalg.sparse.factorize(a.tocsr(), method=method).logdet()
    ref = np.linalg.slogdet(a.toarray())
    assert sign == ref.sign
    assert np.isclose(logabsdet, ref.logabsdet, rtol=1e-10)


class _PerturbedFactor:
    """An engine's factor whose pivots point at trouble and whose solves must not be used."""
    pivot_ratio, dtype, n, method = 0.0, np.dtype(np.float64), 3, "lu"
    m = sp.identity(3, format="csr")

    def solve_raw(self, b):
        raise AssertionError("the condition estimate ran on the engine's own solves")


def test_determinant_from_a_host_lu_is_judged_there():
    """cuDSS with perturbed pivots takes the determinant from a host LU (checked on that LU):
    the estimate through its own solves, of a nearby matrix, would call a regular matrix
    singular."""
    from gpulinalg.sparse import _factor_xp
    factor = _PerturbedFactor()
    with pytest.raises(AssertionError, match="estimate ran"):
        _factor_xp.checked_slogdet(factor, -1.0, 3.0)
    factor.logdet_from_host = "1 pivot(s) perturbed by cuDSS"
    assert _factor_xp.checked_slogdet(factor, -1.0, 3.0) == (-1.0, 3.0)
