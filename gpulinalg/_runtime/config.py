"""gpulinalg's policy: a process default, and context-local overrides for ``with`` blocks.

scikit-learn's ``set_config`` / ``config_context`` are the model, and both exist here:

* :func:`set_config` changes the process default (every thread that has no block of its own);
* :class:`config_context` changes the settings of the current context (the calling thread, or
  the current asyncio task) for a ``with`` block, and restores exactly what was there;
* :class:`config` is another name of :class:`config_context` (``with gpulinalg.config(...):``).

A block object that is made but never entered changes nothing; it warns (``RuntimeWarning``)
when it is collected, since the caller most likely meant :func:`set_config`.

The override lives in a :class:`contextvars.ContextVar`, so new threads start from the process
default, and asyncio tasks see the block of the code that created them.
"""

import contextvars
import dataclasses
import threading
import warnings
from enum import Enum
from typing import Any

__all__ = ["Backend", "Fallback", "SparseGPUSolver", "Settings", "config", "config_context",
           "get_config", "set_config"]


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
    custom_kernels : bool
        Let routes take gpulinalg's hand-written CUDA kernels where they were measured to pay
        (on by default only on the compute capabilities they were measured on); ``False`` sends
        every operation to its cuSOLVER/cuBLAS/CuPy route.
    host_memory_share : float
        Share of the available host memory (psutil's ``available``, else ``MemAvailable``,
        within a cgroup's limit) that one CPU run may use, in ``(0, 1]``. A CPU run (the CPU
        backend, or a fallback from the GPU) whose host-byte estimate is over it is not
        started: it raises :class:`~gpulinalg.OutOfMemoryError` (a ``MemoryError``) saying
        what it needed, what the machine has and the options. Default 0.9.
    """

    backend: Backend = Backend.AUTO
    fallback: Fallback = Fallback.CPU
    vram_headroom: float = 0.05
    autotune: bool = False
    plan_cache_size: int = 64
    sparse_gpu_solver: SparseGPUSolver = SparseGPUSolver.AUTO
    custom_kernels: bool = True
    host_memory_share: float = 0.9

    def __post_init__(self):
        object.__setattr__(self, "backend", _enum(Backend, self.backend, "backend"))
        object.__setattr__(self, "fallback", _enum(Fallback, self.fallback, "fallback"))
        if not 0.0 <= float(self.vram_headroom) < 1.0:
            raise ValueError(f"vram_headroom must be in [0, 1), got {self.vram_headroom!r}")
        if int(self.plan_cache_size) < 1:
            raise ValueError(f"plan_cache_size must be >= 1, got {self.plan_cache_size!r}")
        if not 0.0 < float(self.host_memory_share) <= 1.0:
            raise ValueError(f"host_memory_share must be in (0, 1], got {self.host_memory_share!r}")
        object.__setattr__(self, "host_memory_share", float(self.host_memory_share))
        object.__setattr__(self, "autotune", bool(self.autotune))
        object.__setattr__(self, "custom_kernels", bool(self.custom_kernels))
        object.__setattr__(self, "sparse_gpu_solver",
                           _enum(SparseGPUSolver, self.sparse_gpu_solver, "sparse_gpu_solver"))


def _enum(kind, value, name):
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"{name} must be one of {choices}, got {value!r}") from None


_lock = threading.Lock()
_default = Settings()
_override: contextvars.ContextVar = contextvars.ContextVar("gpulinalg_config", default=None)
_FIELDS = frozenset(f.name for f in dataclasses.fields(Settings))


def get_config() -> Settings:
    """Return the :class:`Settings` in force for the calling thread (or asyncio task)."""
    settings = _override.get()
    return _default if settings is None else settings


def set_config(**changes: Any) -> Settings:
    """Change the process default settings (what every context without a block of its own sees).

    Parameters
    ----------
    **changes
        Any field of :class:`Settings` (``backend``, ``fallback``, ``vram_headroom``,
        ``autotune``, ``plan_cache_size``, ``sparse_gpu_solver``, ``custom_kernels``,
        ``host_memory_share``).

    Returns
    -------
    Settings
        The new process default.

    Examples
    --------
    >>> import gpulinalg
    >>> before = gpulinalg.get_config()
    >>> gpulinalg.set_config(backend="cpu").backend.value
    'cpu'
    >>> gpulinalg.set_config(backend=before.backend).backend.value
    'auto'
    """
    global _default
    _check_names(changes, "set_config")
    with _lock:
        _default = dataclasses.replace(_default, **changes)
        return _default


def _check_names(changes, who):
    unknown = set(changes) - _FIELDS
    if unknown:
        raise TypeError(f"{who}() got unknown settings {sorted(unknown)}")


class config_context:
    """Apply ``changes`` to the current context (thread or asyncio task) for a ``with`` block.

    The block starts from the settings in force when it is entered and restores them, exactly,
    when it ends; blocks nest (the innermost wins). Other threads never see the changes.

    Examples
    --------
    >>> import gpulinalg
    >>> with gpulinalg.config_context(backend="cpu") as s:
    ...     s.backend.value, gpulinalg.get_config().backend.value
    ('cpu', 'cpu')
    >>> gpulinalg.get_config().backend.value
    'auto'
    """

    def __init__(self, **changes: Any) -> None:
        _check_names(changes, type(self).__name__)
        dataclasses.replace(_default, **changes)  # validate the values before anything runs
        self._changes = changes
        self._tokens: list = []
        self._entered = False

    def __enter__(self) -> Settings:
        self._entered = True
        settings = dataclasses.replace(get_config(), **self._changes)
        self._tokens.append(_override.set(settings))
        return settings

    def __exit__(self, *exc: object) -> None:
        _override.reset(self._tokens.pop())

    def __del__(self):
        # A block made and dropped without ``with`` changed nothing: say so (warnings is None
        # at interpreter shutdown).
        if getattr(self, "_entered", True) or warnings is None:
            return
        warnings.warn(f"{self!r} was never entered; use set_config(...) to change the process "
                      "default", RuntimeWarning, stacklevel=2)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._changes.items())})"


class settings_in_force:
    """Run a block under ``settings``, a :func:`get_config` result taken elsewhere (another
    thread, an earlier call): what a callback run on a library's own thread needs to follow
    the caller's :class:`config_context`. Internal to the package.

    Examples
    --------
    >>> with config_context(backend="cpu"):
    ...     captured = get_config()
    >>> with settings_in_force(captured):
    ...     get_config() is captured
    True
    """

    __slots__ = ("_settings", "_token")

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def __enter__(self) -> Settings:
        self._token = _override.set(self._settings)
        return self._settings

    def __exit__(self, *exc: object) -> None:
        _override.reset(self._token)


thread_config = config_context  # the name earlier versions used inside the package


class config(config_context):
    """``with gpulinalg.config(...):`` is :class:`config_context` (the name is kept for it).

    To change the process default, call :func:`set_config`. An object that is made but never
    entered changes nothing, and says so with a ``RuntimeWarning`` when it is collected.

    Parameters
    ----------
    backend : {"auto", "gpu", "cpu"}, optional
    fallback : {"cpu", "raise"}, optional
    vram_headroom : float, optional
        Fraction of total device memory kept free, in ``[0, 1)``.
    autotune : bool, optional
    plan_cache_size : int, optional
    sparse_gpu_solver : {"auto", "cudss", "cusolversp"}, optional
    custom_kernels : bool, optional
    host_memory_share : float, optional
        Share of the available host memory one CPU run may use, in ``(0, 1]``.

    See Also
    --------
    set_config, config_context, get_config

    Examples
    --------
    >>> import gpulinalg
    >>> with gpulinalg.config(backend="cpu"):
    ...     gpulinalg.get_config().backend.value
    'cpu'
    >>> gpulinalg.get_config().backend.value
    'auto'
    """
