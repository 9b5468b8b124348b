"""Array-package detection, moves and validation helpers."""

import sys

import numpy as np
import pytest

from gpulinalg._runtime import arrays, validation
from gpulinalg._runtime.arrays import Kind


def test_kind_of_numpy_and_non_arrays():
    assert arrays.kind_of(np.zeros(2)) is Kind.NUMPY
    assert arrays.kind_of([1.0]) is None and arrays.kind_of(3.0) is None


def test_kind_of_does_not_import(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert arrays.kind_of(object()) is None
    assert "cupy" not in sys.modules and "torch" not in sys.modules


def test_convert_tree_keeps_structure():
    from gpulinalg.decomp._results import SVDResult
    res = SVDResult(np.ones(2), [np.ones(1)], {"k": np.zeros(1)})
    out = arrays.convert_tree(res, lambda a: a + 1)
    assert isinstance(out, SVDResult) and out.U[0] == 2 and out.S[0][0] == 2 and out.Vh["k"][0] == 1


def test_caller_kind_defaults_to_numpy():
    assert arrays.caller_kind(3, "x") == (Kind.NUMPY, None)


class TestTorch:
    torch = pytest.importorskip("torch")

    def test_detect_and_round_trip_zero_copy(self):
        t = self.torch.arange(6, dtype=self.torch.float64).reshape(2, 3)
        assert arrays.kind_of(t) is Kind.TORCH and not arrays.on_gpu(t)
        host = arrays.to_host(t)
        assert isinstance(host, np.ndarray) and np.shares_memory(host, t.numpy())
        back = arrays.to_kind(host * 2, Kind.TORCH, like=t)
        assert isinstance(back, self.torch.Tensor) and back.device == t.device
        assert self.torch.equal(back, t * 2)

    def test_requires_grad_is_detached(self):
        t = self.torch.ones(3, requires_grad=True)
        assert np.array_equal(arrays.to_host(t), np.ones(3))

    def test_validation_on_torch(self):
        t = self.torch.tensor([1.0, float("nan")])
        with pytest.raises(ValueError, match="infs or NaNs"):
            validation.check_finite(t, "t")


def test_as_array_rejects_non_numeric():
    with pytest.raises(TypeError, match="numeric"):
        validation.as_array(np.array(["a"]), "a")
    with pytest.raises(TypeError, match="numeric"):
        validation.as_array(np.array([object()]), "a")


def test_as_array_ndim_message_has_shape():
    with pytest.raises(ValueError, match=r"got shape \(3,\)"):
        validation.as_array(np.ones(3), "a", min_ndim=2)


def test_as_array_refuses_sparse():
    sp = pytest.importorskip("scipy.sparse")
    with pytest.raises(TypeError, match="sparse"):
        validation.as_array(sp.eye(3, format="csr"), "a")


def test_check_finite_and_square():
    validation.check_finite(np.ones(2))
    validation.check_finite(np.zeros(0))
    for bad in (np.inf, -np.inf, np.nan):
        with pytest.raises(ValueError, match="a must not contain infs or NaNs"):
            validation.check_finite(np.array([1.0, bad]))
    with pytest.raises(ValueError, match=r"square.*\(2, 3\)"):
        validation.check_square(np.ones((2, 3)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128,
                                   np.float16])
@pytest.mark.parametrize("layout", ["C", "F", "strided", "3-D"])
def test_all_finite_of_large_host_arrays(monkeypatch, rng, dtype, layout):
    """Past ``_SUM_FIRST`` entries (lowered here) the host check sums first: every NaN or Inf
    is still found wherever it is (first, last, middle; a complex part), and finite entries
    whose sum overflows still pass."""
    monkeypatch.setattr(validation, "_SUM_FIRST", 1 << 11)
    shape = {"C": (70, 53), "F": (70, 53), "strided": (70, 106), "3-D": (3, 30, 31)}
    base = rng.standard_normal(shape[layout]).astype(dtype)
    a = {"C": base, "F": np.asfortranarray(base), "strided": base[:, ::2], "3-D": base}[layout]
    assert a.size >= validation._SUM_FIRST
    assert validation.all_finite(a)
    flat_last = np.unravel_index(a.size - 1, a.shape)
    for bad in (np.nan, np.inf, -np.inf):
        for where in ((0,) * a.ndim, flat_last, tuple(s // 2 for s in a.shape)):
            b = a.copy(order="K")
            b[where] = bad if a.dtype.kind == "f" else complex(0.0, bad)
            assert not validation.all_finite(b), (bad, where)
    huge = np.full(a.shape, np.finfo(a.real.dtype).max / 2, dtype=dtype)
    assert validation.all_finite(huge)


@pytest.mark.parametrize("dtypes, expected", [
    ((np.int32,), np.float64), ((np.bool_,), np.float64), ((np.float32,), np.float32),
    ((np.float32, np.float64), np.float64), ((np.float16,), np.float32),
    ((np.complex64, np.float64), np.complex128),
])
def test_float_dtype(dtypes, expected):
    assert validation.float_dtype(*dtypes) == np.dtype(expected)


def test_float_dtype_refuses():
    with pytest.raises(TypeError, match="unsupported dtype"):
        validation.float_dtype(np.longdouble)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("shape", [(7,), (33, 65), (3, 40, 17)])
@pytest.mark.parametrize("view", [False, True])
def test_check_finite_cupy(dtype, shape, view):
    """CuPy arrays: found wherever the NaN/Inf sits (also in an imaginary part or a strided
    view), never raised for finite data."""
    import gpulinalg
    if not gpulinalg.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    import cupy

    def make(value=None, at=None):
        base = cupy.ones(shape[:-1] + (2 * shape[-1],), dtype=dtype)
        x = base[..., ::2] if view else base[..., :shape[-1]]
        if value is not None:
            x[at] = value
        return x

    validation.check_finite(make(), "x")
    values = [np.nan, np.inf, -np.inf]
    if np.dtype(dtype).kind == "c":
        values += [complex(1.0, np.nan), complex(np.inf, 0.0)]
    for value in values:
        for at in (tuple(0 for _ in shape), tuple(s - 1 for s in shape)):
            with pytest.raises(ValueError, match="x must not contain infs or NaNs"):
                validation.check_finite(make(value, at), "x")


def test_torch_bfloat16_round_trip_keeps_the_bits(monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    t = torch.randn(5, 3).to(torch.bfloat16)[:, ::2]  # a strided view too
    host = arrays.to_host(t)
    assert host.dtype.name == "bfloat16" and host.shape == (5, 2)
    assert np.array_equal(host.astype(np.float32), t.float().numpy())
    back = arrays.to_kind(host, Kind.TORCH)
    assert back.dtype == torch.bfloat16 and torch.equal(back, t)
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # not installed
    with pytest.raises(TypeError, match="ml_dtypes"):
        arrays.to_host(t)


class _DeviceStandIn:
    """Stands for a CuPy array (NumPy underneath, CuPy's ``get(order=)``)."""

    def __init__(self, a):
        self.a = a

    ndim = property(lambda self: self.a.ndim)
    flags = property(lambda self: self.a.flags)

    def swapaxes(self, i, j):
        return _DeviceStandIn(self.a.swapaxes(i, j))

    def get(self, order="C"):
        return np.array(self.a, order=order)


@pytest.mark.parametrize("layout", ["C", "F", "stack of F"])
def test_device_results_come_to_the_host_in_their_own_layout(layout):
    # LAPACK-style engines return Fortran-ordered matrices (qr mode='raw' Q): SciPy users read
    # their strides, so the host copy keeps them, also for a stack of Fortran-ordered matrices.
    from gpulinalg._runtime.arrays import _cupy_to_host
    a = {"C": np.ones((3, 4)), "F": np.asfortranarray(np.ones((3, 4))),
         "stack of F": np.ones((2, 3, 4)).swapaxes(-1, -2)}[layout]
    host = _cupy_to_host(_DeviceStandIn(a))
    assert host.strides == a.strides and np.array_equal(host, a)


def test_to_torch_takes_reversed_and_read_only_views():
    torch = pytest.importorskip("torch")
    a = np.arange(6.0).reshape(2, 3)
    view = a[::-1, ::-1]
    got = arrays.to_kind(view, Kind.TORCH)
    assert isinstance(got, torch.Tensor) and np.array_equal(got.numpy(), view)
    ro = a.copy()
    ro.flags.writeable = False
    assert np.array_equal(arrays.to_kind(ro, Kind.TORCH).numpy(), a)


def test_to_torch_keeps_a_tensor():
    torch = pytest.importorskip("torch")
    t = torch.arange(3.0)
    assert arrays.to_kind(t, Kind.TORCH) is t
    assert arrays.to_kind(t, Kind.TORCH, like=torch.zeros(1)) is t
