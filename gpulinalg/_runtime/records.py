"""What the dispatcher records for the calling thread: :class:`RunRecord` and
:func:`last_run`, the details a running engine adds (:func:`note`), and the device bytes the
decision granted to the run in progress (:func:`granted_bytes`, :func:`headroom_bytes`).

The dispatcher keeps a record's fields as a plain tuple in the thread's slot (a frozen
dataclass costs a microsecond to build, more than a small product); :func:`last_run` makes the
:class:`RunRecord` when it is asked for, once.
"""

import dataclasses
import threading
from typing import Any

__all__ = ["RunRecord", "last_run", "note", "granted_bytes", "headroom_bytes", "mark_recorded"]


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What the last operation of a thread did (see :func:`gpulinalg.last_run`)."""

    op: str
    backend: str  # "gpu", "gpu-out-of-core", "cpu", "dask" (a lazy graph), or "none"
    device: object  # GPU index, or "cpu"
    fell_back: bool
    reason: str
    seconds: float
    details: dict = dataclasses.field(default_factory=dict)


class _Local(threading.local):
    # class defaults: lookups on the hot path never raise AttributeError
    record: Any = None
    details: Any = None
    granted: Any = None
    headroom: Any = None
    fp_errors: Any = None


#: The calling thread's slot: ``record`` (the fields of its last :class:`RunRecord`, as a
#: tuple until :func:`last_run` makes the record), ``details`` (the dict :func:`note` fills
#: during a run), ``granted`` and ``headroom`` (see :func:`granted_bytes`), ``fp_errors``
#: (NumPy's floating-point errors of a CPU run, told once at the caller's line).
local = _Local()


def last_run() -> "RunRecord | None":
    """The :class:`RunRecord` of the calling thread's last operation (``None`` before any).

    Examples
    --------
    >>> import numpy as np, gpulinalg
    >>> with gpulinalg.config_context(backend="cpu"):
    ...     _ = gpulinalg.decomp.cholesky(np.eye(2))
    >>> gpulinalg.last_run().backend
    'cpu'
    """
    rec = local.record
    if type(rec) is tuple:
        op, backend, device, fell_back, reason, seconds, details = rec
        rec = object.__new__(RunRecord)  # the frozen dataclass, without its per-field setattr
        rec.__dict__.update(op=op, backend=backend, device=device, fell_back=fell_back,
                            reason=reason, seconds=seconds, details=details)
        local.record = rec
    return rec


def note(**details: object) -> None:
    """Let the running operation add details (iterations, residuals...) to its record."""
    pending = local.details
    if pending is not None:
        pending.update(details)


def granted_bytes():
    """Device bytes the dispatcher found available for the out-of-core run in progress on this
    thread (``None`` outside one): a streaming GPU function sizes its panels from this figure
    instead of asking the budget again.

    Examples
    --------
    >>> granted_bytes() is None
    True
    """
    return local.granted


def headroom_bytes():
    """Device bytes beyond its estimate that the dispatcher found available for the GPU run in
    progress on this thread (``None`` outside one): what a GPU function may spend on an
    optional buffer (a faster route's workspace) instead of asking the budget again, or trying
    the allocation and catching its failure.

    Examples
    --------
    >>> headroom_bytes() is None
    True
    """
    return local.headroom


def mark_recorded(exc):
    """Tag ``exc`` as handled and recorded by the dispatcher (see :func:`.dispatch.front_door`)."""
    try:
        exc._gpulinalg_recorded = True
    except (AttributeError, TypeError):  # an exception type without a __dict__
        pass
    return exc
