"""Torch users' paths of dense: torch in -> torch out, the memo, gradcheck, the custom ops under
torch.compile, autocast, state_dict interchange with nn.Linear (CPU); on the GPU (``gpu``
mark): the fast path on torch's stream and allocator, nn.Linear parity in half precision,
compile with inductor, autocast, CUDA-graph capture (a whole step, and
torch.cuda.make_graphed_callables), 16 threads with their own streams."""

import traceback

import pytest

torch = pytest.importorskip("torch")

from gpulinalg._runtime import memo as _memo  # noqa: E402
from gpulinalg.dense import FusedLinear, matmul, matmul_backward  # noqa: E402
from gpulinalg.dense import _calls  # noqa: E402

from tests.support.threads import run_in_threads  # noqa: E402

REFS = {None: lambda z: z, "relu": torch.relu,
        "gelu": lambda z: torch.nn.functional.gelu(z, approximate="tanh")}


def _model(device="cpu", dtype=torch.float64, width=16):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        FusedLinear(8, width, activation="relu", device=device, dtype=dtype),
        FusedLinear(width, width, activation="gelu", device=device, dtype=dtype),
        FusedLinear(width, 4, device=device, dtype=dtype))


def _reference(model):
    """The same model from nn.Linear + activation modules (a copy of the parameters)."""
    layers = []
    for layer in model:
        layers.append(torch.nn.Linear(layer.in_features, layer.out_features,
                                      bias=layer.bias is not None, device=layer.weight.device,
                                      dtype=layer.weight.dtype))
        layers[-1].load_state_dict(layer.state_dict())
        if layer.activation == "relu":
            layers.append(torch.nn.ReLU())
        elif layer.activation == "gelu":
            layers.append(torch.nn.GELU(approximate="tanh"))
    return torch.nn.Sequential(*layers)


# ---------------------------------------------------------------- CPU


def test_cpu_tensors_in_torch_out_and_memoized():
    torch.manual_seed(0)
    a, b, bias = torch.randn(5, 3), torch.randn(3, 4), torch.randn(4)
    _calls.clear()
    out = matmul(a, b, bias=bias, activation="relu")
    assert isinstance(out, torch.Tensor) and out.dtype == a.dtype and out.device == a.device
    torch.testing.assert_close(out, torch.relu(a @ b + bias))
    assert len(_memo.entries()) == 1
    again = matmul(a, b, bias=bias, activation="relu")  # the memo's entry, not a second one
    assert len(_memo.entries()) == 1
    torch.testing.assert_close(again, out)
    for _ in range(2):  # the second call is the memo's
        grads = matmul_backward(torch.ones(5, 4), a, b, bias=True)
        assert all(isinstance(g, torch.Tensor) for g in grads)
        torch.testing.assert_close(grads.grad_bias, torch.full((4,), 5.0))
        torch.testing.assert_close(grads.grad_a, torch.ones(5, 4) @ b.t())
    with pytest.raises(ValueError, match="aux"):  # not answered from the memo above
        matmul_backward(torch.ones(5, 4), a, b, activation="relu", bias=True)


def test_parameters_are_memoized_like_tensors():
    w = torch.nn.Parameter(torch.randn(4, 3))
    key = _calls.call_key(torch.randn(2, 3), w.t(), None, None, None, 1.0, 0.0, False, None,
                          "auto")
    assert key is not None
    assert _calls.call_key(torch.randn(2, 3), [[1.0]], None, None, None, 1.0, 0.0, False, None,
                           "auto") is None


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias", [True, False])
def test_gradcheck_fused_linear(activation, bias):
    torch.manual_seed(3)
    layer = FusedLinear(5, 3, bias=bias, activation=activation, dtype=torch.float64)
    x = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer, (x,))
    params = [x, layer.weight] + ([layer.bias] if bias else [])
    assert torch.autograd.gradcheck(
        lambda x, w, *b: torch.ops.gpulinalg.fused_linear(
            x.reshape(-1, 5), w, b[0] if b else None, activation or "none", True)[0],
        tuple(params))


class _Product(torch.autograd.Function):
    """``act(a @ b + bias)`` with matmul's forward and matmul_backward's gradients."""

    @staticmethod
    def forward(ctx, a, b, bias, activation):
        out, aux = matmul(a, b, bias=bias, activation=activation, return_aux=True)
        ctx.save_for_backward(a, b)
        ctx.aux, ctx.activation = aux, activation
        return out

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        grads = matmul_backward(g, a, b, aux=ctx.aux, activation=ctx.activation, bias=True)
        return grads.grad_a, grads.grad_b, grads.grad_bias, None


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_gradcheck_matmul_backward(activation):
    torch.manual_seed(4)
    args = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in ((4, 3), (3, 5), (5,))]
    assert torch.autograd.gradcheck(lambda a, b, c: _Product.apply(a, b, c, activation), args)


def test_compile_fullgraph_eager_backend():
    model = _model()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    x = torch.randn(6, 8, dtype=torch.float64, requires_grad=True)
    y = compiled(x)
    y.sum().backward()
    x_ref = x.detach().clone().requires_grad_(True)
    ref = _reference(model)
    y_ref = ref(x_ref)
    y_ref.sum().backward()
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(x.grad, x_ref.grad)
    for layer, lin in zip(model, [m for m in ref if isinstance(m, torch.nn.Linear)]):
        torch.testing.assert_close(layer.weight.grad, lin.weight.grad)


def test_compile_has_no_graph_breaks():
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(_model())(torch.randn(3, 8, dtype=torch.float64))
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


def test_custom_ops_pass_opcheck():
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    for act in ("none", "relu", "gelu"):
        torch.library.opcheck(torch.ops.gpulinalg.fused_linear.default, (x, w, b, act, True),
                              test_utils=("test_schema", "test_faketensor",
                                          "test_autograd_registration"))


def test_state_dict_round_trip_with_linear():
    linear = torch.nn.Linear(6, 3)
    layer = FusedLinear(6, 3, activation="relu")
    layer.load_state_dict(linear.state_dict())
    back = torch.nn.Linear(6, 3)
    back.load_state_dict(layer.state_dict())
    assert layer.state_dict().keys() == linear.state_dict().keys()
    torch.testing.assert_close(back.weight, linear.weight)
    x = torch.randn(2, 6)
    torch.testing.assert_close(layer(x), torch.relu(linear(x)))
    shared = FusedLinear.from_linear(linear, activation="gelu")
    assert shared.weight is linear.weight and shared.bias is linear.bias
    assert shared.activation == "gelu" and shared.weight.device.type == "cpu"
    plain = shared.to_linear()
    assert isinstance(plain, torch.nn.Linear) and plain.weight is linear.weight
    no_bias = FusedLinear.from_linear(torch.nn.Linear(6, 3, bias=False))
    assert no_bias.bias is None and no_bias.to_linear().bias is None


def test_autocast_cpu_bfloat16():
    pytest.importorskip("ml_dtypes")
    layer = FusedLinear(8, 4, activation="relu")
    x = torch.randn(3, 8, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
        y_ref = torch.relu(torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert y.dtype == y_ref.dtype == torch.bfloat16
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32


# ---------------------------------------------------------------- GPU


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    return torch.device("cuda")


HALF_TOL = {torch.float16: dict(rtol=2e-2, atol=2e-2), torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
            torch.float32: dict(rtol=1e-4, atol=1e-4)}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_gpu_layer_matches_linear(dtype, activation):
    dev = _cuda()
    torch.manual_seed(0)
    layer = FusedLinear(96, 128, activation=activation, device=dev, dtype=dtype)
    ref = torch.nn.Linear(96, 128, device=dev, dtype=dtype)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(2, 64, 96, device=dev, dtype=dtype, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    for _ in range(2):  # the second step runs the memoized path
        for p in (x, x_ref, *layer.parameters(), *ref.parameters()):
            p.grad = None
        y, y_ref = layer(x), REFS[activation](ref(x_ref))
        assert y.dtype == dtype and y.is_cuda
        torch.testing.assert_close(y, y_ref, **HALF_TOL[dtype])
        g = torch.randn_like(y)
        y.backward(g)
        y_ref.backward(g)
        tol = HALF_TOL[dtype]
        torch.testing.assert_close(x.grad, x_ref.grad, **tol)
        torch.testing.assert_close(layer.weight.grad, ref.weight.grad,
                                   rtol=tol["rtol"], atol=tol["atol"] * 20)
        torch.testing.assert_close(layer.bias.grad, ref.bias.grad,
                                   rtol=tol["rtol"], atol=tol["atol"] * 20)
        assert layer.weight.grad.is_contiguous()


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_gpu_first_layer_and_frozen_weight_launch_only_what_is_asked(activation):
    """A first layer (input without grad) launches no grad_x product, a frozen layer no
    grad_W/grad_b product; the gradients asked for match nn.Linear's on every step."""
    dev = _cuda()
    torch.manual_seed(0)
    layer = FusedLinear(64, 96, activation=activation, device=dev, dtype=torch.float16)
    ref = torch.nn.Linear(64, 96, device=dev, dtype=torch.float16)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(128, 64, device=dev, dtype=torch.float16)
    g = torch.randn(128, 96, device=dev, dtype=torch.float16)
    tol = HALF_TOL[torch.float16]
    for _ in range(3):  # first call, then memoized repeats
        for p in (*layer.parameters(), *ref.parameters()):
            p.grad = None
        layer(x).backward(g)
        REFS[activation](ref(x)).backward(g)
        torch.testing.assert_close(layer.weight.grad, ref.weight.grad,
                                   rtol=tol["rtol"], atol=tol["atol"] * 20)
        torch.testing.assert_close(layer.bias.grad, ref.bias.grad,
                                   rtol=tol["rtol"], atol=tol["atol"] * 20)
    for p in (*layer.parameters(), *ref.parameters()):
        p.grad = None
    layer.requires_grad_(False)
    ref.requires_grad_(False)
    xg = x.clone().requires_grad_(True)
    xr = x.clone().requires_grad_(True)
    for _ in range(3):
        xg.grad = xr.grad = None
        layer(xg).backward(g)
        REFS[activation](ref(xr)).backward(g)
        torch.testing.assert_close(xg.grad, xr.grad, **tol)
        assert layer.weight.grad is None and layer.bias.grad is None


@pytest.mark.gpu
def test_gpu_fast_path_uses_torch_memory_and_stream():
    dev = _cuda()
    import cupy
    a = torch.randn(256, 128, device=dev, dtype=torch.float16)
    b = torch.randn(128, 64, device=dev, dtype=torch.float16)
    bias = torch.randn(64, device=dev, dtype=torch.float16)
    matmul(a, b, bias=bias, activation="relu")  # plans
    pool = cupy.get_default_memory_pool()
    used = pool.used_bytes()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        outs = [matmul(a, b, bias=bias, activation="relu") for _ in range(20)]
    torch.cuda.current_stream().wait_stream(side)
    assert pool.used_bytes() == used  # results come from torch's caching allocator
    ref = torch.relu(a.float() @ b.float() + bias.float()).half()
    for out in outs:
        assert isinstance(out, torch.Tensor) and out.device == a.device
        torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_gpu_matmul_backward_torch():
    dev = _cuda()
    torch.manual_seed(5)
    a = torch.randn(64, 32, device=dev, dtype=torch.float64)
    b = torch.randn(32, 48, device=dev, dtype=torch.float64)
    g = torch.randn(64, 48, device=dev, dtype=torch.float64)
    for _ in range(2):
        grads = matmul_backward(g, a, b, bias=True)
        torch.testing.assert_close(grads.grad_a, g @ b.t())
        torch.testing.assert_close(grads.grad_b, a.t() @ g)
        torch.testing.assert_close(grads.grad_bias, g.sum(0))


@pytest.mark.gpu
def test_gpu_compile_default_backend():
    dev = _cuda()
    dtype = torch.float16
    model = _model(dev, dtype, width=64)
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(32, 8, device=dev, dtype=dtype)
    y = compiled(x)
    y.float().sum().backward()
    ref = _reference(model)
    torch.testing.assert_close(y, ref(x), **HALF_TOL[dtype])


@pytest.mark.gpu
def test_gpu_compile_reduce_overhead_training_steps():
    """inductor's CUDA graphs around the custom ops: repeated training steps (recorded, then
    replayed) give the eager model's outputs and gradients on new data."""
    dev = _cuda()
    model = _model(dev, torch.float16, width=64)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    x = torch.randn(32, 8, device=dev, dtype=torch.float16)
    for _ in range(4):
        x.copy_(torch.randn_like(x))
        torch.compiler.cudagraph_mark_step_begin()
        y = compiled(x)
        y.float().square().mean().backward()
        got = [y.detach().clone(), *(p.grad.clone() for p in model.parameters())]
        for p in model.parameters():
            p.grad = None
        y_ref = model(x)
        y_ref.float().square().mean().backward()
        want = [y_ref, *(p.grad for p in model.parameters())]
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b.detach(), rtol=1e-2, atol=1e-2)
        for p in model.parameters():
            p.grad = None


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_autocast(dtype):
    dev = _cuda()
    layer = FusedLinear(64, 32, activation="gelu", device=dev)
    x = torch.randn(16, 64, device=dev, requires_grad=True)
    with torch.autocast("cuda", dtype=dtype):
        y = layer(x)
        y_ref = torch.nn.functional.gelu(torch.nn.functional.linear(x, layer.weight, layer.bias),
                                         approximate="tanh")
    assert y.dtype == y_ref.dtype == dtype
    torch.testing.assert_close(y, y_ref, **HALF_TOL[dtype])
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32


@pytest.mark.gpu
def test_gpu_cuda_graph_training_step():
    dev = _cuda()
    model = _model(dev, torch.float16, width=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: replays compare equal grads
    static_x = torch.randn(128, 8, device=dev, dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up: plans, memo entries, workspaces
            opt.zero_grad(set_to_none=True)
            model(static_x).float().square().mean().backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = model(static_x).float().square().mean()
        static_loss.backward()
        opt.step()
    new_x = torch.randn_like(static_x)
    static_x.copy_(new_x)
    graph.replay()
    torch.cuda.synchronize()
    captured = [p.grad.clone() for p in model.parameters()]
    opt.zero_grad(set_to_none=True)
    loss = model(new_x).float().square().mean()
    loss.backward()
    torch.testing.assert_close(static_loss, loss, rtol=1e-3, atol=1e-3)
    for got, p in zip(captured, model.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_gpu_captured_workspace_belongs_to_the_graph():
    """A product whose algorithm needs a workspace (split-K over a long K), captured in a CUDA
    graph: the launch takes its workspace from the graph's pool, so the graph replays right
    after the plan cache was cleared and the freed memory handed out again."""
    from gpulinalg.dense import _plans_cuda, clear_plan_cache
    dev = _cuda()
    clear_plan_cache()
    found = None
    for k in (65536, 131072, 262144):
        a, b = torch.randn(64, k, device=dev), torch.randn(k, 64, device=dev)
        matmul(a, b)
        plan = next(reversed(_plans_cuda._cache.plans.values()))
        if plan.ws_size:
            found = a, b, plan.ws_size
            break
    assert found is not None, "no shape here planned an algorithm with a workspace"
    a, b, ws_size = found
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            matmul(a, b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = matmul(a, b)
    clear_plan_cache()
    junk = [torch.full((ws_size // 4 + 1,), float("nan"), device=dev) for _ in range(16)]
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a @ b, rtol=1e-3, atol=1.0)
    assert all(bool(torch.isnan(j).all()) for j in junk)  # nothing wrote into reused memory


@pytest.mark.gpu
def test_gpu_make_graphed_callables():
    """torch's per-module graphing (forward and backward graphs replayed inside autograd):
    outputs and gradients as the eager layer's on new data."""
    dev = _cuda()
    model = _model(dev, torch.float16, width=64)
    x = torch.randn(128, 8, device=dev, dtype=torch.float16, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (x,))
    for _ in range(2):
        new_x = torch.randn_like(x).requires_grad_()
        y = graphed(new_x)
        y.float().square().mean().backward()
        got = [new_x.grad.clone(), *(p.grad.clone() for p in model.parameters())]
        for p in model.parameters():
            p.grad = None
        ref_x = new_x.detach().clone().requires_grad_()
        y_ref = model(ref_x)
        y_ref.float().square().mean().backward()
        torch.testing.assert_close(y, y_ref, rtol=1e-3, atol=1e-3)
        want = [ref_x.grad, *(p.grad for p in model.parameters())]
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)
        for p in model.parameters():
            p.grad = None


@pytest.mark.gpu
def test_gpu_sixteen_threads_own_streams():
    dev = _cuda()
    errors = []

    def worker(i):
        try:
            stream = torch.cuda.Stream()
            g = torch.Generator(device=dev).manual_seed(i)
            n = 64 + 16 * (i % 4)
            with torch.cuda.stream(stream):
                a = torch.randn(n, 48, device=dev, dtype=torch.float16, generator=g)
                b = torch.randn(48, n, device=dev, dtype=torch.float16, generator=g)
                bias = torch.randn(n, device=dev, dtype=torch.float16, generator=g)
                layer = FusedLinear(48, n, activation="gelu", device=dev, dtype=torch.float16)
                for _ in range(20):
                    out = matmul(a, b, bias=bias, activation="relu")
                    y = layer(a)
                    y.float().sum().backward()
                ref = torch.relu(a.float() @ b.float() + bias.float())
                ref_y = REFS["gelu"](torch.nn.functional.linear(a.float(), layer.weight.float(),
                                                                layer.bias.float()))
            stream.synchronize()
            torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
            torch.testing.assert_close(y.float(), ref_y, rtol=2e-2, atol=2e-2)
        except Exception as exc:  # reported on the main thread
            where = "".join(traceback.format_exception(exc)[-6:])
            errors.append(f"thread {i}: {type(exc).__name__}: {exc}\n{where}")

    run_in_threads(worker, 16)
    assert errors == []


def test_parametrized_weight_is_read_through_the_parametrization():
    from torch.nn.utils import parametrize

    class Double(torch.nn.Module):
        def forward(self, w):
            return 2 * w
    layer = FusedLinear(4, 3, activation="relu", dtype=torch.float64)
    parametrize.register_parametrization(layer, "weight", Double())
    x = torch.randn(2, 4, dtype=torch.float64)
    torch.testing.assert_close(layer(x), torch.relu(x @ layer.weight.t() + layer.bias))
    assert torch.allclose(layer.weight, 2 * layer.parametrizations.weight.original)
