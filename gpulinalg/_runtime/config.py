"""Process-wide policy (``gpulinalg.config``), settable globally or per thread with ``with``.

``config(**changes)`` applies ``changes`` to the process-wide settings at once. Used as a context
manager, the same call instead applies them only to the calling thread, until the block ends.

How one call serves both: each ``config`` object is a *pending* layer on top of the committed
process-wide settings. ``__enter__`` removes its layer (the block then holds the changes for its
thread alone); an object dropped without being entered (the statement form) is committed. Layers
are removed by identity, so two threads entering ``with config(...)`` at once never leave each
other's changes behind, and blocks nest; the innermost wins.
"""

import dataclasses
import threading
from enum import Enum

__all__ = ["Backend", "Fallback", "SparseGPUSolver", "Settings", "config", "get_config"]


class Backend(str, Enum):
    AUTO = "auto"
    GPU = "gpu"
    CPU = "cpu"


class Fallback(str, Enum):
    CPU = "cpu"
    RAISE = "raise"


class SparseGPUSolver(str, Enum):
    AUTO = "auto"
    CUDSS = "cudss"
    CUSOLVERSP = "cusolversp"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Validated policy values.

    Attributes
    ----------
    backend : Backend
        ``auto`` picks the GPU when present and worthwhile, ``gpu`` insists, ``cpu`` never uses it.
    fallback : Fallback
        What a GPU run that runs out of memory does: run on the CPU (``cpu``) or raise (``raise``).
    vram_headroom : float
        Fraction of the device's total memory kept free when judging whether a job fits.
    autotune : bool
        Autotune matmul plans (cached with the plan).
    plan_cache_size : int
        Most planned objects kept per thread and per cache.
    sparse_gpu_solver : SparseGPUSolver
        Which GPU library serves sparse direct solves: ``auto`` (cuDSS when it is installed,
        else cuSOLVER-Sp), ``cudss`` or ``cusolversp`` (a missing library is then an error).
    """

    backend: Backend = Backend.AUTO
    fallback: Fallback = Fallback.CPU
    vram_headroom: float = 0.05
    autotune: bool = False
    plan_cache_size: int = 64
    sparse_gpu_solver: SparseGPUSolver = SparseGPUSolver.AUTO

    def __post_init__(self):
        object.__setattr__(self, "backend", _enum(Backend, self.backend, "backend"))
        object.__setattr__(self, "fallback", _enum(Fallback, self.fallback, "fallback"))
        if not 0.0 <= float(self.vram_headroom) < 1.0:
            raise ValueError(f"vram_headroom must be in [0, 1), got {self.vram_headroom!r}")
        if int(self.plan_cache_size) < 1:
            raise ValueError(f"plan_cache_size must be >= 1, got {self.plan_cache_size!r}")
        object.__setattr__(self, "autotune", bool(self.autotune))
        object.__setattr__(self, "sparse_gpu_solver",
                           _enum(SparseGPUSolver, self.sparse_gpu_solver, "sparse_gpu_solver"))


def _enum(kind, value, name):
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"{name} must be one of {choices}, got {value!r}") from None


_lock = threading.Lock()
_committed = Settings()
_pending = []  # config objects created but neither entered nor dropped, oldest first
_global = _committed  # _committed with every pending layer applied, in order


class _Local(threading.local):
    stack = None  # class default: get_config() never pays for a missing-attribute lookup


_local = _Local()


def get_config():
    """Return the :class:`Settings` in force for the calling thread."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else _global


class thread_config:
    """Apply ``changes`` to the calling thread only, for a ``with`` block.

    Unlike :class:`config`, it never touches the process-wide settings, not even between the
    call and ``__enter__`` (where another thread sees a pending ``config`` layer).
    """

    def __init__(self, **changes):
        unknown = set(changes) - {f.name for f in dataclasses.fields(Settings)}
        if unknown:
            raise TypeError(f"{type(self).__name__}() got unknown settings {sorted(unknown)}")
        self._changes = changes

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(dataclasses.replace(get_config(), **self._changes))
        return stack[-1]

    def __exit__(self, *exc):
        _local.stack.pop()
        return False

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._changes.items())})"


class config(thread_config):
    """Set gpulinalg's policy globally, or for a ``with`` block in the calling thread.

    Parameters
    ----------
    backend : {"auto", "gpu", "cpu"}, optional
    fallback : {"cpu", "raise"}, optional
    vram_headroom : float, optional
        Fraction of total device memory kept free, in ``[0, 1)``.
    autotune : bool, optional
    plan_cache_size : int, optional
    sparse_gpu_solver : {"auto", "cudss", "cusolversp"}, optional

    Examples
    --------
    >>> import gpulinalg
    >>> with gpulinalg.config(backend="cpu"):
    ...     gpulinalg.get_config().backend.value
    'cpu'
    >>> gpulinalg.get_config().backend.value
    'auto'
    """

    def __init__(self, **changes):
        super().__init__(**changes)
        dataclasses.replace(_committed, **changes)  # validate before anything changes
        self._state = "pending"
        with _lock:
            _pending.append(self)
            _recompute()

    def __enter__(self):
        with _lock:
            if self._state == "pending":
                self._state = "entered"
                _pending[:] = [c for c in _pending if c is not self]
                _recompute()
        return super().__enter__()

    def __del__(self):
        # dropped without a ``with``: the global-setter form; commit it in creation order
        if getattr(self, "_state", None) != "pending" or _lock is None:  # None: shutting down
            return
        global _committed
        with _lock:
            self._state = "committed"
            while _pending and _pending[0]._state == "committed":
                _committed = dataclasses.replace(_committed, **_pending.pop(0)._changes)
            _recompute()


def _recompute():
    """Rebuild the process-wide settings from the committed ones and the pending layers."""
    global _global
    settings = _committed
    for layer in _pending:
        settings = dataclasses.replace(settings, **layer._changes)
    _global = settings
