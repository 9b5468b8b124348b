"""Randomized SVD (Halko, Martinsson & Tropp 2011, Alg. 4.4 + 5.1), written once for any
array module (an :class:`~gpulinalg.decomp.lowrank._lowrank_engine.Engine` supplies what differs).

The formulation is GEMM-heavy and syncs once:

* the matrix is used in the orientation whose row count is the smaller one, so the final
  orthonormalization and the Rayleigh-Ritz step work on the short side;
* power iterations normalize with a mixed-precision shifted Cholesky QR (Gram matrix in
  float64, no host round trip), the last basis with Householder QR;
* the Rayleigh-Ritz step forms the ``l x l`` Gram matrix of ``B = Q^H A`` in float64 and
  diagonalizes it on the host (the single sync); single-precision results keep full accuracy
  while ``sigma_k / sigma_1 >= GRAM_MIN_RATIO``; otherwise (and always in double precision)
  it takes a Householder QR of ``B^H`` and the SVD of its ``l x l`` triangle instead.
"""

import numpy as np

from ._sketch_xp import gaussian, hermitian, high_precision, orthonormalize, svd_flip

__all__ = ["LinearOperator", "randomized_svd", "residual_norm", "GRAM_MIN_RATIO",
           "BASIS_ORTH_TOL", "NOT_FINITE", "check_finite_values"]

#: The error of an SVD whose result is not finite (only reachable with ``check_finite=False``,
#: or by overflow): a clear ValueError instead of NaNs.
NOT_FINITE = ("the truncated SVD of a is not finite: a holds NaN or infinity (check_finite=False "
              "skipped the input check), or its products overflow {dtype}")

#: Smallest ``sigma_k / sigma_1`` the Gram route serves in single precision: below it the
#: float64 Gram matrix no longer resolves ``sigma_k`` to single-precision accuracy.
GRAM_MIN_RATIO = float(np.sqrt(np.finfo(np.float64).eps / np.finfo(np.float32).eps))
#: A Cholesky-QR final basis must satisfy ``|Q^H Q - I| <= BASIS_ORTH_TOL l eps`` (else the
#: run repeats with Householder QR).
BASIS_ORTH_TOL = 10


class LinearOperator:
    """``A`` (dense or sparse, NumPy/SciPy or CuPy) seen as products with thin blocks.

    ``engine`` is the :class:`~gpulinalg.decomp.lowrank._lowrank_engine.Engine` of ``A``'s memory;
    ``transpose=True`` makes the operator ``A^T`` without copying. Where the engine asks for
    ``contiguous_products``, a dense ``A`` whose transpose is the C-contiguous one is multiplied
    through that transpose (``A z = (z^T A^T)^T``), so the GEMM reads the matrix as stored.
    """

    def __init__(self, engine, a, *, transpose=False):
        self.engine = engine
        self.xp = engine.xp
        self.sparse = hasattr(a, "tocsr")  # SciPy or CuPy sparse matrix
        self.a = a.T if transpose else a
        self.shape = tuple(self.a.shape)
        self.dtype = np.dtype(a.dtype)
        self._at = None  # A^T, C-contiguous, when the products go through it
        if self.sparse:
            self.a = self.a.tocsr()
            ah = self.a.T
            self._ah = (ah.conj() if self.dtype.kind == "c" else ah).tocsr()
        elif engine.contiguous_products and not self.a.flags.c_contiguous \
                and self.a.T.flags.c_contiguous:
            self._at = self.a.T

    def matmat(self, z):
        """``A @ z``."""
        if self._at is not None:
            return (z.T @ self._at).T
        return self.a @ z

    def rmatmat(self, q):
        """``A^H @ q`` (for dense ``A`` as ``(q^H A)^H``: conjugates only the thin block)."""
        if self.sparse:
            return self._ah @ q
        if self._at is not None:
            if self.dtype.kind == "c":
                return (self._at @ q.conj()).conj()
            return self._at @ q
        return hermitian(hermitian(q) @ self.a)


def randomized_svd(op, k, l, n_iter, normalizer, seed):
    """Top-``k`` SVD of ``op`` from an ``l``-column sketch. Returns ``(U, S, Vh, info)``.

    ``info`` records the route: the normalizer used and whether the Rayleigh-Ritz step took
    the Gram route. A run whose sketch went non-finite (a Cholesky failure on the GPU), or
    whose Cholesky-QR basis is not orthonormal to ``BASIS_ORTH_TOL l eps`` (a numerically
    rank-deficient sketch, which Cholesky QR cannot complete), is repeated with Householder
    normalization.
    """
    engine = op.engine
    m, n = op.shape
    flip = m > n
    if flip:
        op = LinearOperator(engine, op.a, transpose=True)
    q = _range_finder(op, l, n_iter, normalizer, seed)
    bt = op.rmatmat(q)
    out = _rayleigh_ritz(engine, q, bt, k, check_basis=normalizer == "CholQR")
    if out is None and normalizer != "QR":
        normalizer = "QR"
        q = _range_finder(op, l, n_iter, normalizer, seed)
        bt = op.rmatmat(q)
        out = _rayleigh_ritz(engine, q, bt, k)
    if out is None:  # not finite with Householder QR either: the input is
        raise ValueError(NOT_FINITE.format(dtype=np.dtype(op.dtype).name))
    U, S, Vh, route = out
    if flip:
        U, Vh = Vh.T, U.T
    U, Vh = svd_flip(engine, U, Vh, overwrite=True)  # both made by _rayleigh_ritz
    return U, S, Vh, {"normalizer": normalizer, "rayleigh_ritz": route, "n_iter": n_iter,
                      "sketch": l}


def check_finite_values(engine, s, dtype):
    """Raise :data:`NOT_FINITE` when the singular values ``s`` are not all finite (one small
    host copy: for the routes that do not already bring a Gram matrix to the host)."""
    if not np.isfinite(engine.to_host(s)).all():
        raise ValueError(NOT_FINITE.format(dtype=np.dtype(dtype).name))


#: Largest short side (the operator's row count, at most its column count) whose sketch is
#: drawn there and mapped through ``A^H``: the product costs ``2 m`` flops per entry of
#: ``Omega``, less than the CPU's counter-based Gaussian takes to draw it while ``m`` is small.
SHORT_DRAW_ROWS = 256


def _range_finder(op, l, n_iter, normalizer, seed):
    """Orthonormal ``Q`` (``m x l``) for the range of ``(A A^H)^q A Omega``; ``Omega`` is a
    Gaussian ``n x l`` sketch, or ``A^H G`` (each column scaled by its largest entry) of a
    Gaussian ``m x l`` ``G`` where ``m <= SHORT_DRAW_ROWS`` (the same on every engine, so a
    seed still gives the same answer on the CPU and the GPU)."""
    engine = op.engine
    m, n = op.shape
    if m <= SHORT_DRAW_ROWS and m < n:  # half a power step more, for fewer numbers drawn
        omega = op.rmatmat(gaussian(engine, (m, l), op.dtype, seed))
        size = abs(omega).max(axis=0)
        omega = omega / engine.xp.where(size > 0, size, 1)
    else:
        omega = gaussian(engine, (n, l), op.dtype, seed)
    y = op.matmat(omega)
    for _ in range(n_iter):
        q = orthonormalize(engine, y, normalizer)
        z = orthonormalize(engine, op.rmatmat(q), normalizer)
        y = op.matmat(z)
    if normalizer == "CholQR":  # three passes: orthonormal to working precision, GEMM-bound
        return orthonormalize(engine, y, "CholQR", passes=3)
    return orthonormalize(engine, y, "QR")


def _rayleigh_ritz(engine, q, bt, k, check_basis=False):
    """SVD of ``B = bt^H`` (``l x n``) lifted by ``q``; ``None`` when the sketch is not finite
    (or, with ``check_basis``, ``q`` is not orthonormal)."""
    xp, to_host = engine.xp, engine.to_host
    dtype = q.dtype
    hi = high_precision(dtype)
    btd = xp.ascontiguousarray(bt, dtype=hi)
    gram = hermitian(btd) @ btd
    if check_basis:  # Q^H Q comes along in the same transfer
        gram, qtq = to_host(xp.stack([gram, (hermitian(q) @ q).astype(hi, copy=False)]))
    else:
        gram, qtq = to_host(gram), None  # the one device -> host sync
    if not np.isfinite(gram).all():
        return None
    if qtq is not None:
        l = q.shape[1]
        err = np.abs(qtq - np.eye(l)).max()
        if not err <= BASIS_ORTH_TOL * l * np.finfo(dtype).eps:
            return None
    if dtype not in (np.float32, np.complex64):
        return _rayleigh_ritz_qr(engine, q, bt, k)
    lam, w = np.linalg.eigh(gram)
    lam, w = lam[::-1], w[:, ::-1]
    if not (k == 0 or lam[k - 1] > (GRAM_MIN_RATIO ** 2) * lam[0]):
        return _rayleigh_ritz_qr(engine, q, bt, k)
    sig = np.sqrt(lam[:k])
    l = w.shape[0]
    packed = engine.from_host(np.concatenate([w[:, :k], w[:, :k] / sig, sig[None]]))  # one trip
    lifted = engine.lift(q, btd, packed, k)  # one kernel, where there is one
    if lifted is not None:
        return (*lifted, "gram")
    U = q @ packed[:l].astype(dtype)
    Vh = hermitian(btd @ packed[l:2 * l]).astype(dtype)
    return U, packed[2 * l].real.astype(dtype.char.lower()), Vh, "gram"


def _rayleigh_ritz_qr(engine, q, bt, k):
    from_host = engine.from_host
    qb, r = engine.xp.linalg.qr(bt)
    u_r, s, vh_r = np.linalg.svd(hermitian(engine.to_host(r).astype(high_precision(q.dtype))))
    U = q @ from_host(np.ascontiguousarray(u_r[:, :k])).astype(q.dtype)
    Vh = from_host(np.ascontiguousarray(vh_r[:k])).astype(q.dtype) @ hermitian(qb)
    return U, from_host(s[:k].astype(q.dtype.char.lower())), Vh, "qr"


def residual_norm(op, U, S, Vh, *, n_probe=4, n_power=3, seed=0):
    """Estimate ``||A - U diag(S) Vh||_2`` by block power iteration on the residual.

    A lower estimate that converges to the spectral norm (each step multiplies the error of
    the estimate by about ``(sigma_2(E)/sigma_1(E))^2``); with ``n_power=3`` it is typically
    within a few percent.
    """
    engine = op.engine
    n = op.shape[1]
    if n == 0 or op.shape[0] == 0:
        return 0.0
    uh = hermitian(U)
    sv = S.astype(U.dtype)[:, None] * Vh

    def apply(x):
        return op.matmat(x) - U @ (sv @ x)

    def apply_h(y):
        return op.rmatmat(y) - hermitian(sv) @ (uh @ y)

    x = orthonormalize(engine, gaussian(engine, (n, min(n_probe, n)), op.dtype, seed), "QR")
    for _ in range(n_power):
        x = orthonormalize(engine, apply_h(apply(x)), "QR")
    y = engine.to_host(apply(x)).astype(high_precision(op.dtype))
    return float(np.linalg.norm(y, 2)) if y.size else 0.0
