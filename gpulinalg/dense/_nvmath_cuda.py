"""The one adapter onto nvmath-python's internals and the raw cuBLASLt binding.

A plan-cache hit (:mod:`gpulinalg.dense._plans_cuda`) skips ``Matmul.execute`` and launches
``cublasLtMatmul`` itself with the objects nvmath made when it planned: the matmul descriptor,
the four matrix layouts, the host scalars, the chosen algorithm, the epilog handlers. Those are
private attributes of nvmath's ``Matmul``; every read of them, and every direct call of a
cuBLASLt binding, is here, behind a version check.

nvmath versions whose internals this module was written and tested against are
:data:`TESTED_NVMATH` (major.minor). On first use :func:`check_nvmath` raises ``RuntimeError``
for any other version, or when a private name it needs is missing, naming the installed and the
supported versions: never a silently slower or wrong path.
"""

__all__ = ["TESTED_NVMATH", "MATMUL_ATTRIBUTES", "check_nvmath", "planned_parts",
           "buffer_spec"]

#: nvmath-python versions (major.minor) whose private attributes this adapter reads.
TESTED_NVMATH = ("1.0",)

#: Private attributes of a planned ``nvmath.linalg.advanced.Matmul`` read by :func:`planned_parts`.
MATMUL_ATTRIBUTES = ("handle", "mm_desc", "a_layout_ptr", "b_layout_ptr",
                     "c_layout_ptr", "d_layout_ptr", "alpha", "beta",
                     "cached_best_algorithm_struct", "result_traits", "d_dtype_name",
                     "epilog_output_handlers", "epilog_input_name_to_handler", "algorithms_buffer")

#: epilog handler name -> ``cublasLt.MatmulDescAttribute`` member its device pointer goes to.
_POINTER_ATTR = {"bias": "BIAS_POINTER", "relu_aux": "EPILOGUE_AUX_POINTER",
                 "gelu_aux": "EPILOGUE_AUX_POINTER", "drelu_bgrad": "BIAS_POINTER",
                 "dgelu_bgrad": "BIAS_POINTER", "bgrada": "BIAS_POINTER", "bgradb": "BIAS_POINTER"}

_checked: list = []  # [True] once check_nvmath() passed in this process


def _version():
    import nvmath
    return str(getattr(nvmath, "__version__", "unknown"))


def _unsupported(what):
    return RuntimeError(
        f"gpulinalg.dense: {what}; installed nvmath-python {_version()}, supported "
        f"{', '.join(v + '.x' for v in TESTED_NVMATH)}. gpulinalg's matmul plans read nvmath "
        "internals that change between versions: install a supported nvmath-python "
        "(pip install 'nvmath-python>=1.0,<1.1').")


def check_nvmath():
    """Raise ``RuntimeError`` unless nvmath's version is in :data:`TESTED_NVMATH` and the
    module-level private names used here exist (checked once per process)."""
    if _checked:
        return
    version = _version()
    if ".".join(version.split(".")[:2]) not in TESTED_NVMATH:
        raise _unsupported("this nvmath-python version is not one gpulinalg was tested with")
    try:
        from nvmath.bindings import cublasLt
        from nvmath.internal.tensor_ifc_cupy import CupyTensor
    except ImportError as exc:
        raise _unsupported(f"an nvmath module gpulinalg needs is missing ({exc})") from exc
    for owner, name in ((cublasLt, "matmul"), (cublasLt, "matmul_desc_set_attribute"),
                        (cublasLt, "get_matmul_desc_attribute_dtype"),
                        (cublasLt, "MatmulDescAttribute"), (CupyTensor, "name_to_dtype")):
        if not hasattr(owner, name):
            raise _unsupported(f"nvmath has no {getattr(owner, '__name__', owner)}.{name}")
    _checked.append(True)


def _require(obj, names, where):
    missing = [n for n in names if not hasattr(obj, n)]
    if missing:
        raise _unsupported(f"{where} has no attribute(s) {', '.join(missing)}")


def _pointer_attribute(name):
    """The ``cublasLtMatmulDescAttributes_t`` value (an int) of the descriptor pointer of epilog
    operand ``name``; the launch sets it with ``matmul_desc_set_attribute`` from an 8-byte host
    buffer (the attribute's type is a 64-bit pointer, checked here)."""
    from nvmath.bindings import cublasLt
    member = _POINTER_ATTR.get(name)
    if member is None:
        raise _unsupported(f"unknown epilog operand {name!r}")
    attr = getattr(cublasLt.MatmulDescAttribute, member, None)
    if attr is None:
        raise _unsupported(f"cublasLt.MatmulDescAttribute has no {member}")
    import numpy as np
    if np.dtype(cublasLt.get_matmul_desc_attribute_dtype(attr)).itemsize != 8:
        raise _unsupported(f"cublasLt.MatmulDescAttribute.{member} is not a 64-bit pointer")
    return int(attr)


def buffer_spec(shape, strides, dtype_name):
    """``(shape, dtype, nbytes, byte strides)`` of a dense buffer with element ``strides``."""
    from nvmath.internal.tensor_ifc_cupy import CupyTensor
    dtype = CupyTensor.name_to_dtype[dtype_name]  # nvmath's own name -> dtype map (bfloat16 too)
    shape = tuple(int(n) for n in shape)
    size = 1
    for n in shape:
        size *= n
    return shape, dtype, size * dtype.itemsize, tuple(int(s) * dtype.itemsize for s in strides)


def planned_parts(mm, epilog):
    """What one ``cublasLtMatmul`` launch of planned ``mm`` needs, as a dict:

    ``launch`` (the binding), ``set_attribute`` (``cublasLt.matmul_desc_set_attribute``:
    ``(desc, attribute, host buffer address, size)``), ``handle``, ``desc``, ``layouts`` (A, B,
    C, D), ``alpha`` and ``beta`` (nvmath's host scalars, written in place), ``scalar_ptrs``,
    ``algo`` (kept alive) and ``algo_ptr``, ``out`` (the result's :func:`buffer_spec`),
    ``outputs`` (``(name, *buffer_spec, attribute)`` per epilog output), ``inputs`` (``(name,
    attribute)`` per epilog input; ``attribute``: the descriptor attribute of the operand's
    device pointer, an int) and ``ws_size`` (the workspace bytes of the algorithm launched,
    nvmath's epilog padding included).
    """
    from nvmath.bindings import cublasLt
    check_nvmath()
    _require(mm, MATMUL_ATTRIBUTES, "the planned nvmath Matmul")
    algo = mm.cached_best_algorithm_struct
    rt = mm.result_traits
    _require(rt, ("result_shape", "result_strides"), "Matmul.result_traits")
    # the launch runs nvmath's first algorithm (the heuristic's best, or autotuning's): its own
    # workspace, not the largest of the candidates nvmath sizes its shared workspace for
    ws = int(mm.algorithms_buffer["workspace_size"][0])  # (a row of it is a 1-row buffer)
    return dict(
        launch=cublasLt.matmul, set_attribute=cublasLt.matmul_desc_set_attribute,
        handle=mm.handle, desc=mm.mm_desc,
        layouts=(mm.a_layout_ptr, mm.b_layout_ptr, mm.c_layout_ptr, mm.d_layout_ptr),
        alpha=mm.alpha, beta=mm.beta, scalar_ptrs=(mm.alpha.ctypes.data, mm.beta.ctypes.data),
        algo=algo, algo_ptr=algo.ctypes.data,
        out=buffer_spec(rt.result_shape, rt.result_strides, mm.d_dtype_name),
        outputs=tuple((h.name, *buffer_spec(*h.attributes()), _pointer_attribute(h.name))
                      for h in mm.epilog_output_handlers),
        inputs=tuple((name, _pointer_attribute(name))
                     for name in mm.epilog_input_name_to_handler),
        ws_size=ws + 16 if ws > 0 and epilog else ws)  # nvmath pads epilog workspaces
