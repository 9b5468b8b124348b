"""gpulinalg.sparse input normalisation: CSR/COO in any order with duplicates -> canonical CSR."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulinalg.sparse._input_xp import as_csr, pattern_values, structure


@st.composite
def coo_entries(draw):
    n = draw(st.integers(1, 12))
    k = draw(st.integers(0, 40))
    rows = draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k))
    cols = draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k))
    vals = draw(st.lists(st.floats(-10, 10, allow_nan=False), min_size=k, max_size=k))
    return n, np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), np.array(vals)


@settings(max_examples=60, deadline=None)
@given(coo_entries(), st.sampled_from(["coo", "csr_unsorted"]))
def test_matches_scipy_canonical(entries, fmt):
    n, rows, cols, vals = entries
    coo = sp.coo_matrix((vals, (rows, cols)), shape=(n, n))
    if fmt == "coo":
        a = coo
    else:  # CSR whose rows keep the COO's (unsorted, duplicated) column order
        order = np.argsort(rows, kind="stable")
        indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=n))]
        a = sp.csr_matrix((vals[order], cols[order], indptr), shape=(n, n))
    c = as_csr(a)
    ref = coo.tocsr()
    ref.sum_duplicates()
    np.testing.assert_array_equal(c.indptr, ref.indptr)
    np.testing.assert_array_equal(c.indices, ref.indices)
    np.testing.assert_allclose(c.data, ref.data, rtol=1e-12, atol=1e-12)
    # values in the input's order map back onto the canonical pattern
    again = pattern_values(c, a.data if fmt == "csr_unsorted" else vals)
    np.testing.assert_allclose(again, ref.data, rtol=1e-12, atol=1e-12)


def test_canonical_csr_is_passed_through():
    a = sp.random(30, 30, density=0.2, format="csr", random_state=1)
    c = as_csr(a)
    assert c.dest is None and c.data is a.data


def test_index_dtypes():
    a = sp.random(20, 20, density=0.3, format="csr", random_state=2)
    wide = sp.csr_matrix((a.data, a.indices.astype(np.int64), a.indptr.astype(np.int64)),
                         shape=a.shape)
    c = as_csr(wide)
    assert c.indices.dtype == np.int32
    np.testing.assert_array_equal(c.indices, a.indices)


def test_structure():
    a = sp.random(25, 25, density=0.2, format="csr", random_state=3)
    s = (a + a.T + sp.identity(25) * 10).tocsr()
    assert structure(s) == (True, True)
    assert structure((s - sp.identity(25) * 30).tocsr()) == (True, False)
    assert structure((a + sp.identity(25)).tocsr())[0] is False
    h = (s + 1j * (a - a.T)).tocsr()
    assert structure(h) == (True, True)
    # explicit zeros on one side only still count as symmetric
    z = s.tolil()
    z[0, 24] = 0.0
    z = z.tocsr()
    z[24, 0] = 0.0
    assert structure(z.tocsr())[0]


def test_errors():
    with pytest.raises(TypeError, match="sparse"):
        as_csr(np.eye(3))
    with pytest.raises(TypeError, match="sparse"):
        as_csr("A")
    with pytest.raises(ValueError, match="square"):
        as_csr(sp.random(3, 4, density=0.5, format="coo"))
