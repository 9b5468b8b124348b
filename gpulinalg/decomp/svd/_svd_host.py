"""CPU engine of the SVD: SciPy's ``svd``, looped over batches; the twin of :mod:`._svd_cuda`."""

import numpy as np

from ..._runtime.validation import check_finite
from .._checks import over_batch, writable
from .._results import SVDResult
from ._svd_xp import flip_signs

__all__ = ["svd"]


def svd(a, full_matrices, compute_uv, driver, dtype, lapack_driver="gesdd", overwrite_a=False,
        finite=False):
    """SciPy's ``svd`` with LAPACK ``lapack_driver`` (``driver`` picks the GPU kernel and is
    not read here), with deterministic signs; ``finite``: SciPy's ``check_finite`` of ``a``."""
    import scipy.linalg
    if finite:
        check_finite(a, "a")
    a = np.asarray(a, dtype=dtype)
    overwrite = writable(a, overwrite_a) and a.ndim == 2

    def one(x):
        out = scipy.linalg.svd(x, full_matrices=full_matrices, compute_uv=compute_uv,
                               overwrite_a=overwrite, check_finite=False,
                               lapack_driver=lapack_driver)
        return SVDResult(*out) if compute_uv else out
    res = over_batch(one, a)
    # the factors are SciPy's fresh outputs (or over_batch's stacks): signs set in place
    return SVDResult(*flip_signs(res.U, res.S, res.Vh, np, overwrite=True)) if compute_uv \
        else res
