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
