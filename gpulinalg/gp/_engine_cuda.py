"""The GPU engine of gp: ``la`` for the bodies of :mod:`._solve_xp` and :mod:`._fit_xp`, and
the dispatcher's GPU functions of gp's four operations (:class:`._fit_xp.Operations` on it).

``la`` is this module: decomp's internal CuPy layer (:func:`cholesky`, :func:`cho_solve`,
:func:`logdet` of :mod:`gpulinalg.decomp._cholesky_cuda`, :func:`solve_triangular` of
:mod:`gpulinalg.decomp._triangular_cuda`: CuPy arrays on the dispatcher's stream, no second
validation, dispatch or budget question), :data:`FULL_SOLVE_MAX_N`, :func:`keep` and
:func:`training`. The CPU twin is :mod:`._engine_host`.
"""

import sys

from .._runtime import arrays as _arrays
from .._runtime.dispatch import note
from ..decomp._cholesky_cuda import cho_solve, cholesky, logdet
from ..decomp._triangular_cuda import solve_triangular
from ._fit_xp import Operations

__all__ = ["exact_gp_solve", "log_marginal_likelihood", "fit", "predict", "cholesky",
           "cho_solve", "solve_triangular", "logdet", "keep", "training", "FULL_SOLVE_MAX_N"]

#: Up to this order the strips of ``L^-1`` are views of one triangular solve against the whole
#: identity (:func:`._fit_xp.inverse_strips`): n^3 flops in one large call ran faster on the
#: H200 than n^3/3 flops in strip solves (``python -m benchmarks.gp_phases``: 1.6 vs 3.2 ms at
#: n = 2000, 20 vs 37 ms at 8000, 108 vs 110 ms at 16000).
FULL_SOLVE_MAX_N = 16384


def keep(train, x, L, alpha):
    """Hand ``fit``'s factor to the ``train`` holder: with ``train.keep`` (a model large enough
    to stay) it stays on the GPU for ``predict``, and reaches the host only if ``L_`` is read;
    otherwise it is downloaded now (a small model)."""
    if train.keep:
        train.device = (x, L, alpha)
    else:
        train.L = _arrays.to_host(L)


def training(train):
    """The fitted ``(x, L, alpha)`` of predict's ``train`` holder on the GPU: uploaded here (on
    the operation's stream; the dispatcher leaves the holder alone) and kept in
    ``train.device`` for the next call when ``train.keep`` (a model large enough to stay)."""
    if train.device is not None:
        return train.device
    host = train.host
    note(uploaded_training_bytes=sum(0 if v is None else v.nbytes for v in host),
         kept_for_next_calls=bool(train.keep))
    arrays = tuple(None if v is None else _arrays.to_device(v) for v in host)
    if train.keep:
        train.device = arrays
    return arrays


_OPS = Operations(sys.modules[__name__])  # la: this module, read at call time
exact_gp_solve, log_marginal_likelihood = _OPS.exact_gp_solve, _OPS.log_marginal_likelihood
fit, predict = _OPS.fit, _OPS.predict
