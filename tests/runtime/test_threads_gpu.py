"""16 threads running mixed operations (dense, decomp, sparse) at once, each on a CUDA stream of
its own, give bit-identical results to one thread running them alone (issue 18, DESIGN §6).

The same body runs on the CPU backend with NumPy inputs (no GPU needed), which checks the
harness and the CPU engines; the ``gpu`` case is the one that matters: one stream and one library
handle per (thread, device), plan caches per thread, nothing shared that a thread could see
half-written.
"""

import contextlib
import threading
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import gpulinalg

from tests.support import faults as _faults

#: Threads and rounds per thread: the GPU case runs 16 x 3; the CPU case (a check of the
#: harness and the CPU engines on a 2-core CI machine) 4 x 1.
THREADS = {"gpu": 16, "cpu": 4}
ROUNDS = {"gpu": 3, "cpu": 1}


def _inputs(xp, csr):
    rng = np.random.default_rng(16)
    a32 = rng.standard_normal((256, 192)).astype(np.float32)
    w32 = rng.standard_normal((192, 128)).astype(np.float32)
    a = rng.standard_normal((200, 120))
    spd = a.T @ a + 120 * np.eye(120)
    lap = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(500, 500), format="csr")
    d = dict(a32=a32, w32=w32, bias32=rng.standard_normal(128).astype(np.float32), a=a,
             spd=spd, tri=np.tril(spd), rhs=rng.standard_normal((120, 4)), b=np.ones(500),
             g32=rng.standard_normal((256, 128)).astype(np.float32))
    out = {k: xp.asarray(v) for k, v in d.items()}
    out["lap"] = csr(lap)
    return out


def _jobs(x):
    """name -> call: dense, decomp and sparse operations on the shared (read-only) inputs."""
    dense, dec = gpulinalg.dense, gpulinalg.decomp

    def backward():
        out, aux = dense.matmul(x["a32"], x["w32"], bias=x["bias32"], activation="relu",
                                return_aux=True)
        return (out, aux.data) + tuple(dense.matmul_backward(
            x["g32"], x["a32"], x["w32"], aux=aux, activation="relu", bias=True))

    def factorize_solve():
        with gpulinalg.sparse.factorize(x["lap"]) as fac:
            return fac.solve(x["b"])

    return {
        "dense.matmul f32 bias+relu": lambda: dense.matmul(x["a32"], x["w32"], bias=x["bias32"],
                                                           activation="relu"),
        "dense.matmul f64": lambda: dense.matmul(x["a"].T, x["a"]),
        "dense.matmul+backward": backward,
        "decomp.qr": lambda: tuple(dec.qr(x["a"])),
        "decomp.svd": lambda: tuple(dec.svd(x["a"])),
        "decomp.cholesky": lambda: dec.cholesky(x["spd"]),
        "decomp.cho_solve": lambda: dec.cho_solve(dec.cho_factor(x["spd"]), x["rhs"]),
        "decomp.solve_triangular": lambda: dec.solve_triangular(x["tri"], x["rhs"], lower=True),
        "decomp.truncated_svd": lambda: tuple(dec.truncated_svd(x["a"], 8, random_state=0)),
        "sparse.solve": lambda: gpulinalg.sparse.solve(x["lap"], x["b"]),
        "sparse.factorize+solve": factorize_solve,
    }


def _run(jobs, order, backend, stream_factory, kernels):
    """Run ``jobs`` in ``order`` on this thread (its own stream), results on the host, and the
    backend each ran on; ``kernels``: the test's ``custom_kernels`` (a new thread starts from
    the process default, not from the test's ``config_context``)."""
    results, where = {}, {}
    stream = stream_factory()
    with gpulinalg.config_context(backend=backend, custom_kernels=kernels), stream, \
            warnings.catch_warnings():
        warnings.simplefilter("error", gpulinalg.FallbackWarning)
        for name in order:
            results[name] = _faults.to_host(jobs[name]())
            where[name] = gpulinalg.last_run().backend
    return results, where


def _backend(kind):
    if kind == "cpu":
        return np, sp.csr_matrix, contextlib.nullcontext
    if not gpulinalg.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    import cupy
    import cupyx.scipy.sparse as csp
    return cupy, csp.csr_matrix, lambda: cupy.cuda.Stream(non_blocking=True)


@pytest.mark.parametrize("kind", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_threads_give_the_results_of_one_thread(kind):
    xp, csr, stream_factory = _backend(kind)
    jobs = _jobs(_inputs(xp, csr))
    names = list(jobs)
    kernels = gpulinalg.get_config().custom_kernels
    alone, where = _run(jobs, names, kind, stream_factory, kernels)
    assert set(where.values()) == {kind}, where
    barrier = threading.Barrier(THREADS[kind])
    got: dict = {}
    errors: dict = {}

    def worker(i):
        try:
            barrier.wait()
            for r in range(ROUNDS[kind]):  # a different order in every thread and round
                shift = (i + r * 5) % len(names)
                order = names[shift:] + names[:shift]
                got[i, r] = _run(jobs, order, kind, stream_factory, kernels)
        except BaseException as exc:  # reported below, with the thread
            errors[i] = repr(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS[kind])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    differ = sorted({name for (results, _) in got.values() for name in names
                     if not _faults.same_bits(results[name], alone[name])})
    assert not differ, f"results differ from one thread's: {differ}"
    ran = {b for (_, w) in got.values() for b in w.values()}
    assert ran == {kind}, ran
