"""Host (CPU) cost of the CUDA torch path of dense, measured without a GPU.

The torch engine (:mod:`gpulinalg.dense._tensors_cuda`) runs on CPU tensors here: the device
module is told of one GPU (its discovery state, memory reading and current device are patched
for the block; not a device provider, under which every call decides afresh), CPU tensors
pass for CUDA ones, plans are real plans of stand-in parts whose ``cublasLtMatmul`` and
descriptor-attribute calls do nothing (what is timed is everything but those two C calls), and
the raw-stream getter returns 0. Everything else is the production code: the memo, the
dispatcher's decision and record, the engine's ``torch.empty_strided`` allocations, the
autograd Function, the elementwise backward kernel.

Peers on the same tiny CPU tensors (so that their kernels cost next to nothing): ``nn.Linear``
+ activation forward + backward, and ``torch._addmm_activation``. Their CPU kernels stand in for
the CUDA launches that this measurement leaves out of ours.

``python -m benchmarks.suites.dense_torch_host`` prints µs per call / per step (best of runs,
process CPU time), ``FusedMLP`` (4 layers) against its ``nn.Sequential`` included (``--mlp``: only
those); ``--parts`` takes the forward of one call apart instead; ``--profile`` adds a cProfile
of the step.
"""

import contextlib
import time

import numpy as np
import torch

from gpulinalg._runtime import budget as _budget
from gpulinalg._runtime import device as _device
from gpulinalg._runtime.config import config_context
from gpulinalg.dense import _calls, _matmul_api, _mlp_cuda, _plans_cuda, _tensors_cuda
from gpulinalg.dense._spec import aux_shape

SUITE = "dense_torch_host"


class _StandInPlan(_plans_cuda.Plan):
    """A real :class:`~gpulinalg.dense._plans_cuda.Plan` (its ``execute``, pointer binding and
    the torch engine's reads of ``out``, ``out_t``, ``outputs``, ``ws_size``) for
    the product as cuBLASLt plans it (``rows x cols``, column-major), made of stand-in parts:
    the ``cublasLtMatmul`` launch and the descriptor's attribute setter do nothing (the launch
    is counted)."""

    __slots__ = ("launches",)

    def __init__(self, rows, cols, dtype, epilog):
        dt = np.dtype(str(dtype).replace("torch.", ""))
        item = dt.itemsize
        outputs = []
        if epilog and "AUX" in epilog:
            act = "relu" if epilog.startswith("RELU") else "gelu"
            pr, pc = aux_shape(act, rows, cols)
            at = np.dtype(np.uint8) if act == "relu" else dt
            outputs.append((f"{act}_aux", (pr, pc), at, pr * pc * at.itemsize,
                            (at.itemsize, pr * at.itemsize), _AUX_POINTER))
        if epilog == "BGRADB":
            outputs.append(("bgradb", (cols,), dt, cols * item, (item,), _BIAS_POINTER))
        inputs = (("bias", _BIAS_POINTER),) if epilog and "BIAS" in epilog else ()
        if epilog in ("DRELU", "DGELU", "DRELU_BGRAD", "DGELU_BGRAD"):  # FusedMLP's product
            inputs = ((f"{epilog[1:5].lower()}_aux", _AUX_POINTER),)
            if epilog.endswith("_BGRAD"):
                outputs.append((f"{epilog.lower()}", (rows,), dt, rows * item, (item,),
                                _BIAS_POINTER))
        scalars = np.zeros(1, np.float32), np.zeros(1, np.float32)
        parts = dict(
            launch=None, set_attribute=_no_attribute, handle=0, desc=0, layouts=(0, 0, 0, 0),
            alpha=scalars[0], beta=scalars[1], scalar_ptrs=(0, 0), algo=None, algo_ptr=0,
            out=((rows, cols), dt, rows * cols * item, (item, rows * item)),
            outputs=tuple(outputs), inputs=inputs, ws_size=0)
        super().__init__(None, epilog, parts)
        self.launch = self._launch
        self.launches = 0

    def _launch(self, *args):
        self.launches += 1


_BIAS_POINTER, _AUX_POINTER = 1, 2  # stand-ins for the descriptor's pointer attributes


def _no_attribute(desc, attr, buf, size):
    pass


def _stand_in_plan(a, b, transpose, epilog):
    key = ("stand-in", transpose, a.dtype, epilog, tuple(a.shape), a.stride(), tuple(b.shape),
           b.stride())
    cache = _plans_cuda._cache
    if cache.generation != _plans_cuda._generation[0]:
        _plans_cuda._drop_all(cache)
    plan = cache.plans.get(key)
    if plan is None:
        m, n = a.shape[-2], b.shape[-1]
        rows, cols = (n, m) if transpose else (m, n)
        plan = _plans_cuda._insert(cache, key, _StandInPlan(rows, cols, a.dtype, epilog))
    else:
        cache.hits += 1
    return plan


def _stand_in_direct(a, b, bias, spec):
    from gpulinalg.dense._matmul_cuda import _EPILOGS
    epilog = _EPILOGS[spec.activation, bias is not None, spec.return_aux]
    return _stand_in_plan(a, b, spec.transposed, epilog)


def _stand_in_gemm(x, y, transpose, epilog, spec):
    return _stand_in_plan(x, y, transpose, epilog)


def _stand_in_dgrad(g, w, aux, spec):
    return _stand_in_plan(g, w, aux.transposed, _mlp_cuda._epilog(spec))


def _torch_key_64(a, b, bias, c, options):
    """``_calls._torch_key`` with the pointer alignment read modulo 64, not 256: torch's CPU
    allocator aligns to 64 bytes (its CUDA allocator to 512), so fresh CPU tensors (the output
    gradient of every step) would otherwise make a new key per call. Same work per call."""
    types = _calls._tensor_types
    if type(b) not in types or bias is not None and type(bias) not in types \
            or c is not None and type(c) not in types:
        return None
    return (a.shape, a.stride(), a.dtype, a.data_ptr() & 63, a.get_device(), a.is_conj(),
            b.shape, b.stride(), b.dtype, b.data_ptr() & 63, b.get_device(), b.is_conj(),
            None if bias is None else (bias.shape, bias.stride(), bias.dtype,
                                       bias.data_ptr() & 63, bias.get_device(), bias.is_conj()),
            None if c is None else _calls._torch_layout(c), options)


def _grad_key_64(base, grad, options):
    """``_calls.grad_key`` with the alignment read modulo 64 (see :func:`_torch_key_64`)."""
    return (base, grad.stride(), grad.data_ptr() & 63, grad.is_conj(), options)


def _all_tensors(*xs):
    return all(x is None or (type(x) in (torch.Tensor, torch.nn.Parameter) and not x.is_conj())
               for x in xs)


@contextlib.contextmanager
def stand_in():
    """The CUDA torch path on CPU tensors, with no-op launches (see the module's docstring)."""
    saved = []

    def patch(owner, name, value):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)
    torch_mods = list(_tensors_cuda._mods())
    _tensors_cuda._torch[:] = [torch, lambda dev: 0, torch.uint8]
    patch(_matmul_api, "_cuda_tensors", _all_tensors)
    patch(_tensors_cuda, "_plan_direct", _stand_in_direct)
    patch(_tensors_cuda, "_plan_gemm", _stand_in_gemm)
    patch(_mlp_cuda, "_plan_dgrad", _stand_in_dgrad)
    patch(_calls, "_torch_key", _torch_key_64)
    patch(_matmul_api, "_ALIGN", 63)  # matmul's own copy of the key (see _torch_key_64)
    patch(_calls, "grad_key", _grad_key_64)
    # the machine's "own" GPU (no device provider: a provider makes every call decide afresh)
    state = dict(_device._state)
    _device._state.update(probed=True, gpus=(_device.GPUInfo(0, "stand-in", (9, 0), 80 << 30),),
                          why_not=None, disabled=None)
    patch(_device, "memory_info", lambda device=None: (64 << 30, 80 << 30))
    patch(_device, "_get_device", lambda: 0)
    patch(_budget, "_pool_limit_left", lambda: None)
    from gpulinalg.dense import clear_plan_cache
    clear_plan_cache()
    try:
        with config_context(backend="gpu"):
            yield  # backend="gpu": CPU tensors are host inputs, which "auto" keeps on the CPU
    finally:
        _device._state.clear()
        _device._state.update(state)
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
        _tensors_cuda._torch[:] = torch_mods
        clear_plan_cache()


class SlowRoads:
    """Counts, over a ``with`` block and on every thread (the CUDA backward runs on torch's
    autograd worker thread), of what a repeat step should not do: plans made, public-road
    calls of the layer's products, full dispatch decisions. Only the slow roads are wrapped: the
    repeat path runs unchanged."""

    def __init__(self):
        from gpulinalg._runtime import dispatch
        from gpulinalg.dense import _linear_api
        self.targets = ((_plans_cuda, "_insert", "plans_made"),
                        (_linear_api, "_plan_forward", "public_calls"),
                        (_linear_api, "_plan_backward", "public_calls"),
                        (dispatch, "_decide_and_run", "full_dispatches"))
        self.counts = {"plans_made": 0, "public_calls": 0, "full_dispatches": 0}
        self.saved = []

    def __enter__(self):
        for owner, name, what in self.targets:
            inner = getattr(owner, name)
            self.saved.append((owner, name, inner))

            def counted(*args, _inner=inner, _what=what, **kwargs):
                self.counts[_what] += 1
                return _inner(*args, **kwargs)
            setattr(owner, name, counted)
        return self.counts

    def __exit__(self, *exc):
        for owner, name, inner in reversed(self.saved):
            setattr(owner, name, inner)
        self.saved.clear()
        return False


def _best_us(cases, runs):
    """``{name: µs}``: the best of ``runs`` rounds of ``(fn, calls)`` per case, the cases
    interleaved in every round (so that a busy machine slows them alike)."""
    for fn, _ in cases.values():
        fn()
        fn()
    best = {name: float("inf") for name in cases}
    for _ in range(runs):
        for name, (fn, calls) in cases.items():
            t0 = time.process_time()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.process_time() - t0) / calls)
    return {name: us * 1e6 for name, us in best.items()}


def _step(model, x, grad):
    params = list(model.parameters())

    def run():
        for p in params:
            p.grad = None
        x.grad = None
        model(x).backward(grad)
    return run


def _layers(batch, width, act, dtype=torch.float32):
    from gpulinalg.dense import FusedLinear
    torch.manual_seed(0)
    ours = FusedLinear(width, width, activation=act, dtype=dtype)
    linear = torch.nn.Linear(width, width, dtype=dtype)
    linear.load_state_dict(ours.state_dict())
    ref = torch.nn.Sequential(linear, torch.nn.ReLU() if act == "relu"
                              else torch.nn.GELU(approximate="tanh"))
    x = torch.randn(batch, width, dtype=dtype, requires_grad=True)
    return ours, ref, x, torch.randn(batch, width, dtype=dtype)


def _mlps(batch, width, act, layers=4, dtype=torch.float32):
    """``FusedMLP`` of ``layers`` square layers and its ``nn.Sequential`` (shared parameters)."""
    from gpulinalg.dense import FusedMLP
    torch.manual_seed(0)
    ours = FusedMLP([width] * (layers + 1), activation=act, dtype=dtype)
    ref = ours.to_sequential()
    x = torch.randn(batch, width, dtype=dtype, requires_grad=True)
    return ours, ref, x, torch.randn(batch, width, dtype=dtype)


def measure_mlp(batch=8, width=16, layers=4, calls=500, runs=7):
    """``{case: µs}``: per ``FusedMLP`` training step (stand-in launches) against its
    ``nn.Sequential`` of ``nn.Linear`` + activation on the same CPU tensors, interleaved; an
    inner input (``x`` needs its gradient) and a first-layer input per activation."""
    cases = {}
    with stand_in():
        for act in ("relu", "gelu"):
            for first in (False, True):
                ours, ref, x, grad = _mlps(batch, width, act, layers)
                x.requires_grad_(not first)
                where = "first" if first else "inner"
                cases[f"torch Sequential {layers}x{act} {where} step"] = (_step(ref, x, grad),
                                                                       calls)
                cases[f"ours FusedMLP {layers}x{act} {where} step"] = (_step(ours, x, grad),
                                                                      calls)
        return _best_us(cases, runs)


def measure(batch=8, width=16, calls=2000, runs=7):
    """``{case: µs}``: per matmul call and per FusedLinear step (stand-in launches) against
    torch's on the same CPU tensors, interleaved; an inner layer (``x`` needs its gradient) and
    a first layer (it does not: no ``grad_x`` product) per activation."""
    from gpulinalg.dense import matmul
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(batch, width, generator=g), torch.randn(width, width, generator=g)
    bias = torch.randn(width, generator=g)
    cases = {"torch _addmm_activation": (lambda: torch._addmm_activation(bias, a, b), calls)}
    with stand_in():
        cases["ours matmul per call"] = (lambda: matmul(a, b, bias=bias, activation="relu"),
                                         calls)
        for act in ("relu", "gelu"):
            for first in (False, True):
                ours, ref, x, grad = _layers(batch, width, act)
                x.requires_grad_(not first)
                where = "first" if first else "inner"
                cases[f"torch nn.Linear+{act} {where} step"] = (_step(ref, x, grad), calls // 4)
                cases[f"ours FusedLinear {act} {where} step"] = (_step(ours, x, grad),
                                                                 calls // 4)
        return _best_us(cases, runs)


class _Empty(torch.autograd.Function):
    """An ``autograd.Function`` that saves what ``FusedLinear``'s saves and computes nothing:
    the cost of a Python autograd node's forward by itself."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight, bias)
        ctx.state = (None, True, None, None)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def measure_parts(batch=8, width=16, calls=2000, runs=7):
    """``{part: µs}``: the forward of a repeat ``FusedLinear`` ReLU call taken apart, inner to
    outer (stand-in launch): the engine's launch, the dispatcher's repeat around it, the call's
    key, the layer's product (key, memo and repeat), the product inside the
    ``autograd.Function``, the layer (with and without grad); beside them an empty
    ``autograd.Function`` and torch's ``nn.Linear`` + ReLU (CPU kernels of tiny tensors)."""
    from gpulinalg._runtime.config import get_config
    from gpulinalg._runtime.dispatch import dispatch
    from gpulinalg.dense import _linear_api, _linear_torch
    ours, ref, x, grad = _layers(batch, width, "relu")
    w, b = ours.weight, ours.bias
    options = ("linear", "relu", False)
    with stand_in():
        for _ in range(3):
            ours(x).backward(grad)
        key = _calls.linear_key(x, w, b, options)
        kept = _calls.lookup(key)
        spec = kept.tail[-1]
        assert kept.settings is get_config() and kept.dev is not None  # a kept decision

        def no_grad_layer():
            with torch.no_grad():
                ours(x)
        cases = {
            "engine launch": (lambda: _tensors_cuda.linear(x, w, b, spec), calls),
            "dispatcher repeat + launch": (
                lambda: dispatch(None, key=key, lead=(x, w, b)), calls),
            "call key": (lambda: _calls.linear_key(x, w, b, options), calls),
            "layer product (key, memo, repeat)": (
                lambda: _linear_api.forward_keyed(x, w, b, "relu", False), calls),
            "in the autograd.Function": (
                lambda: _linear_torch._apply(x, w, b, "relu", False), calls),
            "FusedLinear forward": (lambda: ours(x), calls),
            "FusedLinear forward, no grad": (no_grad_layer, calls),
            "empty autograd.Function": (lambda: _Empty.apply(x, w, b), calls),
            "torch nn.Linear + ReLU forward": (lambda: ref(x), calls),
        }
        return _best_us(cases, runs)


def print_profile(fn, calls, limit):
    """Print a cProfile of ``calls`` repeats of ``fn`` (after two unprofiled calls), the
    ``limit`` costliest functions by own time."""
    import cProfile
    import pstats
    fn()
    fn()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(limit)


def profile(act="relu", steps=2000, first=False, limit=25):
    """A cProfile of ``steps`` FusedLinear steps (stand-in launches), by own time."""
    ours, _, x, grad = _layers(8, 16, act)
    x.requires_grad_(not first)
    with stand_in():
        print_profile(_step(ours, x, grad), steps, limit)


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suites.dense_torch_host")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--activation", choices=("relu", "gelu"), default="relu",
                        help="the profiled step's activation")
    parser.add_argument("--first", action="store_true", help="profile a first layer's step")
    parser.add_argument("--mlp", action="store_true",
                        help="FusedMLP (4 layers) against nn.Sequential only")
    parser.add_argument("--parts", action="store_true",
                        help="only the forward of a FusedLinear call taken apart")
    args = parser.parse_args(argv)
    if args.parts:
        results = measure_parts()
    else:
        results = measure_mlp() if args.mlp else {**measure(), **measure_mlp()}
    for case, us in results.items():
        print(f"{case:40s} {us:8.1f} us")
    if args.profile:
        profile(args.activation, first=args.first)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
