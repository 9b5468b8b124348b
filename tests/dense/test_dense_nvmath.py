"""The nvmath adapter (``gpulinalg.dense._nvmath_cuda``) refuses what it does not know, loudly.

dense's plan-cache hits read private attributes of nvmath's ``Matmul`` and call the cuBLASLt
binding directly; an nvmath version other than the tested ones, or a missing private name, must
raise ``RuntimeError`` naming the installed and the supported versions, never run silently
slower or wrong.
"""

import sys
import types

import numpy as np
import pytest

from gpulinalg.dense import _nvmath_cuda, _plans_cuda


@pytest.fixture
def unchecked(monkeypatch):
    """The adapter as before its first use in this process."""
    monkeypatch.setattr(_nvmath_cuda, "_checked", [])


def test_installed_nvmath_is_a_tested_version(unchecked):
    nvmath = pytest.importorskip("nvmath")
    pytest.importorskip("cupy")
    _nvmath_cuda.check_nvmath()
    assert ".".join(nvmath.__version__.split(".")[:2]) in _nvmath_cuda.TESTED_NVMATH


@pytest.mark.parametrize("version", ["1.1.0", "0.5.0", "2.0.0rc1"])
def test_unknown_nvmath_version_fails_loudly(unchecked, monkeypatch, version):
    stub = types.ModuleType("nvmath")
    stub.__version__ = version
    monkeypatch.setitem(sys.modules, "nvmath", stub)
    with pytest.raises(RuntimeError, match=rf"installed nvmath-python {version}.*supported 1\.0"):
        _nvmath_cuda.check_nvmath()
    # planning checks first: nothing of nvmath is touched before the error
    with pytest.raises(RuntimeError, match=rf"nvmath-python {version}"):
        _plans_cuda._build(None, None, None, 1.0, 0.0, None, None, None, False, 0)
    assert _nvmath_cuda._checked == []


def test_missing_module_level_private_name_fails_loudly(unchecked, monkeypatch):
    pytest.importorskip("nvmath")
    pytest.importorskip("cupy")
    from nvmath.internal.tensor_ifc_cupy import CupyTensor
    monkeypatch.delattr(CupyTensor, "name_to_dtype")
    with pytest.raises(RuntimeError, match=r"name_to_dtype.*installed nvmath-python"):
        _nvmath_cuda.check_nvmath()


def _planned_matmul(**drop):
    """A stand-in for a planned ``Matmul`` with the private attributes the adapter reads."""
    ifc = types.SimpleNamespace(set_bias_pointer_unchecked=lambda ptr: None)
    buffer = np.zeros(2, dtype=[("workspace_size", np.uint64)])
    buffer["workspace_size"] = (1024, 4096)
    attrs = dict(handle=1, mm_desc=2, mm_desc_ifc=ifc, a_layout_ptr=3, b_layout_ptr=4,
                 c_layout_ptr=5, d_layout_ptr=6, alpha=np.zeros(1, np.float32),
                 beta=np.zeros(1, np.float32), cached_best_algorithm_struct=np.zeros(8, np.uint8),
                 result_traits=types.SimpleNamespace(result_shape=(3, 5), result_strides=(1, 3)),
                 d_dtype_name="float32", epilog_output_handlers=[],
                 epilog_input_name_to_handler={"bias": None}, algorithms_buffer=buffer,
                 free=lambda: None)
    for name in drop:
        attrs.pop(name)
    return types.SimpleNamespace(**attrs)


@pytest.mark.parametrize("name", _nvmath_cuda.MATMUL_ATTRIBUTES)
def test_missing_private_matmul_attribute_fails_loudly(name):
    pytest.importorskip("nvmath")
    pytest.importorskip("cupy")
    with pytest.raises(RuntimeError, match=rf"no attribute\(s\) {name}\b.*installed nvmath"):
        _nvmath_cuda.planned_parts(_planned_matmul(**{name: True}), "BIAS")


def test_unknown_epilog_operand_fails_loudly():
    pytest.importorskip("nvmath")
    pytest.importorskip("cupy")
    mm = _planned_matmul()
    mm.epilog_input_name_to_handler = {"mystery": None}  # no descriptor pointer known for it
    with pytest.raises(RuntimeError, match="unknown epilog operand 'mystery'"):
        _nvmath_cuda.planned_parts(mm, "BIAS")


def test_plan_takes_what_the_adapter_read():
    """``Plan`` gets its launch objects from the adapter (the result read transposed too)."""
    pytest.importorskip("nvmath")
    pytest.importorskip("cupy")
    plan = _plans_cuda.Plan(_planned_matmul(), "BIAS")
    assert (plan.handle, plan.desc, plan.layouts) == (1, 2, (3, 4, 5, 6))
    assert plan.out == ((3, 5), np.dtype("float32"), 60, (4, 12))
    assert plan.out_t == ((5, 3), np.dtype("float32"), 60, (12, 4))
    # the launched (first) algorithm's workspace, not the candidates' largest (4096); nvmath
    # pads the workspace of an epilog plan
    assert plan.ws_size == 1024 + 16
    assert [name for name, _ in plan.inputs] == ["bias"] and plan.outputs == ()
