"""Each hand-written kernel route against its library route on the device (``gpu``-marked):
the same inputs through the kernel (the default on a measured device) and through
``config_context(custom_kernels=False)``; both meet DESIGN.md's tolerances and agree. Then each
CPU emulation of a kernel (``tests/support/*_emulator.py``) against the real kernel on the
same inputs."""

import numpy as np
import pytest

import gpulinalg
from gpulinalg import decomp
from gpulinalg._runtime import device as _device
from gpulinalg._runtime.streams import op_stream
from gpulinalg.decomp._kernels import _policy_cuda
from gpulinalg.decomp.cholesky import _cholesky_cuda
from gpulinalg.decomp.qr import _qr_cuda
from gpulinalg.decomp.svd import _svd_cuda
from gpulinalg.decomp.triangular import _triangular_cuda
from tests.support.cusolver_emulator import CALLS, dev, emulated_gpu, plain

pytestmark = pytest.mark.gpu

REAL = [np.float32, np.float64]
ALL = REAL + [np.complex64, np.complex128]


@pytest.fixture
def cp(xp_gpu):
    """CuPy on a device whose kernels are on by default (else the comparison is moot)."""
    if not _policy_cuda.enabled():
        cc, measured = _policy_cuda.compute_capability(), sorted(_policy_cuda.MEASURED)
        pytest.skip(f"the hand-written kernels are off on compute capability {cc} "
                    f"(measured: {measured})")
    return xp_gpu


def _eps(dtype):
    return float(np.finfo(dtype).eps)


def _spd(rng, batch, n, dtype):
    x = rng.standard_normal((*batch, n, n))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal((*batch, n, n))
    return (x @ np.conj(np.swapaxes(x, -1, -2)) + n * np.eye(n)).astype(dtype)


def _triangle(rng, batch, n, dtype):
    """A well-conditioned lower triangle: diagonal 2, the rest ``N(0, 1) / n``."""
    x = rng.standard_normal((*batch, n, n))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal((*batch, n, n))
    return (np.tril(x, -1) / n + 2 * np.eye(n)).astype(dtype)


def _both(fn):
    """``(kernel route's result, library route's result)`` of ``fn()`` as NumPy arrays."""
    import cupy
    on = fn()
    with gpulinalg.config_context(custom_kernels=False):
        off = fn()
    get = (lambda r: tuple(cupy.asnumpy(x) for x in r)) if isinstance(on, tuple) else \
        cupy.asnumpy
    return get(on), get(off)


def _norm(x):
    return np.linalg.norm(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64),
                          axis=(-2, -1)).max()


def _chol_error(a, low):
    n = a.shape[-1]
    return _norm(low @ np.conj(np.swapaxes(low, -1, -2)) - a) / (n * _norm(a) * _eps(a.dtype))


# -- kernel route against library route ---------------------------------------------------------

CHOLESKY = [((64,), 16), ((256,), 64), ((512,), 128), ((8,), 300), ((16,), 768)]


@pytest.mark.parametrize("batch, n", CHOLESKY)
@pytest.mark.parametrize("dtype", ALL)
def test_cholesky_kernel_and_library_routes_agree(cp, rng, batch, n, dtype):
    a = _spd(rng, batch, n, dtype)
    ad = cp.asarray(a)
    on, off = _both(lambda: decomp.cholesky(ad, lower=True))
    for low in (on, off):
        assert _chol_error(a, low) <= 30
    assert _norm(on - off) <= 30 * n * _eps(dtype) * _norm(off)


TRSM = [((64,), 16, 4), ((8,), 64, 64), ((16,), 512, 4), ((2,), 2048, 16), ((), 1000, 4),
        ((), 4096, 1)]


@pytest.mark.parametrize("batch, n, k", TRSM)
@pytest.mark.parametrize("dtype", ALL)
def test_triangular_kernel_and_library_routes_agree(cp, rng, batch, n, k, dtype):
    a = _triangle(rng, batch, n, dtype)
    b = rng.standard_normal((*batch, n, k)).astype(dtype)
    ad, bd = cp.asarray(a), cp.asarray(b)
    for trans in (0, 2):
        on, off = _both(lambda: decomp.solve_triangular(ad, bd, lower=True, trans=trans))
        op = a if trans == 0 else np.conj(np.swapaxes(a, -1, -2))
        for x in (on, off):
            err = _norm(b - op @ x) / (_norm(a) * _norm(x) * _eps(dtype))
            assert err <= 30 * n, (trans, err)
        assert _norm(on - off) <= 100 * n * _eps(dtype) * _norm(off)  # a is well conditioned


@pytest.mark.parametrize("batch, n", [((64,), 16), ((8,), 200)])
@pytest.mark.parametrize("dtype", ALL)
def test_cho_solve_kernel_and_library_routes_agree(cp, rng, batch, n, dtype):
    a = _spd(rng, batch, n, dtype)
    b = rng.standard_normal((*batch, n, 3)).astype(dtype)
    ad, bd = cp.asarray(a), cp.asarray(b)
    on, off = _both(lambda: decomp.cho_solve(decomp.cho_factor(ad, lower=True), bd))
    for x in (on, off):
        assert _norm(b - a @ x) / (_norm(a) * _norm(x) * _eps(dtype)) <= 30 * n
    assert _norm(on - off) <= 1e3 * n * _eps(dtype) * _norm(off)


@pytest.mark.parametrize("shape", [(512, 16, 16), (64, 40, 24), (64, 24, 40), (32, 64, 64)])
@pytest.mark.parametrize("dtype", ALL)
def test_qr_kernel_and_library_routes_agree(cp, rng, shape, dtype):
    a = rng.standard_normal(shape).astype(dtype)
    ad = cp.asarray(a)
    on, off = _both(lambda: decomp.qr(ad, mode="economic"))
    n, eps = max(shape[-2:]), _eps(dtype)
    for q, r in (on, off):
        assert _norm(a - q @ r) / (n * _norm(a) * eps) <= 30
        eye = np.eye(q.shape[-1])
        assert _norm(eye - np.conj(np.swapaxes(q, -1, -2)) @ q) / (n * eps) <= 30
    # Householder QR is unique up to the signs of R's rows: compare |R|
    assert _norm(np.abs(on[1]) - np.abs(off[1])) <= 100 * n * eps * _norm(a)


@pytest.mark.parametrize("shape", [(512, 16, 16), (64, 40, 24), (64, 24, 40), (16, 64, 64)])
@pytest.mark.parametrize("dtype", ALL)
def test_svd_kernel_and_library_routes_agree(cp, rng, shape, dtype):
    a = rng.standard_normal(shape).astype(dtype)
    ad = cp.asarray(a)
    on, off = _both(lambda: decomp.svd(ad, full_matrices=False))
    n, eps = max(shape[-2:]), _eps(dtype)
    for u, s, vh in (on, off):
        assert _norm(a - (u * s[..., None, :]) @ vh) / (n * _norm(a) * eps) <= 50
    assert np.abs(on[1] - off[1]).max() <= 50 * n * eps * np.abs(off[1]).max()


@pytest.mark.parametrize("dtype", REAL)
def test_truncated_svd_kernel_and_library_routes_agree(cp, rng, dtype):
    """The low-rank engine's kernels (Cholesky inverse, signs, lift): the known spectrum."""
    m, n, k = 4000, 300, 10
    u, _ = np.linalg.qr(rng.standard_normal((m, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    # A gap after the k-th value: the randomized range finder is then exact to rounding.
    s = np.concatenate([np.geomspace(100.0, 10.0, k), np.geomspace(0.1, 1e-3, n - k)])
    a = cp.asarray(((u * s) @ v.T).astype(dtype))
    on, off = _both(lambda: decomp.truncated_svd(a, k, random_state=0))
    tol = 1e-3 if dtype == np.float32 else 1e-8
    for _, got, _ in (on, off):
        assert np.abs(got - s[:k]).max() <= tol * s[0]
    assert np.abs(on[1] - off[1]).max() <= tol * s[0]


def test_gp_fused_likelihood_and_library_route_agree(cp, rng):
    pytest.importorskip("sklearn")
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    from gpulinalg.gp import _engine_cuda
    from gpulinalg.gp._kernels_xp import compile_kernel
    n, d = 3000, 4
    x, y = rng.standard_normal((n, d)), rng.standard_normal(n)
    plan = compile_kernel(ConstantKernel() * RBF(np.ones(d)) + WhiteKernel(1.0), d)
    xd, yd = cp.asarray(x), cp.asarray(y)

    def run():
        lml, grad = _engine_cuda.log_marginal_likelihood(xd, yd, 0.0, None, None, plan=plan,
                                                         eval_gradient=True)
        return float(lml), np.asarray(cp.asnumpy(grad) if hasattr(grad, "get") else grad)
    on = run()
    with gpulinalg.config_context(custom_kernels=False):
        off = run()
    assert abs(on[0] - off[0]) <= 1e-9 * abs(off[0])
    assert np.abs(on[1] - off[1]).max() <= 1e-7 * max(np.linalg.norm(off[1]), 1.0)


# -- CPU emulation against the real kernel --------------------------------------------------------

def _emulated(monkeypatch, fn):
    """``fn()`` on the CPU emulation (installed for the rest of the test: call it last)."""
    monkeypatch.setattr(_device, "_attributes", {})  # the emulated device's attributes
    with emulated_gpu(monkeypatch):
        CALLS.clear()
        out = fn()
        return tuple(plain(x) for x in out) if isinstance(out, tuple) else plain(out), \
            dict(CALLS)


EMULATED = {  # name: (inputs, engine call on device arrays, the emulation's counter)
    "small_potrf": (lambda r, dt: (_spd(r, (16,), 32, dt),),
                    lambda a, dt: _cholesky_cuda.cholesky(a, True, False, True, dt, True),
                    "small_potrf"),
    "small_trsm": (lambda r, dt: (_triangle(r, (16,), 32, dt),
                                  r.standard_normal((16, 32, 3)).astype(dt)),
                   lambda a, b, dt: _triangular_cuda.solve_triangular(
                       a, b, 0, True, False, False, dt, True), "small_trsm"),
    "stream_trsm": (lambda r, dt: (_triangle(r, (4,), 200, dt),
                                   r.standard_normal((4, 200, 2)).astype(dt)),
                    lambda a, b, dt: _triangular_cuda.solve_triangular(
                        a, b, 0, True, False, False, dt, True), "stream_trsm"),
    "wide_trsm": (lambda r, dt: (_triangle(r, (), 300, dt),
                                 r.standard_normal((300, 4)).astype(dt)),
                  lambda a, b, dt: _triangular_cuda.solve_triangular(
                      a, b, 0, True, False, False, dt, True), "wide_trsm"),
    "small_qr": (lambda r, dt: (r.standard_normal((16, 20, 12)).astype(dt),),
                 lambda a, dt: _qr_cuda.qr(a, "economic", False, None, False, dt), "small_qr"),
    "small_svd": (lambda r, dt: (r.standard_normal((16, 20, 12)).astype(dt),),
                  lambda a, dt: _svd_cuda.svd(a, False, True, "auto", dt), "small_svd"),
}


@pytest.mark.parametrize("name", sorted(EMULATED))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_emulation_matches_the_kernel(cp, rng, monkeypatch, name, dtype):
    make, call, counter = EMULATED[name]
    dt = np.dtype(dtype)
    args = make(rng, dt)
    with op_stream():  # engine functions run where the dispatcher runs them: its stream
        real = call(*(cp.asarray(x) for x in args), dt)
        real = tuple(cp.asnumpy(x) for x in real) if isinstance(real, tuple) else \
            cp.asnumpy(real)
    emu, calls = _emulated(monkeypatch, lambda: call(*(dev(x) for x in args), dt))
    assert calls.get(counter), (counter, calls)  # the emulation of that kernel ran
    tol = 1e2 * max(args[0].shape[-2:]) * _eps(dt)
    for x, y in zip(real if isinstance(real, tuple) else (real,),
                    emu if isinstance(emu, tuple) else (emu,)):
        assert np.abs(x - y).max() <= tol * max(np.abs(y).max(), 1.0), name
