"""Masked arrays are refused as SciPy refuses them, by every public function that takes arrays,
on both backends: the data under the mask (NaN here) must never reach a result silently."""

import numpy as np
import pytest
import scipy.sparse as sp

from gpulinalg import decomp, dense, gp, sparse

A = np.ma.array(np.eye(3) * 2 + 1, mask=np.zeros((3, 3), bool))
A.data[0, 1] = np.nan
A.mask[0, 1] = True
B = np.ma.array([1.0, 2.0, np.nan], mask=[0, 0, 1])
SPD = np.eye(3) * 2

CALLS = {
    "qr": lambda: decomp.qr(A),
    "svd": lambda: decomp.svd(A),
    "cholesky": lambda: decomp.cholesky(A),
    "cho_factor": lambda: decomp.cho_factor(A),
    "cho_solve": lambda: decomp.cho_solve(decomp.cho_factor(SPD), B),
    "cho_solve factor": lambda: decomp.cho_solve((A, False), np.ones(3)),
    "solve_triangular a": lambda: decomp.solve_triangular(A, np.ones(3)),
    "solve_triangular b": lambda: decomp.solve_triangular(SPD, B),
    "logdet_cholesky": lambda: decomp.logdet_cholesky((A, False)),
    "truncated_svd": lambda: decomp.truncated_svd(A, 1),
    "exact_gp_solve K": lambda: gp.exact_gp_solve(A, np.ones(3)),
    "exact_gp_solve y": lambda: gp.exact_gp_solve(SPD, B),
    "sparse.solve b": lambda: sparse.solve(sp.csr_matrix(SPD), B),
    "matmul": lambda: dense.matmul(A, np.eye(3)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_masked_input_is_refused(backend, name):
    with pytest.raises(ValueError, match="masked arrays are not supported"):
        CALLS[name]()
