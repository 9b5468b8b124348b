"""Starting a Dask cluster for gpulinalg, and describing the one in use.

gpulinalg runs on Dask's clusters, never on a scheduler of its own: bring your own
``distributed.Client``, or start a local one with :func:`local_cluster`. Nothing here is imported
by ``import gpulinalg``; Dask and distributed are imported when a function here is called, and
``dask_cuda`` only when a GPU is present.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ["local_cluster", "cluster_info"]

log = logging.getLogger("gpulinalg")


def local_cluster(gpu: bool | None = None, **kwargs: Any) -> Any:
    """A local Dask cluster for gpulinalg: one worker per GPU when there are GPUs.

    Parameters
    ----------
    gpu : bool or None, default None
        ``None``: ``dask_cuda.LocalCUDACluster`` when a GPU is usable and ``dask_cuda`` is
        installed (``pip install gpulinalg[dask-cuda]``), else ``distributed.LocalCluster``
        (logged on the ``"gpulinalg"`` logger when a GPU is present but ``dask_cuda`` is not);
        ``True``: ``LocalCUDACluster`` or an error; ``False``: ``LocalCluster``.
    **kwargs
        Passed to the cluster's constructor (``n_workers``, ``threads_per_worker``,
        ``CUDA_VISIBLE_DEVICES``, ``rmm_pool_size``, ``processes``, ...).

    Returns
    -------
    distributed.LocalCluster or dask_cuda.LocalCUDACluster
        Use it as ``distributed.Client(cluster)``; close both when done (or use them as
        context managers).

    Raises
    ------
    gpulinalg.GPUUnavailableError
        ``gpu=True`` without a usable GPU.
    ImportError
        ``gpu=True`` without ``dask_cuda``, or without ``distributed`` at all.

    Examples
    --------
    >>> from distributed import Client                      # doctest: +SKIP
    >>> from gpulinalg.distributed import local_cluster     # doctest: +SKIP
    >>> with local_cluster() as cluster, Client(cluster):   # doctest: +SKIP
    ...     pass
    """
    from ._runtime import device
    from ._runtime.errors import GPUUnavailableError
    if gpu is None or gpu:
        has_gpu = device.gpu_available()
        if gpu and not has_gpu:
            raise GPUUnavailableError(f"local_cluster(gpu=True): {device.unavailable_reason()}")
        if has_gpu:
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError as exc:
                if gpu:
                    raise ImportError(f"local_cluster(gpu=True) needs dask_cuda ({exc}): "
                                      "pip install 'gpulinalg[dask-cuda]'") from exc
                log.warning("local_cluster: a GPU is present but dask_cuda is not installed; "
                            "starting a CPU LocalCluster (pip install gpulinalg[dask-cuda])")
            else:
                log.info("local_cluster: LocalCUDACluster, one worker per GPU")
                return LocalCUDACluster(**kwargs)
    try:
        from distributed import LocalCluster
    except ImportError as exc:
        raise ImportError(f"local_cluster needs Dask's distributed ({exc}): "
                          "pip install 'gpulinalg[dask]'") from exc
    log.info("local_cluster: LocalCluster (CPU workers)")
    return LocalCluster(**kwargs)


def cluster_info(client: Any = None) -> dict | None:
    """What the Dask client in use sees: a dict with ``scheduler`` (its address), ``workers``,
    ``threads`` and ``gpus`` (workers reporting a GPU), or ``None`` without a client.

    ``client``: a ``distributed.Client``; default: the current one, if ``distributed`` is
    already imported and has one (nothing is imported or started to find out).
    """
    if client is None:
        dist = sys.modules.get("distributed")
        if dist is None:
            return None
        try:
            client = dist.get_client()
        except ValueError:  # no client in this process
            return None
    workers = client.scheduler_info().get("workers", {})
    gpus = sum(1 for w in workers.values() if (w.get("gpu") or {}).get("name")
               or (w.get("metrics", {}).get("gpu") is not None))
    return {"scheduler": client.scheduler.address, "workers": len(workers),
            "threads": sum(int(w.get("nthreads", 0)) for w in workers.values()),
            "gpus": gpus}
