"""The computation of :func:`~gpulinalg.decomp.truncated_svd`, written once: in core on any
array module (dense or sparse), or streamed from the host by either streamer."""

from ..._runtime import dispatch as _dispatch
from ._ooc_xp import streamed_residual_norm, streamed_svd
from ._randomized_xp import LinearOperator, check_finite_values, randomized_svd, residual_norm
from .._results import SVDResult
from ._sketch_options import resolve_normalizer
from ._sketch_xp import svd_flip
from ._truncated_plan import LowRankSVDResult

__all__ = ["run", "streamed"]


def _finish(op, U, S, Vh, plan, info):
    _dispatch.note(**info)
    if plan.error_estimate:
        return LowRankSVDResult(U, S, Vh, residual_norm(op, U, S, Vh, seed=plan.seed + 1))
    return SVDResult(U, S, Vh)


def _exact(engine, a, plan):
    u, s, vh = engine.svd(a)
    check_finite_values(engine, s[:plan.k], a.dtype)  # LAPACK/cuSOLVER may return NaNs
    U, Vh = svd_flip(engine, u[:, :plan.k], vh[:plan.k])
    return U, s[:plan.k], Vh


def run(engine, a, plan, gesvdr=None):
    """The in-core computation on ``engine.xp`` arrays (dense or sparse) as ``plan`` says.

    ``gesvdr``: the engine's own randomized SVD ``(a, k, p, n_iter) -> (U, S, Vh)`` for
    ``method="gesvdr"`` (cuSOLVER's on the GPU); without one the randomized algorithm runs.
    """
    op = LinearOperator(engine, a)
    method = plan.method
    if method in ("exact", "gesvdr") and op.sparse:
        a = a.toarray()
    # Xgesvdr needs at least one oversampling column: without room for it, the exact SVD
    if method == "exact" or (method == "gesvdr" and plan.sketch <= plan.k):
        U, S, Vh = _exact(engine, a, plan)
        return _finish(op, U, S, Vh, plan, {"method": "exact"})
    if method == "gesvdr" and gesvdr is not None:
        U, S, Vh = gesvdr(a, plan.k, plan.sketch - plan.k, plan.n_iter)
        return _finish(op, U, S, Vh, plan, {"method": "gesvdr"})
    U, S, Vh, info = randomized_svd(op, plan.k, plan.sketch, plan.n_iter,
                                    resolve_normalizer(engine, plan.normalizer), plan.seed)
    return _finish(op, U, S, Vh, plan, {"method": "randomized", **info})


def streamed(streamer, plan):
    """Out-of-core randomized SVD (any ``method`` other than exact runs the streamed HMT)."""
    U, S, Vh, info = streamed_svd(streamer, plan.k, plan.sketch, plan.n_iter, plan.seed,
                                  progress=plan.progress)
    _dispatch.note(method="randomized-out-of-core", **info)
    if plan.error_estimate:
        err = streamed_residual_norm(streamer, Vh, seed=plan.seed + 1)
        streamer.finish()
        return LowRankSVDResult(U, S, Vh, err)
    return SVDResult(U, S, Vh)
