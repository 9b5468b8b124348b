"""Turn a CSR or COO matrix from SciPy, CuPy or torch into canonical CSR arrays.

Canonical means what SciPy calls ``has_canonical_format``: column indices sorted within each
row and duplicates summed. The arrays stay in the input's package (NumPy for SciPy and CPU
torch, CuPy for CuPy and CUDA torch); the dispatcher moves them where the work runs.
Written once for NumPy and CuPy arrays; the module is found from the arrays (:func:`xp_of`).
"""

from __future__ import annotations

import sys
from typing import NamedTuple

import numpy as np

from .._runtime.arrays import Kind, is_array, kind_of, on_gpu, to_device, to_host, to_kind

__all__ = ["CSRInput", "as_csr", "xp_of", "wrap_csr", "pattern_values", "structure",
           "check_values"]


class CSRInput(NamedTuple):
    """Canonical CSR arrays of a square matrix, plus how to map the input's values onto them.

    ``dest[k]`` is the canonical position of the input's ``k``-th stored value (``None`` when
    the input was canonical CSR already), so new values in the input's order are summed into
    place with one ``bincount``.
    """

    indptr: object
    indices: object
    data: object
    n: int
    dest: object
    input_nnz: int


def xp_of(x):
    """NumPy or CuPy, whichever holds ``x`` (looked up in ``sys.modules``: imports nothing)."""
    if kind_of(x) is Kind.CUPY:
        return sys.modules["cupy"]
    return np


def wrap_csr(sparse, indptr, indices, data, n):
    """A ``csr_matrix`` of ``sparse`` (``scipy.sparse`` or ``cupyx.scipy.sparse``, chosen by
    the engine) over the given canonical arrays, without a copy."""
    m = sparse.csr_matrix((data, indices, indptr), shape=(n, n), copy=False)
    m.has_canonical_format = True
    return m


def _is_scipy_sparse(a):
    sp = sys.modules.get("scipy.sparse")
    return sp is not None and sp.issparse(a)


def _is_cupy_sparse(a):
    csp = sys.modules.get("cupyx.scipy.sparse")
    return csp is not None and csp.issparse(a)


def _torch_layout(a):
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(a, torch.Tensor):
        return None
    return {torch.sparse_coo: "coo", torch.sparse_csr: "csr"}.get(a.layout, "dense")


def _from_torch(t, fmt):
    """Components of a torch sparse tensor as NumPy (CPU) or CuPy (CUDA) arrays."""
    if t.ndim != 2:
        raise ValueError(f"A must be a 2-D sparse tensor, got shape {tuple(t.shape)}")

    def conv(x):  # zero-copy where it can: a CUDA tensor to CuPy, a CPU tensor to NumPy
        x = x.detach().contiguous()
        return to_device(x) if on_gpu(x) else to_host(x)
    if fmt == "coo":
        idx = conv(t._indices())
        return "coo", idx[0], idx[1], conv(t._values()), False
    return "csr", conv(t.crow_indices()), conv(t.col_indices()), conv(t.values()), False


def _components(a, name):
    """``(format, first, cols, data, canonical)`` where ``first`` is indptr (CSR) or rows (COO)."""
    layout = _torch_layout(a)
    if layout in ("coo", "csr"):
        shape = tuple(a.shape)
        return shape, *_from_torch(a, layout)
    if _is_scipy_sparse(a) or _is_cupy_sparse(a):
        fmt = a.format
        if fmt not in ("csr", "coo"):
            a = a.tocsr()
            fmt = "csr"
        if fmt == "csr":
            canonical = _is_scipy_sparse(a) and bool(a.has_canonical_format)
            return a.shape, "csr", a.indptr, a.indices, a.data, canonical
        return a.shape, "coo", a.row, a.col, a.data, False
    if layout == "dense" or kind_of(a) is not None or isinstance(a, (list, tuple)):
        raise TypeError(f"{name} must be a sparse CSR or COO matrix (SciPy, CuPy or torch), "
                        f"got a dense {type(a).__name__}; use gpulinalg.decomp for dense solves")
    raise TypeError(f"{name} must be a sparse CSR or COO matrix (SciPy, CuPy or torch), "
                    f"got {type(a).__name__}")


def _index_dtype(xp, nnz, n):
    return xp.int32 if max(nnz, n + 1) < 2**31 - 1 else xp.int64


def _rows_of(xp, indptr, nnz):
    return xp.searchsorted(indptr[1:].astype(xp.int64), xp.arange(nnz, dtype=xp.int64),
                           side="right")


def _csr_is_canonical(xp, indptr, indices):
    nnz = indices.size
    if nnz < 2:
        return True
    starts = xp.zeros(nnz, dtype=bool)
    inner = indptr[1:-1].astype(xp.int64)
    starts[inner[inner < nnz]] = True  # rows that begin at nnz are empty trailing rows
    return bool(((indices[1:] > indices[:-1]) | starts[1:]).all())


def _sum_into(xp, dest, values, size):
    """``out[dest[k]] += values[k]`` for every ``k`` (duplicates summed)."""
    if values.dtype.kind == "c":
        re = xp.bincount(dest, weights=values.real, minlength=size)
        im = xp.bincount(dest, weights=values.imag, minlength=size)
        return (re + 1j * im).astype(values.dtype)
    return xp.bincount(dest, weights=values, minlength=size).astype(values.dtype)


def _canonicalize(xp, rows, cols, data, n):
    nnz = cols.size
    key = rows.astype(xp.int64) * n + cols.astype(xp.int64)
    order = xp.argsort(key, kind="stable")
    skey = key[order]
    new = xp.ones(nnz, dtype=bool)
    if nnz > 1:
        new[1:] = skey[1:] != skey[:-1]
    pos = xp.cumsum(new) - 1
    dest = xp.empty(nnz, dtype=xp.int64)
    dest[order] = pos
    ukey = skey[new]
    vals = _sum_into(xp, dest, data, int(ukey.size))
    urow = ukey // n
    it = _index_dtype(xp, ukey.size, n)
    indptr = xp.searchsorted(urow, xp.arange(n + 1, dtype=xp.int64), side="left").astype(it)
    return indptr, (ukey % n).astype(it), vals, dest


def _check_indices(xp, first, cols, n, fmt, name):
    if cols.size == 0:
        return
    lo, hi = int(cols.min()), int(cols.max())
    if fmt == "coo":
        lo, hi = min(lo, int(first.min())), max(hi, int(first.max()))
    if lo < 0 or hi >= n:
        raise ValueError(f"{name} has an index out of range [0, {n}): found {lo}..{hi}")


def as_csr(a, name="A"):
    """Validate ``a`` (square, CSR or COO) and return its canonical :class:`CSRInput`.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> a = sp.coo_matrix((np.array([1.0, 2.0, 3.0]), (np.array([1, 0, 1]), np.array([1, 0, 1]))))
    >>> c = as_csr(a)
    >>> c.indptr.tolist(), c.indices.tolist(), c.data.tolist(), c.dest.tolist()
    ([0, 1, 2], [0, 1], [2.0, 4.0], [1, 0, 1])
    """
    shape, fmt, first, cols, data, canonical = _components(a, name)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {tuple(shape)}")
    n = int(shape[0])
    xp = xp_of(data)
    if np.dtype(data.dtype).kind not in "biufc":
        raise TypeError(f"{name} must be numeric, got dtype {data.dtype}")
    if fmt == "csr" and not canonical:
        canonical = _csr_is_canonical(xp, first, cols)
    if not canonical:
        _check_indices(xp, first, cols, n, fmt, name)
    if canonical:
        it = _index_dtype(xp, cols.size, n)
        return CSRInput(first.astype(it, copy=False), cols.astype(it, copy=False), data, n,
                        None, int(cols.size))
    rows = first if fmt == "coo" else _rows_of(xp, first, cols.size)
    indptr, indices, vals, dest = _canonicalize(xp, rows, cols, data, n)
    return CSRInput(indptr, indices, vals, n, dest, int(cols.size))


def pattern_values(csr, new, name="values"):
    """Values of ``new`` laid out on ``csr``'s canonical pattern.

    ``new`` is either a sparse matrix with the same pattern, or a 1-D array of the input's
    stored values in the input's own order (duplicates are summed again).
    """
    xp = xp_of(csr.data)
    kind = kind_of(csr.data)

    def move(v):  # into the package (and onto the device) of the factorized matrix
        return to_kind(v, kind) if is_array(v) else xp.asarray(v)
    if hasattr(new, "nnz") or _torch_layout(new) in ("coo", "csr"):
        other = as_csr(new, name)
        if other.n != csr.n:
            raise ValueError(f"{name} has shape ({other.n}, {other.n}), the factorization "
                             f"({csr.n}, {csr.n})")
        same = (other.indices.size == csr.indices.size
                and bool((move(other.indptr) == csr.indptr).all())
                and bool((move(other.indices) == csr.indices).all()))
        if not same:
            raise ValueError(f"{name} does not have the sparsity pattern of the factorized matrix")
        return move(other.data)
    vals = move(new)
    if vals.ndim != 1 or vals.size != csr.input_nnz:
        raise ValueError(f"{name} must be a sparse matrix with the same pattern or a 1-D array "
                         f"of {csr.input_nnz} stored values, got shape {tuple(vals.shape)}")
    if csr.dest is None:
        return vals
    return _sum_into(xp, csr.dest, vals, int(csr.indices.size))


def check_values(data, name="A"):
    """Raise ``ValueError`` when stored values hold NaN or Inf."""
    xp = xp_of(data)
    if data.size and not bool(xp.isfinite(data).all()):
        raise ValueError(f"{name} must not contain infs or NaNs")


def structure(m, tol_factor=100):
    """``(symmetric, positive_diagonal)`` of square CSR ``m`` (Hermitian for complex).

    Symmetric means ``|A - A^H| <= tol_factor * eps * max|A|`` entrywise.
    """
    if m.shape[0] == 0:
        return True, True
    diag = m.diagonal()
    posdiag = bool((diag.real > 0).all())
    if diag.dtype.kind == "c":
        posdiag = posdiag and bool((abs(diag.imag) <= abs(diag.real) * 1e-12).all())
    scale = float(abs(m.data).max()) if m.nnz else 0.0
    tol = tol_factor * np.finfo(m.dtype).eps * scale
    t = m.T.conj().tocsr() if m.dtype.kind == "c" else m.T.tocsr()
    t.sum_duplicates()
    if t.nnz == m.nnz and bool((t.indptr == m.indptr).all()) and \
            bool((t.indices == m.indices).all()):
        return bool((abs(t.data - m.data) <= tol).all()), posdiag
    d = (m - t).tocsr()
    return bool(d.nnz == 0 or float(abs(d.data).max()) <= tol), posdiag
