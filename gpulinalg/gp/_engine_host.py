"""The CPU engine of gp: ``la`` for the bodies of :mod:`._solve_xp` and :mod:`._fit_xp`, and
the dispatcher's CPU functions of gp's four operations (:class:`._fit_xp.Operations` on it).

``la`` is this module: decomp's internal SciPy layer (:mod:`gpulinalg.decomp._factor_host`,
NumPy arrays), :data:`FULL_SOLVE_MAX_N`, :func:`keep` and :func:`training`. The GPU twin, with the same
signatures, is :mod:`._engine_cuda`.
"""

import sys

from ..decomp._factor_host import cho_solve, cholesky, logdet, solve_triangular
from ._fit_xp import Operations

__all__ = ["exact_gp_solve", "log_marginal_likelihood", "fit", "predict", "cholesky",
           "cho_solve", "solve_triangular", "logdet", "keep", "training", "FULL_SOLVE_MAX_N"]

#: ``L^-1`` by one triangular solve against the identity up to this order, else by strips
#: (:func:`._fit_xp.inverse_strips`). 0: always strips, whose third of the flops wins on the
#: CPU (2.8 against 3.2 s at n = 4000).
FULL_SOLVE_MAX_N = 0


def keep(train, x, L, alpha):
    """Hand ``fit``'s factor (NumPy) to the ``train`` holder."""
    train.L = L


def training(train):
    """The fitted ``(x, L, alpha)`` of predict's ``train`` holder: its NumPy arrays."""
    return train.host


_OPS = Operations(sys.modules[__name__])  # la: this module, read at call time
exact_gp_solve, log_marginal_likelihood = _OPS.exact_gp_solve, _OPS.log_marginal_likelihood
fit, predict = _OPS.fit, _OPS.predict
