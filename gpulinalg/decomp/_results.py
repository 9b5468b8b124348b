"""Result types of the decompositions (NamedTuples, JAX style: always ``Vh``, never ``V``)."""

from typing import Any, NamedTuple


class QRResult(NamedTuple):
    """``A = Q @ R``."""

    Q: Any
    R: Any


class SVDResult(NamedTuple):
    """``A = U @ diag(S) @ Vh``; ``S`` in descending order."""

    U: Any
    S: Any
    Vh: Any


class EighResult(NamedTuple):
    """``A @ eigenvectors = eigenvectors * eigenvalues``; eigenvalues ascending (NumPy's names)."""

    eigenvalues: Any
    eigenvectors: Any


class LstsqResult(NamedTuple):
    """SciPy's ``(x, residues, rank, s)`` of a least-squares solve."""

    x: Any
    residues: Any
    rank: Any
    s: Any


class SlogdetResult(NamedTuple):
    """``det A = sign * exp(logabsdet)``, as ``numpy.linalg.slogdet``'s result."""

    sign: Any
    logabsdet: Any
