"""Options of the randomized low-rank methods: the power-iteration normalizers and the seed."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["NORMALIZERS", "resolve_normalizer", "seed_of"]

#: Normalizers between power iterations. ``CholQR``: mixed-precision shifted Cholesky QR
#: (Gram matrix in float64/complex128, one GEMM-shaped pass); ``QR``: Householder;
#: ``LU``: partial-pivoting LU (scikit-learn's choice); ``none``: plain power iteration.
NORMALIZERS = ("CholQR", "QR", "LU", "none")

_MASK64 = (1 << 64) - 1


def resolve_normalizer(engine: Any, name: str) -> str:
    """``name``, or for ``"auto"`` the engine's own choice (``engine.auto_normalizer``):
    ``CholQR`` on the GPU (a few GEMMs and one fused kernel, no sync), ``LU`` on the CPU
    (partial-pivoting LU, scikit-learn's choice: about half a Householder QR's work, which made
    a randomized PCA of a 179700 x 64 matrix 1.5x faster)."""
    return engine.auto_normalizer if name == "auto" else name


def seed_of(random_state: Any) -> int:
    """A 64-bit seed from ``random_state`` (None, int, numpy Generator or RandomState).

    Equal integers give equal seeds, so the same ``random_state`` gives the same sketch on
    the CPU and on the GPU.

    Examples
    --------
    >>> seed_of(0) == seed_of(0), seed_of(0) == seed_of(1)
    (True, False)
    """
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63, dtype=np.int64))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return int(np.random.SeedSequence(int(random_state) & _MASK64)
                   .generate_state(1, np.uint64)[0])
    raise TypeError("random_state must be None, an int, a numpy.random.Generator or a "
                    f"numpy.random.RandomState, got {type(random_state).__name__}")
