"""CPU functions of the GP operations: the bodies of :mod:`._gpu` on NumPy arrays, with every
nested ``gpulinalg.decomp`` call pinned to the CPU (SciPy/LAPACK)."""

import functools

from .._runtime.config import config
from . import _core, _gpu

__all__ = ["lml_body", "fit_body", "predict_body", "solve_body"]


def _on_cpu(body):
    @functools.wraps(body)
    def run(*args, **kwargs):
        with config(backend="cpu"):
            return body(*args, **kwargs)
    return run


lml_body = _on_cpu(_gpu.lml_body)
fit_body = _on_cpu(_gpu.fit_body)
predict_body = _on_cpu(_gpu.predict_body)
solve_body = _on_cpu(_core.solve_body)
