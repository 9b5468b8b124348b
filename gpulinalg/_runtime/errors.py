"""Exception and warning taxonomy shared by every gpulinalg module."""

from typing import Any

import numpy as np

__all__ = [
    "LinAlgError",
    "NotPositiveDefiniteError",
    "SingularMatrixError",
    "GPUUnavailableError",
    "OutOfMemoryError",
    "FallbackWarning",
    "ResidualWarning",
    "IllConditionedWarning",
]


class LinAlgError(np.linalg.LinAlgError):
    """Base class of gpulinalg's numerical failures (a ``numpy.linalg.LinAlgError``)."""


class NotPositiveDefiniteError(LinAlgError):
    """A Cholesky factorization met a leading minor that is not positive definite.

    Parameters
    ----------
    minor : int
        1-based order of the first leading minor that is not positive definite
        (LAPACK's ``info``).
    batch_index : tuple of int or None
        Index into the batch dimensions of the failing matrix, ``None`` for a single matrix.
    """

    def __init__(self, minor, batch_index=None, message=None):
        self.minor = int(minor)
        self.batch_index = batch_index
        if message is None:
            where = "" if batch_index is None else f" of batch entry {tuple(batch_index)}"
            message = (f"matrix{where} is not positive definite: the leading minor of "
                       f"order {self.minor} is not positive")
        super().__init__(message)

    def __reduce__(self):  # survives pickling (Dask workers in other processes send it back)
        return type(self), (self.minor, self.batch_index, str(self))


class SingularMatrixError(LinAlgError):
    """A factorization or solve found the matrix (numerically) singular."""


class GPUUnavailableError(RuntimeError):
    """``backend="gpu"`` was requested but no usable GPU (or GPU library) is present."""


class OutOfMemoryError(MemoryError):
    """A call was not started because its memory estimate is over what the machine can give.

    A ``MemoryError``, so code that catches SciPy's or NumPy's out-of-memory error catches it.

    Parameters
    ----------
    message : str
        What was needed, what exists, and the options.
    needed : int
        The call's estimate, in bytes.
    allowed : int or None
        The bytes it could have used (the configured share of ``available``).
    available : int or None
        The bytes the machine reported available.
    where : str
        ``"host"`` or ``"gpu"``.
    """

    def __init__(self, message, needed=0, allowed=None, available=None, where="host"):
        super().__init__(message)
        self.needed, self.allowed, self.available, self.where = needed, allowed, available, where

    def __reduce__(self):  # survives pickling (Dask workers in other processes send it back)
        return type(self), (str(self), self.needed, self.allowed, self.available, self.where)


class FallbackWarning(RuntimeWarning):
    """An operation ran on the CPU although the GPU was preferred (out of memory, no GPU...)."""


class ResidualWarning(RuntimeWarning):
    """A solution's backward error is above the requested tolerance."""


class IllConditionedWarning(RuntimeWarning):
    """The input is ill conditioned; results may be inaccurate (like SciPy's ``LinAlgWarning``)."""


_PACKAGE_DIR = __file__.rsplit("_runtime", 1)[0]  # .../gpulinalg/


def warn(message, category, *, skip=0):
    """``warnings.warn`` pointing at the first frame outside gpulinalg (the user's line), however
    deep inside the library the warning is raised (pandas' ``find_stack_level`` idea; Python
    3.12's ``skip_file_prefixes`` does the same)."""
    import sys
    import warnings
    frame: Any = sys._getframe(1)
    level = 2  # stacklevel 2: the caller of warn()
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level + skip)
