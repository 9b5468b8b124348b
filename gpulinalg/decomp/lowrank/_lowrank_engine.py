"""What the low-rank algorithms are handed by the GPU/CPU twin that runs them: an :class:`Engine`.

The algorithms (``_sketch_xp``, ``_randomized_xp``, ``_truncated_xp``, ``_ooc_xp``, ``_pca_xp``)
are written once over ``engine.xp``. Where the GPU and the CPU truly differ (a CUDA kernel
against a NumPy formula, a host round trip that is a no-op on the CPU, SciPy against CuPy's
solvers) they call a field of the engine: ``_sketch_host.ENGINE`` on the CPU,
``_sketch_cuda.engine()`` on the GPU. This file holds the type only (no array code).
"""

import dataclasses
from typing import Any
from collections.abc import Callable

__all__ = ["Engine"]


@dataclasses.dataclass(frozen=True, slots=True)
class Engine:
    """The backend-specific pieces of the randomized low-rank methods.

    Attributes
    ----------
    xp : module
        The array module (``numpy`` or ``cupy``).
    auto_normalizer : str
        What ``power_iteration_normalizer="auto"`` means here: ``"CholQR"`` on the GPU (a few
        GEMMs and one fused kernel, no sync), ``"LU"`` on the CPU (scikit-learn's choice).
    gaussian_real : callable ``(shape, dtype, seed) -> array``
        Standard normal numbers of a real ``dtype`` from a 64-bit ``seed`` (splitmix64 of a
        counter, then Box-Muller: the same numbers on both engines).
    to_host, from_host : callable ``(x) -> array``
        Device -> NumPy and NumPy -> device (the identity on the CPU).
    svd : callable ``(a) -> (u, s, vh)``
        Thin SVD of a dense matrix.
    cholesky : callable ``(g) -> L or None``
        Lower Cholesky factor; ``None`` where the engine checks and finds ``g`` not positive
        definite (the GPU does not check: a failure leaves NaNs, found at the end of the run).
    solve_lower : callable ``(L, B) -> X``
        ``L X = B`` for lower triangular ``L``.
    lu : callable ``(y) -> PL``
        The permuted lower factor of a partial-pivoting LU.
    chol_inverse : callable ``(g, shift_factor, dtype) -> R^-1 or None``
        A fused shifted-Cholesky inverse of a small Gram matrix, or ``None`` where there is none
        (then the library Cholesky and triangular solve run).
    flip_signs : callable ``(U, Vh, rows, u_based, overwrite) -> (U, Vh) or None``
        The ``svd_flip`` sign convention in one kernel, or ``None`` (then array operations).
    lift : callable ``(q, btd, packed, k) -> (U, S, Vh) or None``
        The Rayleigh-Ritz lift ``U = Q W``, ``Vh = (B^H W / sigma)^T``, ``S`` in one kernel,
        or ``None`` (then array operations).
    contiguous_products : bool
        Whether a dense operator's products pass its C-contiguous orientation to the GEMM
        untransposed and transpose the thin block instead (NumPy's BLAS runs the transposed
        orientation markedly slower); ``False`` keeps the products as written.
    sum_squares : callable ``(x) -> float64`` or None
        The sum of the squares of a dense matrix's entries, each squared in float64, read in
        cache-sized row panels; ``None``: one pass over a float64 copy (a device's way).
    gram : callable ``(x) -> x^H x or None``, or None
        The Gram matrix of a dense matrix by the engine's own route where it has one for
        ``x`` (``None`` from it, or no callable: the plain product ``x^H @ x``).
    """

    xp: Any
    auto_normalizer: str
    gaussian_real: Callable
    to_host: Callable
    from_host: Callable
    svd: Callable
    cholesky: Callable
    solve_lower: Callable
    lu: Callable
    chol_inverse: Callable
    flip_signs: Callable
    lift: Callable
    contiguous_products: bool = False
    sum_squares: Callable | None = None
    gram: Callable | None = None
